// A tuner candidate — partition + placement + recompute (the stages) and a list-scheduling
// policy — and the evaluator that turns it into a schedule and a score.
//
// Evaluation: build the flat problem (O(S) via ProblemBuilder), reject it if a device's
// weights, gradients and optimizer state alone exceed its memory, list-schedule it with each
// device's activation cap (capacity minus static bytes) and the policy's in-flight caps, then
// score the order with the Evaluator. The list scheduler's order is what a plan carries, so a
// candidate's score is exactly what `octopipe simulate --plan` reports.
//
// Thread safety: a CandidateEvaluator owns scratch buffers; use one per thread. It only reads
// the ProblemBuilder, which may be shared.
#ifndef OCTOPIPE_TUNER_CANDIDATE_H_
#define OCTOPIPE_TUNER_CANDIDATE_H_

#include <array>
#include <atomic>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/plan.h"
#include "core/schedule.h"
#include "simulator/evaluator.h"
#include "simulator/list_scheduler.h"
#include "simulator/problem_builder.h"
#include "simulator/schedules.h"

namespace octopipe {

// The list-scheduling policy the tuner searches over.
struct Policy {
  bool split_backward = true;  // B and W separate, W fills bubbles
  std::array<double, kNumOpKinds> kind_weight = {2.0, 3.0, 1.0, 3.0, 3.0};  // F, B, W, BW, R
  double microbatch_weight = 1e-3;  // > 0: older micro-batches first
  double stage_weight = 1e-6;       // > 0: later stages first
  // In-flight cap per device = max(1, round(scale * (stages from its first stage to the end))),
  // counted from F to B; 0 = no cap beyond memory. scale 1 on one stage per device is 1F1B's.
  double inflight_scale = 0;
  // > 0: ops feeding the devices with the least slack first (FeedBonuses,
  // simulator/list_scheduler.h) with this weight.
  double feed_weight = 0;
  // >= 0: instead of list scheduling, use this classic schedule's order (a ScheduleKind) as
  // ScheduleForProblem gives it for the candidate's own problem: the ZB family built for the
  // candidate's costs (what a ZeroBubble user runs, and what the baselines are scored with),
  // the others fixed. The candidate's placement must be that schedule's own.
  int classic = -1;
  // Forward-backward improvement (simulator/justify.h) of the list schedule, kept when it is
  // faster and fits in memory: for irregular splits (many stages per device), whose drain and
  // fill the greedy leaves to chance. Costs about three list schedules.
  bool justify = false;
  // > 0: after the list schedule (and justification), this many steps of the tabu search by
  // swaps on the critical path (simulator/critical_swap.h), kept when faster and fitting.
  int swap_steps = 0;

  std::string ToString() const;
};

struct Candidate {
  std::vector<StageAssignment> stages;
  Policy policy;
};

struct Score {
  bool scheduled = false;  // false: static memory alone does not fit, or no order fits
  bool fits = false;
  double iteration_time_s = std::numeric_limits<double>::infinity();
  double steady_state_iteration_time_s = std::numeric_limits<double>::infinity();
  // Bytes by which the worst device exceeds its capacity (0 when it fits).
  double memory_overflow_bytes = 0;
  std::string why_not;  // when !scheduled

  double objective(bool steady_state) const {
    if (!fits) return std::numeric_limits<double>::infinity();
    return steady_state ? steady_state_iteration_time_s : iteration_time_s;
  }
};

// The classic schedules' generated orders and placements for one (devices, micro-batches),
// generated once and shared read-only by every evaluator. The ZB family's entries give the
// placement and the unit-cost order; candidates use the order built for their costs.
// Each kind's order is generated on its first Get (thread-safe), so a search that runs out of
// time never pays for the kinds it did not reach (at a million stage-micro-batches one ZB
// order takes seconds).
class ClassicOrders {
 public:
  ClassicOrders(int devices, int microbatches, int num_layers);
  // nullptr when the schedule does not apply (too few layers, micro-batch rules).
  const GeneratedSchedule* Get(ScheduleKind kind) const;
  // How many kinds have been generated so far.
  int generated() const { return generated_.load(std::memory_order_relaxed); }

 private:
  struct Entry {
    mutable std::once_flag once;
    mutable std::unique_ptr<GeneratedSchedule> order;
  };
  const int devices_, microbatches_, num_layers_;
  std::vector<Entry> orders_;  // indexed by ScheduleKind
  mutable std::atomic<int> generated_{0};
};

// Adds R(s, m) right before the backward of every micro-batch of each recompute stage.
Schedule WithRecompute(const Schedule& schedule, const std::vector<StageAssignment>& stages);

class CandidateEvaluator {
 public:
  CandidateEvaluator(const ProblemBuilder& builder, int num_microbatches, bool link_contention,
                     const ClassicOrders* classic = nullptr)
      : builder_(builder), num_microbatches_(num_microbatches), contention_(link_contention),
        classic_(classic) {}

  // Scores the candidate; when `schedule` is given, stores the order there. `should_stop`
  // (may be null) is polled during the evaluation of the order (EvalOptions::should_stop): when
  // it fires the candidate is left unscored (not scheduled, why_not says so).
  Score Evaluate(const Candidate& candidate, Schedule* schedule = nullptr,
                 const std::function<bool()>* should_stop = nullptr);

  // Full simulation of a candidate's order (for the final report).
  absl::StatusOr<SimResult> Simulate(const Candidate& candidate, const Schedule& schedule,
                                     const EvalOptions& options = {});

  // Schedules without regard to memory (no static check, no activation caps): what a plan
  // would need, for infeasible answers.
  void set_ignore_memory(bool ignore) { ignore_memory_ = ignore; }

 private:
  Score EvaluateClassic(const Candidate& candidate, Schedule* schedule,
                        const std::function<bool()>* should_stop);

  const ProblemBuilder& builder_;
  int num_microbatches_;
  bool contention_;
  const ClassicOrders* classic_;
  bool ignore_memory_ = false;
  PipelineProblem problem_;
  Evaluator evaluator_;
  ListSchedulerOptions options_;
};

// The list-scheduling policies the tuner seeds every placement with (and searches
// exhaustively on small instances): the ZeroBubble-style greedy limited only by memory, the
// same with 1F1B's and twice 1F1B's in-flight budget, a 1F1B-like unsplit order, and a
// forward-eager variant.
std::vector<Policy> SeedPolicies();

// The placements (stage -> device) the tuner seeds from: the loop placement with v = 1 ..
// max_chunks stages per device while v * devices <= layers (simulator's LoopPlacement), and
// after v = 2 the V shape (VShapePlacement) when there are two devices or more.
std::vector<std::vector<int>> SeedPlacements(int devices, int layers, int max_chunks);

// Per-device in-flight caps for a policy and placement (empty when the policy sets none).
std::vector<int> InflightCaps(const Policy& policy, const std::vector<StageAssignment>& stages,
                              int num_devices);

}  // namespace octopipe

#endif  // OCTOPIPE_TUNER_CANDIDATE_H_
