// Cost-aware ZeroBubble schedules, built the way the ZeroBubble authors' own schedulers build
// them (sail-sg/zero-bubble-pipeline-parallelism): the order is constructed FOR the problem's
// per-stage F, B, W costs, its cross-device transfer times and a memory limit, not at unit cost.
//
//   ZeroBubbleH   the greedy heuristic behind ZeroBubble's `auto_schedule` (its ILP is
//                 disabled upstream): warm-up forwards sized so each stage's first B is not
//                 starved, then one F and one B per micro-batch per stage, W ops filling the
//                 gaps before a dependency arrives and whenever memory forces them. Eight
//                 variants (allow a bubble before the first B, prioritise B, greedy no-bubble
//                 fill) are built.
//                 Memory limit: `pending` x P x the largest per-stage activation (upstream's
//                 --zero-bubble-max-pending-backward: P gives ZB-H1, 2P gives ZB-H2).
//   ZeroBubbleV   the V-schedule builder (upstream `zbv.PipelineGraph.try_v_schedule`): 2P
//                 stages, V-shaped placement, warm-up by chunk, then alternating B and F rounds
//                 with W filling gaps; four variants (fill before F, fill before B), each
//                 refined by re-running with the previous run's per-stage bubbles "approved".
//
// Each builder runs its variants with three cost sets: the problem's own per-stage costs and
// transfer times; upstream runtime's reduction of them (the median stage's F, B, W for every
// stage, one transfer time), on which its heuristics were tuned and which they handle without
// the corner cases per-stage costs expose (a variant can then leave a stage short of forwards
// and is dropped); and unit costs (upstream's schedule before it has profiled). Every order is
// evaluated on the real problem (Evaluator, same link model) and the one with the smallest
// longest per-device span, upstream's objective, is kept; an order the Evaluator rejects
// (incomplete or deadlocked) is never returned.
//                 Memory limit 2P x the largest half-size activation (1F1B's memory).
//
// Generalisations of upstream: it takes one communication cost for every edge; here each edge
// costs the problem's transfer time of that stage's output over that pair of devices. Activation memory: F holds `activation_bytes`, B frees all but `activation_bytes_w`,
// W frees the rest; a problem without activation sizes counts one unit per in-flight
// micro-batch freed at B. Stages that recompute pay R before B (emitted just before it).
//
// Thread-compatible pure functions.
#ifndef OCTOPIPE_SIMULATOR_ZB_SCHEDULES_H_
#define OCTOPIPE_SIMULATOR_ZB_SCHEDULES_H_

#include "absl/status/statusor.h"
#include "core/schedule.h"
#include "simulator/problem.h"

namespace octopipe {

struct ZbScheduleResult {
  Schedule schedule;
  // The Evaluator's figures for the order on the problem: the longest per-device span (first
  // op start to last op end; upstream's objective) and the synchronous iteration time.
  double longest_span_s = 0;
  double makespan_s = 0;
};

// kInvalidArgument unless the problem has one stage per device (stage s on device s) and
// pending >= 1; kResourceExhausted if no variant fits the memory limit.
absl::StatusOr<ZbScheduleResult> ZeroBubbleH(const PipelineProblem& problem, int pending);

// kInvalidArgument unless the problem has 2P stages on P devices in the V-shaped placement
// (stage s on device s for s < P, else 2P - 1 - s); kResourceExhausted if no variant fits.
absl::StatusOr<ZbScheduleResult> ZeroBubbleV(const PipelineProblem& problem);

}  // namespace octopipe

#endif  // OCTOPIPE_SIMULATOR_ZB_SCHEDULES_H_
