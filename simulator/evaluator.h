// Evaluator: runs a fixed schedule against a PipelineProblem and reports timing and memory.
//
// Semantics (DESIGN.md "Simulator semantics"): F(s,m) <- F(s-1,m); B(s,m) <- B(s+1,m), and the
// last stage's B(s,m) <- F(s,m); W(s,m) <- B(s,m); R(s,m) <- F(s,m) and B(s,m) <- R(s,m) when
// stage s recomputes; plus each device's order. An edge between stages on different devices is a
// transfer of `latency + bytes / bandwidth` that overlaps compute. Without link contention the
// evaluation is one longest-path pass over the DAG in topological order, O(ops), over flat
// arrays; with contention it is an event-driven pass (O(ops log ops)) in which the transfers on
// one directed link are served one at a time in order of readiness.
//
// Under vocabulary parallelism (PipelineProblem::vocab_parallel) every device also runs S and
// T passes of its vocabulary shard; the broadcast of the last hidden state is a transfer per
// device and the all-reduce a barrier of vocab_allreduce_s after the last S of the micro-batch
// (pipeline_rules.h), so the pass costs O(ops + devices^2 x micro-batches).
//
// A schedule whose device orders contradict the data dependencies is a deadlock; Evaluate
// returns kInvalidArgument naming the ops on the cycle. Missing, duplicate or misplaced ops are
// also kInvalidArgument, naming the op.
//
// Thread safety: an Evaluator owns scratch buffers reused across calls (no allocation per op
// once warmed up); use one per thread.
#ifndef OCTOPIPE_SIMULATOR_EVALUATOR_H_
#define OCTOPIPE_SIMULATOR_EVALUATOR_H_

#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/statusor.h"
#include "core/schedule.h"
#include "simulator/problem.h"

namespace octopipe {

struct EvalOptions {
  bool timeline = false;       // fill op/transfer start and end times
  bool critical_path = false;  // fill the critical path (implies tracking predecessors)
};

struct DeviceResult {
  double busy_s = 0;
  double first_start_s = 0;  // 0 for a device without ops
  double last_end_s = 0;
  double bubble_ratio = 0;               // 1 - busy / synchronous iteration time
  double steady_state_bubble_ratio = 0;  // 1 - busy / steady-state iteration time
  double peak_memory_bytes = 0;          // static + peak live activations
  bool fits_memory = true;
};

struct TransferRecord {
  int32_t from_device = 0;
  int32_t to_device = 0;
  Op consumer;  // the op that waits for it (F of the next stage or B of the previous one)
  double bytes = 0;
  double start_s = 0;
  double end_s = 0;
};

struct CriticalPathEntry {
  int32_t device = 0;
  Op op;
  double start_s = 0;
  double end_s = 0;
  bool waited_on_transfer = false;  // its start was set by a transfer into it
};

struct SimResult {
  double iteration_time_s = 0;                // synchronous: first op start to last op end
  double steady_state_iteration_time_s = 0;   // longest per-device span
  double bubble_ratio = 0;                    // 1 - sum busy / (devices * iteration time)
  double steady_state_bubble_ratio = 0;
  double tokens_per_s = 0;  // per pipeline, synchronous iteration
  bool fits_memory = true;
  std::vector<DeviceResult> devices;
  // With EvalOptions::timeline: op_start_s[d][i] / op_end_s[d][i] for schedule.ops[d][i].
  std::vector<std::vector<double>> op_start_s;
  std::vector<std::vector<double>> op_end_s;
  std::vector<TransferRecord> transfers;
  std::vector<CriticalPathEntry> critical_path;  // in time order
};

class Evaluator {
 public:
  Evaluator() = default;
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  absl::StatusOr<SimResult> Evaluate(const PipelineProblem& problem, const Schedule& schedule,
                                     const EvalOptions& options = {});

  // Only the synchronous and steady-state iteration times and memory fit, for search loops;
  // skips building per-device results. Same errors as Evaluate.
  struct Summary {
    double iteration_time_s = 0;
    double steady_state_iteration_time_s = 0;
    bool fits_memory = true;
    // Largest (peak - capacity) over devices: how far the worst device is over (<= 0: fits).
    double memory_overflow_bytes = -std::numeric_limits<double>::infinity();
  };
  absl::StatusOr<Summary> EvaluateSummary(const PipelineProblem& problem,
                                          const Schedule& schedule);

 private:
  absl::Status Prepare(const PipelineProblem& problem, const Schedule& schedule);
  // Under vocabulary parallelism every device has an S and a T pass per micro-batch.
  absl::Status CheckVocabPassesPresent(const PipelineProblem& problem) const;
  void ResetTiming(bool track_pred);
  absl::Status RunDag(const PipelineProblem& problem, bool track_pred);
  absl::Status RunEvents(const PipelineProblem& problem, bool track_pred, bool log_transfers);
  absl::Status CycleError(const PipelineProblem& problem, const Schedule& schedule) const;
  void ComputeMemory(const PipelineProblem& problem, const Schedule& schedule,
                     std::vector<double>* peak) const;
  // Iteration times and memory fit of the last run; fills peak_.
  Summary Summarize(const PipelineProblem& problem, const Schedule& schedule);

  // Scratch, indexed by op id = (stage * M + microbatch) * kNumOpKinds + kind (a vocabulary
  // pass's stage is its device).
  std::vector<int32_t> pos_;         // flat schedule position of the op, -1 if absent
  // Indexed by flat position (device 0's order, then device 1's, ...).
  std::vector<Op> ops_;
  std::vector<int32_t> device_;      // device of the op
  std::vector<int32_t> pending_;     // unresolved predecessors
  std::vector<double> ready_;        // earliest start from resolved predecessors
  std::vector<double> start_;
  std::vector<double> end_;
  std::vector<int32_t> pred_;        // flat position of the predecessor that set `ready_`
  std::vector<uint8_t> pred_transfer_;
  std::vector<int32_t> cursor_;    // per device: next op to run
  std::vector<int32_t> worklist_;  // devices that may advance
  std::vector<uint8_t> queued_;
  std::vector<int32_t> device_offset_;
  std::vector<TransferRecord> transfer_log_;
  std::vector<double> peak_;  // per device, of the last run  // served transfers under contention
  int S_ = 0, M_ = 0;
};

// Convenience: a fresh Evaluator, full result.
absl::StatusOr<SimResult> Simulate(const PipelineProblem& problem, const Schedule& schedule,
                                   const EvalOptions& options = {});

}  // namespace octopipe

#endif  // OCTOPIPE_SIMULATOR_EVALUATOR_H_
