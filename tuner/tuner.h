// The iterative bubble-aware tuner: co-optimises partition, placement and schedule under each
// device's memory capacity, judged by the simulator, and compares against every baseline.
//
// Search (docs/architecture.md, "Tuner"): seeds from every placement family (one stage per
// device; two or more per device in loop and V shapes) with an exact min-max partition (for the
// V shape also the split with exactly balanced device loads) and a set of list-scheduling
// policies, plus recompute where memory is short. Then it iterates four phases until a round
// gains less than 0.01% or the time budget runs out:
//   partition  boundary moves around the stages of the busiest and the most idle devices,
//   rebalance  exact re-partitions with device weights from their busy share, so layers flow
//              to the devices that idle,
//   placement  stage swaps and moves between devices guided by per-device bubble (each
//              followed by a re-partition),
//   schedule   a seeded local search over the list-scheduling policy,
// from the best seed and a few restart points; then (synchronous objective) the best splits are
// rebalanced for their staggered starts; then it kicks the best plan (random larger moves)
// and searches locally again while that helps, the kicks' evaluations stay below those before
// them and the plan is more than 0.2% above the lower bound (computed first); with
// split_schedules the promising splits get a schedule search of their own; last, the best
// plan's list schedule is improved by forward-backward passes (simulator/justify.h) and
// critical-path swaps (simulator/critical_swap.h) when that is faster.
// Small instances (few layers and devices) are searched exhaustively instead. The result is
// never slower than the best fitting baseline: a baseline that wins is returned as the plan.
//
// Deterministic for a seed when the budget is not exhausted (neighbours are evaluated in
// parallel but reduced in a fixed order). Thread-safe: Tune has no shared state.
#ifndef OCTOPIPE_TUNER_TUNER_H_
#define OCTOPIPE_TUNER_TUNER_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "core/clock.h"
#include "core/cluster.h"
#include "core/cost_model.h"
#include "core/model_graph.h"
#include "core/objective.h"
#include "core/plan.h"
#include "core/vocab_parallel_mode.h"
#include "simulator/evaluator.h"
#include "tuner/baselines.h"
#include "tuner/constraints.h"
#include "tuner/lower_bound.h"

