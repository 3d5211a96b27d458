#include "tuner/vocab_choice.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "simulator/vocab_parallel.h"

namespace octopipe {
namespace {

TuneLogEntry VocabEntry(double before, double after, double wall, std::string detail) {
  TuneLogEntry e;
  e.phase = "vocab";
  e.before_s = before;
  e.after_s = after;
  e.wall_s = wall;
  e.detail = std::move(detail);
  return e;
}

}  // namespace

double HeadShareOfDevice(const ProblemBuilder& plain) {
  const int L = plain.num_layers(), P = plain.num_devices();
  double best = 0;
  for (int d = 0; d < P; ++d) {
    const double total = plain.Work(0, L - 1, d);
    if (total > 0) best = std::max(best, plain.Work(L - 1, L - 1, d) / (total / P));
  }
  return best;
}

double VocabMemoryShareOfDevice(const ProblemBuilder& plain, bool with_embedding) {
  const int L = plain.num_layers(), P = plain.num_devices();
  double best = 0;
  for (int d = 0; d < P; ++d) {
    const double capacity = plain.memory_capacity(d);
    if (!(capacity > 0) || std::isinf(capacity)) continue;
    const double bytes =
        plain.StaticBytes(L - 1, L - 1, d) + (with_embedding ? plain.StaticBytes(0, 0, d) : 0);
    best = std::max(best, bytes / capacity);
  }
  return best;
}

absl::StatusOr<TuneResult> TuneWithAndWithoutVocabParallel(const ModelGraph& model,
                                                           const Cluster& cluster,
                                                           const CostModel& cost_model,
                                                           const TunerOptions& options) {
  const std::shared_ptr<const Clock> clock = BudgetClockOf(options);
  const auto now = [&clock] { return clock->NowSeconds(); };
  const double start = now();
  const bool steady = options.objective == Objective::kSteadyState;
  TunerOptions off = options;
  off.vocab_parallel = VocabParallelMode::kOff;
  off.clock = clock;

  std::string skip;
  bool can_split = false;
  if (options.num_devices < 2) {
    skip = "not tried: one device";
  } else if (absl::Status fit = CheckVocabParallelModel(model, options.num_devices); !fit.ok()) {
    skip = absl::StrCat("not tried: ", fit.message());
  } else {
    can_split = true;
    ASSIGN_OR_RETURN(ProblemBuilder plain,
                     ProblemBuilder::Create(model, cluster, cost_model, options.num_devices,
                                            options.layer_time_factors));
    const double share = HeadShareOfDevice(plain);
    const double memory = VocabMemoryShareOfDevice(plain, SplitsEmbedding(model));
    if (share < kMinHeadShare && memory < kMinVocabMemoryShare) {
      skip = absl::StrFormat(
          "not tried: the head is %.0f%% of a device's share of the work and the vocabulary "
          "layers %.0f%% of its memory",
          100 * share, 100 * memory);
    }
  }
  TuneResult without;
  if (!skip.empty()) {
    ASSIGN_OR_RETURN(without, Tune(model, cluster, cost_model, off));
    if (!can_split || without.feasible) {
      const double obj = TunedObjective(without, steady);
      without.log.push_back(VocabEntry(obj, obj, now() - start, skip));
      if (options.progress) options.progress(without.log.back());
      return without;
    }
    // Nothing fits with the vocabulary layers whole: the split may spread what does not.
  } else {
    off.time_budget_s = options.time_budget_s / 2;
    ASSIGN_OR_RETURN(without, Tune(model, cluster, cost_model, off));
  }
  const double second_start = now() - start;
  TunerOptions on = options;
  on.vocab_parallel = VocabParallelMode::kOn;
  on.clock = clock;
  if (options.progress) {
    on.progress = [&options, second_start](const TuneLogEntry& entry) {
      TuneLogEntry e = entry;
      e.phase = absl::StrCat("vocab:", e.phase);
      e.wall_s += second_start;
      options.progress(e);
    };
  }
  // Past the budget the second search still answers (baselines at least), quickly.
  on.time_budget_s = std::max(options.time_budget_s - second_start, 1e-3);
  ASSIGN_OR_RETURN(TuneResult with, Tune(model, cluster, cost_model, on));

  const double t_without = TunedObjective(without, steady), t_with = TunedObjective(with, steady);
  const bool use = with.vocab_parallel && t_with < t_without;
  TuneResult& pick = use ? with : without;
  const TuneResult& other = use ? without : with;
  std::vector<TuneLogEntry> log = without.log;
  for (TuneLogEntry e : with.log) {
    e.wall_s += second_start;
    e.phase = absl::StrCat("vocab:", e.phase);
    log.push_back(std::move(e));
  }
  log.push_back(VocabEntry(
      t_without, std::min(t_with, t_without), now() - start,
      absl::StrFormat("%s split over %d devices: %.4g s, on %s stage: %.4g s; %s%s",
                      SplitsEmbedding(model) ? "output layer and embedding" : "output layer",
                      options.num_devices, t_with, SplitsEmbedding(model) ? "their" : "its",
                      t_without, use ? "split" : "not split",
                      skip.empty() ? "" : " (tried because nothing fits unsplit)")));
  if (options.progress) options.progress(log.back());
  pick.log = std::move(log);
  // Any plan of either kind is at least the smaller of the two bounds.
  if (other.lower_bound.seconds < pick.lower_bound.seconds) pick.lower_bound = other.lower_bound;
  pick.lower_bound_gap = LowerBoundGap(
      steady ? pick.predicted.steady_state_iteration_time_s : pick.predicted.iteration_time_s,
      pick.lower_bound);
  pick.evaluations = without.evaluations + with.evaluations;
  pick.budget_exhausted = without.budget_exhausted || with.budget_exhausted;
  pick.vocab_parallel_tried = true;
  pick.tuning_wall_s = now() - start;
  return std::move(pick);
}

}  // namespace octopipe
