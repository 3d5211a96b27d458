// RankLauncher: starts and supervises the rank processes of one run on this node — one per
// plan device the node holds — by fork/exec of the agent binary in rank mode
// (`BINARY --rank_run_dir=RUN --rank=R --rank_device=D`). Children die with the agent
// (PR_SET_PDEATHSIG), so a kill -9 of the agent takes its ranks with it and their peers fail
// fast instead of training on with half a pipeline.
//
// Not thread-safe: the agent's loop owns it.
#ifndef OCTOPIPE_WORKER_AGENT_RANK_LAUNCHER_H_
#define OCTOPIPE_WORKER_AGENT_RANK_LAUNCHER_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/optional.h"
#include "worker_agent/run_files.h"

namespace octopipe::agent {

struct LocalRank {
  int rank = 0;          // plan device
  int local_device = 0;  // device index on this node
};

class RankLauncher {
 public:
  explicit RankLauncher(std::string binary) : binary_(std::move(binary)) {}
  ~RankLauncher();  // kills and reaps running ranks

  // Starts one process per local rank in `run_dir` (which must hold run.json and plan.json).
  // kFailedPrecondition while a run is active; kInternal naming the rank when fork fails
  // (the ranks already started are killed).
  absl::Status Start(const std::string& run_dir, const std::vector<LocalRank>& ranks);

  bool active() const { return !procs_.empty(); }
  bool HoldsRank(int rank) const;
  // The process ids of the ranks still running (for diagnostics and fault-injection tests).
  std::vector<pid_t> pids() const;

  // Asks rank 0 (if it runs here) to stop at the next iteration boundary (SIGUSR1; safe to
  // repeat).
  void RequestStop();
  // SIGKILLs every rank of the run.
  void KillAll();

  // Reaps exited ranks without blocking. When every rank has exited, returns their outcomes
  // (from the result files; a rank that died without one gets ok = false and an error saying
  // how it died) and the launcher becomes inactive; otherwise nullopt.
  absl::optional<std::vector<RankOutcome>> Poll();

 private:
  struct Proc {
    LocalRank rank;
    pid_t pid = -1;
    bool exited = false;
    int status = 0;
  };
  const std::string binary_;
  std::string run_dir_;
  std::vector<Proc> procs_;
};

}  // namespace octopipe::agent

#endif  // OCTOPIPE_WORKER_AGENT_RANK_LAUNCHER_H_
