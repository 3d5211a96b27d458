// ListScheduler: greedy event-driven construction of a schedule.
//
// Time advances through the pipeline; whenever a device can start something, it picks the
// highest-priority *ready* op (data dependencies done and transfers arrived) whose memory fits
// the device's cap, as a SchedulePolicy ranks them. Ops therefore start in non-decreasing time,
// and the resulting order, re-evaluated by the Evaluator, gives the same timing (tested).
// Under recompute, a stage's R is emitted immediately before its B (or BW). Under vocabulary
// parallelism the S and T passes of every device are scheduled like any other op.
//
// The policy is pluggable so the tuner can search over it. The scheduler is deterministic:
// ties go to the lower device, then to the op the policy ranks first, then to the lower
// (kind, stage, micro-batch). Not thread-safe; one per thread.
#ifndef OCTOPIPE_SIMULATOR_LIST_SCHEDULER_H_
#define OCTOPIPE_SIMULATOR_LIST_SCHEDULER_H_

#include <array>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "core/schedule.h"
#include "simulator/problem.h"

namespace octopipe {

// What a policy sees of a device when ranking its ready ops.
struct DeviceState {
  int device = 0;
  double now_s = 0;
  double live_activation_bytes = 0;
  int inflight = 0;  // (stage, micro-batch) pairs with F done and backward not complete
};

class SchedulePolicy {
 public:
  virtual ~SchedulePolicy() = default;
  // Higher runs first. `ready_s` is when the op's inputs are available (<= state.now_s).
  virtual double Priority(const PipelineProblem& problem, const Op& op, double ready_s,
                          const DeviceState& state) const = 0;
};

// The kind whose weight a policy gives an op: a vocabulary S pass ranks as the backward it
// gates (the last stage's B waits on every S), a T pass as the weight gradient it is.
inline constexpr OpKind PolicyKind(OpKind kind) {
  return kind == OpKind::kS ? OpKind::kB : kind == OpKind::kT ? OpKind::kW : kind;
}

// A linear priority: kind weight (of PolicyKind), then earlier micro-batches, then stage order.
// Priority = kind_weight[kind] - microbatch_weight * microbatch + stage_weight * stage
//            - age_weight * ready_s + feed_bonus[stage] (F and BW/B only, see below).
struct WeightedPolicy : SchedulePolicy {
  std::array<double, kNumOpKinds> kind_weight = {2.0, 3.0, 1.0, 3.0, 3.0};  // F, B, W, BW, R
  double microbatch_weight = 1e-3;
  double stage_weight = 1e-6;  // > 0: later stages first (backward nearest the loss)
  double age_weight = 0.0;
  // Per stage (empty: none), added to the priority of its forward (forward_bonus) and of its
  // backward, B or BW (backward_bonus): FeedBonuses ranks first the ops whose output feeds the
  // device that can least afford to wait.
  std::vector<double> forward_bonus;
  std::vector<double> backward_bonus;

  double Priority(const PipelineProblem& problem, const Op& op, double ready_s,
                  const DeviceState& state) const override;
};

// Feed bonuses for WeightedPolicy: a forward F(s) feeds stage s+1's device (the last stage's
// its own, where its backward follows), a backward B(s) stage s-1's (none for stage 0). A
// device's tightness is its staggered bound start_d + M x load_d (the work below its first
// stage's forward, then M times its F + B + W; tuner/staggered_balance.h), scaled to [0, 1]
// between the least and the most tight device; the bonus is `weight` x the fed device's
// tightness. On an irregular split the list scheduler otherwise serves a device's stages by
// kind and micro-batch alone and lets the busiest device wait for inputs during the fill (the
// gap between a split's bound and its schedule in bench:lower_bound_gap). All zero when the
// devices are equally tight or `weight` is 0.
void FeedBonuses(const PipelineProblem& problem, double weight, std::vector<double>* forward,
                 std::vector<double>* backward);

struct ListSchedulerOptions {
  bool split_backward = true;  // B and W as separate ops; false emits BW
  // Per-device cap on live activation bytes (empty: unlimited).
  std::vector<double> activation_cap_bytes;
  // Per-device cap on in-flight (stage, micro-batch) pairs, counting F done and the backward
  // (BW, or W) not yet done (empty: unlimited). A cap of 1F1B's p - d reproduces its memory.
  std::vector<int> inflight_cap;
  // Count a pair as in flight only until its B (instead of its W) when true.
  bool inflight_until_b = false;
  // Polled every kStopPollOps emitted ops when set; true ends the run with kDeadlineExceeded
  // (a tuner's budget or a cancelled request). Not owned.
  const std::function<bool()>* should_stop = nullptr;
};

struct ListScheduleResult {
  Schedule schedule;
  // The scheduler's own timing: first op start to last op end. Evaluating `schedule` with the
  // Evaluator gives the same figure.
  double iteration_time_s = 0;
};

// kResourceExhausted if the caps leave every device unable to proceed (names the device and
// cap); kInvalidArgument for a malformed problem.
absl::StatusOr<ListScheduleResult> ListSchedule(const PipelineProblem& problem,
                                      const SchedulePolicy& policy,
                                      const ListSchedulerOptions& options);

}  // namespace octopipe

#endif  // OCTOPIPE_SIMULATOR_LIST_SCHEDULER_H_
