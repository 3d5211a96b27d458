// What an agent and its rank processes exchange through the run directory (local to the node;
// nothing here is shared between nodes):
//   RUN/run.json             RunConfig, written by the agent before starting the ranks
//   RUN/plan.json            the plan (core/convert plan file)
//   RUN/rank-R.jsonl         one IterationRecord per line, appended by rank R after each iteration
//   RUN/rank-R.result.json   RankOutcome, written atomically by rank R when it ends
#ifndef OCTOPIPE_WORKER_AGENT_RUN_FILES_H_
#define OCTOPIPE_WORKER_AGENT_RUN_FILES_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "executor/transport_factory.h"

namespace octopipe::agent {

// Everything a rank process needs besides the plan.
struct RunConfig {
  std::string job_id;
  int64_t plan_version = 0;
  std::string reference_model;  // executor/model_spec text
  int iterations = 1;
  int checkpoint_interval = 0;
  double lr = 1e-3;
  uint64_t data_seed = 7;
  int num_ranks = 1;
  executor::TransportKind transport = executor::TransportKind::kGloo;  // not kInProc
  std::string store_address;       // TcpStoreServer HOST:PORT (rendezvous)
  std::string prefix;              // fresh per run: job/version
  std::string hostname = "127.0.0.1";  // address the ranks listen on
  double timeout_s = 30;           // transport timeout: a lost peer is noticed within it
  std::string checkpoint_dir;      // the job's checkpoint root (local to the node)
  int64_t resume_iteration = -1;   // the checkpoint every rank loads (agreed); -1: newest local
};

// Mean seconds of one (stage, op kind) over a rank's iterations.
struct OpTimeSum {
  double seconds = 0;
  int64_t samples = 0;
};
using StageOpTimes = std::map<std::pair<int, std::string>, OpTimeSum>;  // (stage, "F") -> sum

struct IterationRecord {
  int iteration = 0;
  bool has_loss = false;
  double loss = 0;
  double wall_s = 0;
  double busy_s = 0;  // sum of this rank's op durations
  StageOpTimes ops;   // this iteration's ops
  // Per layer: (layer, "F"/"B"/"W"/"R") -> seconds summed over the micro-batches (a BW op
  // counts as its B and W parts), for per-layer calibration.
  StageOpTimes layer_ops;
  double checkpoint_s = -1;  // seconds of the checkpoint saved after it; -1: none
  // Seconds the rank spent on the agent's bookkeeping (building and writing the previous
  // iteration's record): the agent's overhead per iteration, against wall_s.
  double overhead_s = 0;
};

struct RankOutcome {
  int rank = 0;
  bool ok = false;
  bool stopped = false;  // stopped early at rank 0's request (a plan switch)
  int first_iteration = 0;
  int completed_iterations = 0;
  std::string error;
  StageOpTimes ops;  // summed over the iterations this run made (after the first one)
  // After a failure: the iteration whose state this rank saved from memory (its whole layers,
  // TrainOptions::snapshot_on_failure) and how many layer files; -1 / 0: none.
  int snapshot_iteration = -1;
  int snapshot_layers = 0;
};

std::string RunConfigJson(const RunConfig& config);
absl::StatusOr<RunConfig> ParseRunConfig(const std::string& json);

std::string IterationRecordJson(const IterationRecord& record);
absl::StatusOr<IterationRecord> ParseIterationRecord(const std::string& json);

std::string RankOutcomeJson(const RankOutcome& outcome);
absl::StatusOr<RankOutcome> ParseRankOutcome(const std::string& json);

// File helpers: whole-file read; atomic write (temporary file + rename).
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);
absl::Status WriteFileAtomically(const std::string& path, const std::string& contents);

}  // namespace octopipe::agent

#endif  // OCTOPIPE_WORKER_AGENT_RUN_FILES_H_
