// Forward-backward improvement ("justification") of a schedule: the device orders of a valid
// schedule are rebuilt by alternating two serial schedule-generation passes with insertion,
// the resource-constrained project scheduling heuristic of Li & Willis (1992) and Valls,
// Ballestin & Quintanilla (2005):
//   backward  the ops, latest-finishing first, each placed as LATE as its successors (already
//             placed) and its device's free intervals allow — the drain is packed against the
//             end, each op into the latest gap of its device that holds it;
//   forward   the ops, in the order of their starts in the backward pass, each placed as EARLY
//             as its predecessors and its device's free intervals allow.
// Processing a feasible schedule's ops by their start times, every op finds a slot no later
// than its start there, so a forward pass never ends later than the backward pass before it,
// nor that one later than the forward pass before it: the iteration time never grows. The
// result is the best forward pass's order (each device's ops by start time).
//
// Greedy list schedules (simulator/list_scheduler.h) decide each device's next op by local
// rules; on irregular splits (a device holding many non-adjacent stages) they leave the drain
// of the lowest layers and the fill of late-starting devices to chance. The backward pass
// sees the drain from the end, where the list scheduler cannot.
//
// Timing is the evaluator's without link contention (pipeline_rules.h: durations, data edges,
// EdgeDelay) but for a split embedding's per-device start and end (DeviceEarliestStart,
// DeviceEnd), which it leaves out; memory is not considered — the caller evaluates the result (it may hold more
// activations than the input). Under recompute R stays immediately before its backward: the
// two are placed as one block, R first (R needs only its F, the backward its upstream
// gradient R seconds into the block).
//
// O(passes x ops x (log ops + gap scan)); allocation per call only. Thread-compatible.
#ifndef OCTOPIPE_SIMULATOR_JUSTIFY_H_
#define OCTOPIPE_SIMULATOR_JUSTIFY_H_

#include <functional>

#include "absl/status/statusor.h"
#include "core/schedule.h"
#include "simulator/problem.h"

namespace octopipe {

struct JustifyOptions {
  // Backward + forward pairs at most; stops earlier when a pair gains less than 1e-9 relative.
  int max_passes = 3;
  // Polled once per pass; true ends with the best order so far. Not owned; may be null.
  const std::function<bool()>* should_stop = nullptr;
};

struct JustifyResult {
  Schedule schedule;
  double iteration_time_s = 0;  // without link contention: what the Evaluator reports
  double input_time_s = 0;      // the input schedule's, the same way
  int passes = 0;               // backward + forward pairs run
};

// kInvalidArgument when `schedule` is not a complete, deadlock-free schedule of `pb` (missing
// or duplicate ops, a cycle).
absl::StatusOr<JustifyResult> JustifySchedule(const PipelineProblem& pb, const Schedule& schedule,
                                              const JustifyOptions& options = {});

}  // namespace octopipe

#endif  // OCTOPIPE_SIMULATOR_JUSTIFY_H_
