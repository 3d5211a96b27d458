#include "tuner/steady_choice.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "tuner/lower_bound.h"

namespace octopipe {

absl::StatusOr<TuneResult> TuneSteadyFromSynchronous(
    const TunerOptions& options,
    const std::function<absl::StatusOr<TuneResult>(const TunerOptions&)>& search) {
  const std::shared_ptr<const Clock> clock = BudgetClockOf(options);
  const double start = clock->NowSeconds();
  TunerOptions sync = options;
  sync.objective = Objective::kSynchronous;
  sync.clock = clock;
  sync.time_budget_s = options.time_budget_s / 2;
  if (options.progress) {
    sync.progress = [&options](const TuneLogEntry& entry) {
      TuneLogEntry e = entry;
      e.phase = absl::StrCat("sync:", e.phase);
      options.progress(e);
    };
  }
  ASSIGN_OR_RETURN(const TuneResult first, search(sync));
  TunerOptions steady = options;
  steady.clock = clock;
  steady.seed_stages = first.plan.stages;
  const double second_start = clock->NowSeconds() - start;
  steady.time_budget_s = std::max(options.time_budget_s - second_start, 1e-3);
  ASSIGN_OR_RETURN(TuneResult result, search(steady));
  // The warm start tries the synchronous plan's stages with the seed policies, not its exact
  // schedule: when that schedule still has the shorter period, it is the answer, judged as the
  // steady-state search judges (its bound, its best baseline).
  const double from_sync = TunedObjective(first, true), searched = TunedObjective(result, true);
  TuneLogEntry kept;
  kept.phase = "steady";
  kept.before_s = searched;
  kept.after_s = std::min(from_sync, searched);
  kept.wall_s = clock->NowSeconds() - start;
  kept.detail = absl::StrCat("periods: the synchronous plan's ", from_sync,
                             " s, the steady-state search's ", searched, " s; kept ",
                             from_sync < searched ? "the synchronous plan" : "the search's");
  if (from_sync < searched) {
    TuneResult pick = first;
    pick.lower_bound = result.lower_bound;
    pick.best_baseline = result.best_baseline;
    pick.speedup_vs_best_baseline = 0;
    for (const BaselineResult& b : pick.baselines) {
      if (b.name == pick.best_baseline) {
        pick.speedup_vs_best_baseline = b.result.steady_state_iteration_time_s / from_sync;
      }
    }
    pick.lower_bound_gap = LowerBoundGap(from_sync, pick.lower_bound);
    pick.log = std::move(result.log);
    pick.evaluations = result.evaluations;
    pick.budget_exhausted = result.budget_exhausted;
    pick.tuning_wall_s = result.tuning_wall_s;
    result = std::move(pick);
  }
  std::vector<TuneLogEntry> log;
  for (TuneLogEntry e : first.log) {
    e.phase = absl::StrCat("sync:", e.phase);
    log.push_back(std::move(e));
  }
  for (TuneLogEntry e : result.log) {
    e.wall_s += second_start;
    log.push_back(std::move(e));
  }
  log.push_back(std::move(kept));
  if (options.progress) options.progress(log.back());
  result.log = std::move(log);
  result.evaluations += first.evaluations;
  result.budget_exhausted = result.budget_exhausted || first.budget_exhausted;
  result.tuning_wall_s += second_start;
  return result;
}

}  // namespace octopipe
