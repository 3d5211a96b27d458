// The rank side of a run: one process per device, started by the agent's RankLauncher (the
// agent binary in rank mode). Reads RUN/run.json and RUN/plan.json, connects to the other
// ranks through the run's TCP store, trains from the newest complete checkpoint (checkpointing
// as configured and at the end), appends one record per iteration to RUN/rank-R.jsonl and
// writes RUN/rank-R.result.json. SIGUSR1 asks rank 0 to stop at the next iteration boundary
// (the decision is sent to every rank; all checkpoint and exit with stopped = true).
#ifndef OCTOPIPE_WORKER_AGENT_RANK_MAIN_H_
#define OCTOPIPE_WORKER_AGENT_RANK_MAIN_H_

#include <string>

namespace octopipe::agent {

// Returns the process exit code: 0 when the rank completed or stopped on request, 1 on error
// (described in the result file and on stderr).
int RunRankProcess(const std::string& run_dir, int rank, int local_device);

}  // namespace octopipe::agent

#endif  // OCTOPIPE_WORKER_AGENT_RANK_MAIN_H_