namespace octopipe {

// Whether plans split the output layer over the devices (vocabulary parallelism,
// simulator/vocab_parallel.h). kAuto searches with and without it when the head is heavy
// enough to matter (tuner/vocab_choice.h) and keeps the faster plan.

struct TunerOptions {
  int num_devices = 0;       // pipeline devices: the cluster's first P
  int num_microbatches = 0;  // M
  // kSynchronous: first op start to last op end (a global optimizer step, the default).
  // kSteadyState: the period when consecutive iterations overlap.
  Objective objective = Objective::kSynchronous;
  // Wall-clock budget; the best plan so far is returned when it runs out. Larger budgets only
  // help on big pipelines (the search converges earlier on small ones).
  double time_budget_s = 10;
  uint64_t seed = 1;
  // Evaluation threads: by default one per core of the machine the planner runs on.
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  bool link_contention = false;
  int max_chunks = 4;  // most stages per device the seeds consider
  // Under the synchronous objective, a schedule search of its own for the splits whose bound
  // on every schedule is below the best plan (annealed splits, feed-bonus policies, critical-
  // path swaps; the kicks stop at 60% of the budget to leave it time), and the best plan's
  // critical-path swaps last. bench:lower_bound_gap (seeds 1-4): mean gap 2.69-2.95% without
  // it, 2.37-2.51% with it.
  bool split_schedules = true;
  // Calibration: per-layer multipliers of the cost model's seconds (empty: none).
  std::vector<double> layer_time_factors;
  // Exhaustive search when the number of (partition, placement) pairs is at most this.
  int64_t exhaustive_limit = 60000;
  // The clock the time budget is measured on (tests inject a FakeClock, core/fake_clock.h);
  // null: the real monotonic clock. Shared, so options may be copied to a background search.
  std::shared_ptr<const Clock> clock;
  // Polled between evaluations (may be empty): true ends the search as an exhausted budget
  // would (a client that cancelled, a request deadline, a shutdown). The caller decides what
  // the early result is worth.
  std::function<bool()> should_stop;
  // kOn needs a model ending with its head (kFailedPrecondition otherwise).
  VocabParallelMode vocab_parallel = VocabParallelMode::kAuto;
  // What the runtime that will run the plan supports (tuner/constraints.h); the default
  // constrains nothing. The plan returned always meets them; `best_baseline` and the
  // speed-up count only baselines that meet them (the others are still reported).
  ExecutorConstraints constraints;
  // Warm start (e.g. a job's re-plan): this plan's partition and placement are evaluated with
  // every seed policy before the search, when its stages cover the model and its devices
  // exist; otherwise it is ignored. Empty stages: none.
  std::vector<StageAssignment> seed_stages;
  // Called after each phase with the log entry (for progress output on long runs).
  std::function<void(const struct TuneLogEntry&)> progress;
};

// The clock `options`' budget is measured on: options.clock, or the real monotonic clock
// (never null). Searches that split one budget over several Tune calls pass it on.
std::shared_ptr<const Clock> BudgetClockOf(const TunerOptions& options);

struct TuneLogEntry {
  std::string phase;  // "baselines", "seed", "exhaustive", "partition", "placement", "schedule"
  double before_s = 0;  // objective before the phase (inf when nothing fitted yet)
  double after_s = 0;
  int64_t evaluations = 0;
  double wall_s = 0;  // since the start of tuning
  std::string detail;
};

// Where a TuneResult's plan comes from.
enum class PlanOrigin {
  kTuned,           // the tuner's own search
  kBaseline,        // the best fitting baseline (`best_baseline`), which the search did not beat
  kIgnoringMemory,  // nothing fits: the fastest plan found ignoring memory (feasible == false)
};

struct TuneResult {
  // False: nothing fits in memory. Then `plan` is the best-time plan ignoring memory and
  // `required_memory_bytes` says what each device would need for the least-memory plan found.
  bool feasible = false;
  std::string infeasible_reason;
  std::vector<double> required_memory_bytes;

  Plan plan;  // plan.vocab_parallel: whether the answer splits the output layer, and then
              // plan.vocab_shard_columns: the shards it was costed with
  SimResult predicted;
  PlanOrigin origin = PlanOrigin::kTuned;
  std::vector<BaselineResult> baselines;
  std::string best_baseline;  // empty when no baseline fits
  double speedup_vs_best_baseline = 0;  // best fitting baseline objective / ours
  // No plan of any partition, placement or schedule is faster than this (tuner/lower_bound.h),
  // for the objective tuned; `lower_bound_gap` = (ours - bound) / ours.
  LowerBound lower_bound;
  double lower_bound_gap = 0;
  // Whether the answer splits the output layer (= plan.vocab_parallel), and whether plans with
  // it were searched at all (kAuto leaves a light head alone; see the "vocab" log entry).
  bool vocab_parallel = false;
  bool vocab_parallel_tried = false;
  double tuning_wall_s = 0;
  int64_t evaluations = 0;
  bool budget_exhausted = false;
  std::vector<TuneLogEntry> log;
};

// The origin as text for tables, files and the planner's `origin` field: "tuned",
// "baseline:<name>" or "infeasible".
std::string PlanOriginText(const TuneResult& result);

// What `result` scores on the objective (synchronous or steady-state iteration seconds);
// infinity when it is infeasible, so any feasible result compares better.
double TunedObjective(const TuneResult& result, bool steady);

// kInvalidArgument for bad options (naming the field); an infeasible model is a result with
// feasible == false, not an error.
absl::StatusOr<TuneResult> Tune(const ModelGraph& model, const Cluster& cluster,
                                const CostModel& cost_model, const TunerOptions& options);

}  // namespace octopipe

#endif  // OCTOPIPE_TUNER_TUNER_H_
