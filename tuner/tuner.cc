#include "tuner/tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "simulator/problem_builder.h"
#include "simulator/vocab_parallel.h"
#include "tuner/candidate.h"
#include "tuner/infeasibility.h"
#include "tuner/partition.h"
#include "tuner/search.h"
#include "tuner/staggered_balance.h"
#include "tuner/lower_bound.h"
#include "tuner/steady_choice.h"
#include "tuner/vocab_choice.h"
#include "tuner/vshape_partition.h"

namespace octopipe {
namespace {

using tuner_internal::Exhaustive;
using tuner_internal::kInf;
using tuner_internal::PartitionPhase;
using tuner_internal::Perturb;
using tuner_internal::PlacementPhase;
using tuner_internal::RebalancePhase;
using tuner_internal::SchedulePhase;
using tuner_internal::Search;
using tuner_internal::SpaceSize;

// Appends (stages, policy) as it is and with every stage recomputing its activations.
void AppendWithAndWithoutRecompute(const std::vector<StageAssignment>& stages, const Policy& p,
                                   std::vector<Candidate>* out) {
  out->push_back(Candidate{stages, p});
  Candidate r{stages, p};
  for (StageAssignment& st : r.stages) st.recompute = true;
  out->push_back(std::move(r));
}

absl::Status ValidateOptions(const ModelGraph& model, const TunerOptions& options) {
  if (options.num_microbatches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("microbatches must be >= 1, got ", options.num_microbatches));
  }
  if (options.num_devices < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("devices must be >= 1, got ", options.num_devices));
  }
  if (options.num_devices > model.num_layers()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "devices: ", options.num_devices, " devices need at least as many layers, but the model '",
        model.name, "' has ", model.num_layers()));
  }
  if (!(options.time_budget_s > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("time_budget_s must be > 0, got ", options.time_budget_s));
  }
  return ValidateConstraints(options.constraints, model.num_layers(), options.num_devices);
}

std::function<double()> BudgetClock(std::shared_ptr<const Clock> clock) {
  return [clock] { return clock->NowSeconds(); };
}

double BaselineObjective(const BaselineResult& b, bool steady) {
  return steady ? b.result.steady_state_iteration_time_s : b.result.iteration_time_s;
}

// Every classic order with its own placement, on the exact min-max partition and the even
// one, with and without recompute: the baselines' schedules, co-optimised with the partition.
// The ZB family's order is built for each candidate's own costs (ScheduleForProblem, via
// Policy::classic), as the baselines' are, so no baseline's prediction beats its seed's.
void SeedClassicOrders(Search& search, const ProblemBuilder& builder,
                       const ClassicOrders& classic, TuneResult* result) {
  const int L = builder.num_layers(), P = builder.num_devices();
  const int64_t evals = search.evaluations();
  std::vector<Candidate> seeds;
  for (ScheduleKind kind : AllScheduleKinds()) {
    if (search.out_of_time()) break;  // each partition costs O(layers x stages)
    const GeneratedSchedule* g = classic.Get(kind);
    if (g == nullptr) continue;
    Policy p;
    p.classic = static_cast<int>(kind);
    std::vector<std::vector<StageAssignment>> partitions;
    absl::StatusOr<std::vector<StageAssignment>> balanced =
        MinMaxPartition(builder, g->stage_device);
    if (balanced.ok()) {
      partitions.push_back(*balanced);
      if (g->num_stages > P) {
        partitions.push_back(BalanceDeviceLoads(builder, *balanced, std::vector<double>(P, 1.0)));
      }
    }
    std::vector<StageAssignment> even = EvenPartition(L, g->num_stages);
    for (int st = 0; st < g->num_stages; ++st) even[st].device = g->stage_device[st];
    partitions.push_back(even);
    for (const auto& part : partitions) {
      AppendWithAndWithoutRecompute(part, p, &seeds);
    }
  }
  search.EvaluateAll(seeds);
  search.Log(result, "classic", kInf, evals,
             absl::StrCat(seeds.size(), " classic orders on balanced and even partitions"));
}

// Warm start from `stages` (TunerOptions::seed_stages) with every seed policy, when they are
// contiguous over all layers and on existing devices.
void SeedFromStages(Search& search, const ProblemBuilder& builder,
                    const std::vector<StageAssignment>& stages,
                    const std::vector<Policy>& policies, TuneResult* result) {
  if (stages.empty() || search.out_of_time()) return;
  int next = 0;
  for (const StageAssignment& st : stages) {
    if (st.first_layer != next || st.last_layer < st.first_layer || st.device < 0 ||
        st.device >= builder.num_devices()) {
      return;
    }
    next = st.last_layer + 1;
  }
  if (next != builder.num_layers()) return;
  const int64_t evals = search.evaluations();
  std::vector<Candidate> seeds;
  for (const Policy& p : policies) seeds.push_back(Candidate{stages, p});
  search.EvaluateAll(seeds);
  search.Log(result, "warm-start", kInf, evals,
             absl::StrCat("the given plan's ", stages.size(), " stages with ", seeds.size(),
                          " policies"));
}

struct ScoredSeeds {
  std::vector<Candidate> candidates;
  std::vector<Score> scores;
};

// Seeds: every placement family, exact min-max partition, every base policy; the best
// baseline's partition and placement with the base policies; and recompute variants.
ScoredSeeds SeedPlacementFamilies(Search& search, const ProblemBuilder& builder,
                                  const std::vector<Policy>& policies, int max_chunks,
                                  TuneResult* result) {
  const int L = builder.num_layers(), P = builder.num_devices();
  const int64_t evals = search.evaluations();
  const double before_seeds = search.best_objective();
  ScoredSeeds out;
  std::vector<Candidate>& seeds = out.candidates;
  for (const std::vector<int>& placement : SeedPlacements(P, L, max_chunks)) {
    if (search.out_of_time()) break;
    absl::StatusOr<std::vector<StageAssignment>> st = MinMaxPartition(builder, placement);
    if (!st.ok()) continue;
    std::vector<std::vector<StageAssignment>> parts = {*st};
    if (static_cast<int>(st->size()) > P) {
      parts.push_back(BalanceDeviceLoads(builder, *st, std::vector<double>(P, 1.0)));
    }
    for (const auto& part : parts) {
      for (const Policy& p : policies) {
        AppendWithAndWithoutRecompute(part, p, &seeds);
      }
    }
  }
  for (const BaselineResult& b : result->baselines) {
    if (!b.ran) continue;
    for (const Policy& p : policies) seeds.push_back(Candidate{b.plan.stages, p});
  }
  out.scores = search.EvaluateAll(seeds);
  search.Log(result, "seed", before_seeds, evals,
             absl::StrCat(seeds.size(), " seeds over placements, partitions and policies"));
  return out;
}

// Seeds that balance device loads exactly within the V shape (VShapeMinMaxPartition), with
// every seed policy, with and without recompute; appended to `seeds` with their scores.
void AddBalancedVShapeSeeds(Search& search, const ProblemBuilder& builder,
                            const std::vector<Policy>& policies, ScoredSeeds* seeds) {
  if (search.out_of_time()) return;
  const std::vector<StageAssignment> stages = VShapeMinMaxPartition(builder);
  if (stages.empty()) return;
  std::vector<Candidate> batch;
  for (const Policy& p : policies) {
    AppendWithAndWithoutRecompute(stages, p, &batch);
  }
  const std::vector<Score> scores = search.EvaluateAll(batch);
  seeds->candidates.insert(seeds->candidates.end(), batch.begin(), batch.end());
  seeds->scores.insert(seeds->scores.end(), scores.begin(), scores.end());
}

// The synchronous objective's bound-shaped splits (StaggeredRebalance, then StaggeredAnneal with
// split_schedules) of the best plan and of the best few seeds (distinct splits, recompute
// cleared), each with every seed policy, with and without recompute, scored. Returns each
// split's best scored candidate and its time. Not for the steady-state objective, whose bound
// has no start times (BalanceDeviceLoads already shapes for it).
std::vector<std::pair<Candidate, double>> TryStaggeredSplits(
    Search& search, const ProblemBuilder& builder, int num_microbatches, int max_chunks,
    const std::vector<Policy>& policies, const ScoredSeeds& seeds) {
  std::vector<std::pair<double, size_t>> ranked;
  for (size_t i = 0; i < seeds.candidates.size(); ++i) {
    const double obj = seeds.scores[i].objective(false);
    if (obj < kInf) ranked.push_back({obj, i});
  }
  std::stable_sort(ranked.begin(), ranked.end());
  std::vector<const std::vector<StageAssignment>*> starts = {&search.best().stages};
  for (const auto& [obj, i] : ranked) starts.push_back(&seeds.candidates[i].stages);
  std::vector<std::vector<StageAssignment>> from, made;
  for (const std::vector<StageAssignment>* start : starts) {
    if (from.size() >= 4 || search.out_of_time()) break;
    std::vector<StageAssignment> st = *start;
    for (StageAssignment& a : st) a.recompute = false;
    if (std::find(from.begin(), from.end(), st) != from.end()) continue;
    from.push_back(st);
    std::vector<StageAssignment> r =
        StaggeredRebalance(builder, st, num_microbatches, max_chunks, 500, search.stop_check());
    // Annealed from the local search's result: it leaves the local optimum the rounds stop at.
    std::vector<StageAssignment> a =
        search.split_schedules()
            ? StaggeredAnneal(builder, r, num_microbatches, max_chunks, search.seed() + from.size(),
                              int64_t{2000} * builder.num_layers(), search.stop_check())
            : r;
    for (std::vector<StageAssignment>* split : {&r, &a}) {
      if (*split != st && std::find(made.begin(), made.end(), *split) == made.end()) {
        made.push_back(*split);
      }
    }
  }
  std::vector<Candidate> batch;
  for (const auto& st : made) {
    for (const Policy& p : policies) AppendWithAndWithoutRecompute(st, p, &batch);
  }
  if (batch.empty()) return {};
  const std::vector<Score> scores = search.EvaluateAll(batch);
  // Per split, its best candidate (each split has 2 candidates per policy).
  std::vector<std::pair<Candidate, double>> best;
  const size_t per = 2 * policies.size();
  for (size_t k = 0; k < made.size(); ++k) {
    size_t arg = k * per;
    for (size_t q = k * per; q < (k + 1) * per; ++q) {
      if (scores[q].objective(false) < scores[arg].objective(false)) arg = q;
    }
    if (scores[arg].objective(false) < kInf) best.push_back({batch[arg], scores[arg].objective(false)});
  }
  return best;
}

// Tabu steps by critical-path swaps (Policy::swap_steps) for a schedule of `ops` ops: about a
// million op evaluations in all, at most 300 steps.
int SwapSteps(int64_t ops) {
  return static_cast<int>(std::clamp<int64_t>(int64_t{1000000} / std::max<int64_t>(ops, 1), 0, 300));
}

int64_t OpsOf(const Candidate& c, int num_microbatches) {
  return int64_t{3} * static_cast<int64_t>(c.stages.size()) * num_microbatches;
}

// Trials of AnnealSplit on the split bound (O(ops log ops) each) for a split of `ops` ops:
// 3,000 up to ~3,300 ops (every row of bench:lower_bound_gap), fewer on deep pipelines with
// many micro-batches (32 devices x 128 micro-batches: ~400, not seconds of the budget).
int64_t AnnealTrials(int64_t ops) {
  return std::clamp<int64_t>(int64_t{10000000} / std::max<int64_t>(ops, 1), 200, 3000);
}

// The schedule of one split searched on its own: the policy climbed from `start` (rounds of
// perturbations, Perturb; the feed bonuses included), then justified and polished by
// critical-path swaps. For the splits a cheap bound says could beat the best plan but whose
// seed policies' list schedules do not (the staggered splits: irregular, where the greedy
// schedule leaves the busiest device waiting during the fill). The search keeps whatever beats
// its best.
void ScheduleSplit(Search& search, Candidate start, double objective, int num_microbatches) {
  int stale = 0;
  for (int round = 0; round < 20 && stale < 3 && !search.out_of_time(); ++round) {
    std::vector<Candidate> trials;
    for (int q = 0; q < 16; ++q) {
      Candidate c = start;
      c.policy = Perturb(start.policy, search.rng(), true);
      if (q % 4 == 3) c.policy = Perturb(c.policy, search.rng(), true);
      trials.push_back(std::move(c));
    }
    const std::vector<Score> scores = search.EvaluateAll(trials);
    ++stale;
    for (size_t q = 0; q < trials.size(); ++q) {
      if (scores[q].objective(false) < objective) {
        objective = scores[q].objective(false);
        start = trials[q];
        stale = 0;
      }
    }
  }
  if (start.policy.classic < 0 && !search.out_of_time()) {
    start.policy.justify = true;
    start.policy.swap_steps = SwapSteps(OpsOf(start, num_microbatches));
    search.EvaluateAll({start});
  }
}

// ScheduleSplit for the splits whose bound on every schedule (SplitScheduleLowerBound) is below
// the best plan's time, most promising first, at most three: the staggered splits, and the best
// plan's and theirs annealed on that bound itself (AnnealSplit; it charges the fill rate the
// staggered objective leaves out).
void ScheduleStaggeredSplits(Search& search, const ProblemBuilder& builder, int num_microbatches,
                             int max_chunks, std::vector<std::pair<Candidate, double>> splits,
                             TuneResult* result) {
  if (!search.has_best() || search.out_of_time()) return;
  const double before = search.best_objective();
  const int64_t evals = search.evaluations();
  PipelineProblem problem;
  auto bound = [&](const std::vector<StageAssignment>& st) {
    builder.BuildInto(st, num_microbatches, &problem);
    return SplitScheduleLowerBound(problem);
  };
  // Annealed on the split bound: from the best plan's split and the first two staggered ones,
  // list-scheduled with the best plan's policy (unpolished; a classic order fits only its own
  // placement).
  std::vector<std::vector<StageAssignment>> from = {search.best().stages};
  for (size_t k = 0; k < splits.size() && from.size() < 3; ++k) from.push_back(splits[k].first.stages);
  Policy policy = search.best().policy;
  policy.justify = false;
  policy.swap_steps = 0;
  policy.classic = -1;
  std::vector<Candidate> annealed;
  for (size_t k = 0; k < from.size() && !search.out_of_time(); ++k) {
    std::vector<StageAssignment> st = from[k];
    for (StageAssignment& a : st) a.recompute = false;
    std::vector<StageAssignment> a =
        AnnealSplit(builder, st, max_chunks, search.seed() + 17 + k,
                    AnnealTrials(OpsOf(Candidate{st, policy}, num_microbatches)), bound,
                    search.stop_check());
    if (a != st) annealed.push_back(Candidate{std::move(a), policy});
  }
  const std::vector<Score> scores = search.EvaluateAll(annealed);
  for (size_t k = 0; k < annealed.size(); ++k) {
    if (scores[k].objective(false) < kInf) splits.push_back({annealed[k], scores[k].objective(false)});
  }
  std::vector<std::pair<double, size_t>> ranked;
  for (size_t k = 0; k < splits.size(); ++k) {
    const double b = bound(splits[k].first.stages);
    if (b < search.best_objective() * (1 - 1e-6)) ranked.push_back({b, k});
  }
  std::stable_sort(ranked.begin(), ranked.end());
  int searched = 0;
  for (const auto& [b, k] : ranked) {
    if (searched >= 3 || search.out_of_time()) break;
    ++searched;
    ScheduleSplit(search, splits[k].first, splits[k].second, num_microbatches);
  }
  search.Log(result, "split schedules", before, evals,
             absl::StrCat(searched, " splits whose bound is below the best plan (staggered, or "
                                    "annealed on the bound): policy climbed, justified, "
                                    "critical-path swaps"));
}

// Start points after the best candidate so far: the best seed of each other stage count
// (placement family), only seeds within 10% of the best, at most four.
std::vector<size_t> RestartPoints(const Search& search, const ScoredSeeds& seeds) {
  std::vector<std::pair<double, size_t>> ranked;
  for (size_t i = 0; i < seeds.candidates.size(); ++i) {
    const double obj = seeds.scores[i].objective(search.steady());
    if (obj < kInf) ranked.push_back({obj, i});
  }
  std::stable_sort(ranked.begin(), ranked.end());
  std::vector<size_t> restarts;
  std::vector<size_t> stage_counts_started = {
      search.has_current() ? search.current().stages.size() : 0};
  for (const auto& [obj, i] : ranked) {
    // Only seeds close to the best are worth a local search of their own.
    if (obj > 1.10 * search.best_objective() || restarts.size() >= 4) break;
    const size_t S = seeds.candidates[i].stages.size();
    if (std::find(stage_counts_started.begin(), stage_counts_started.end(), S) !=
        stage_counts_started.end()) {
      continue;
    }
    stage_counts_started.push_back(S);
    restarts.push_back(i);
  }
  return restarts;
}

// From the search's incumbent: iterate the phases until a round gains less than 0.01% or the
// budget runs out. Logs each phase when `log_phases` (the kicks log one line each instead).
void LocalSearch(Search& search, const ProblemBuilder& builder, TuneResult* result,
                 bool log_phases = true) {
  auto log = [&](const char* phase, double before, int64_t evals, const std::string& detail) {
    if (log_phases) search.Log(result, phase, before, evals, detail);
  };
  for (int iteration = 0; !search.out_of_time(); ++iteration) {
    const double round_start = search.current_objective();
    bool any = false;
    double before = search.best_objective();
    int64_t evals = search.evaluations();
    any |= PartitionPhase(search, builder);
    log("partition", before, evals, "boundary moves");
    before = search.best_objective();
    evals = search.evaluations();
    any |= RebalancePhase(search, builder);
    log("rebalance", before, evals, "bubble-weighted exact re-partition");
    before = search.best_objective();
    evals = search.evaluations();
    any |= PlacementPhase(search, builder);
    log("placement", before, evals, "stage swaps and moves + re-partition");
    before = search.best_objective();
    evals = search.evaluations();
    any |= SchedulePhase(search, 16);
    log("schedule", before, evals,
               search.has_current() ? search.current().policy.ToString() : "no fitting order");
    if (!any || search.current_objective() > 0.9999 * round_start) break;
  }
}

// A random move of `base` larger than any phase's, to leave its local optimum: a perturbed
// policy, a swap of two stages' devices, shifted boundaries, or a stage split onto another
// device or merged into its neighbour. Placement changes rebalance the device loads.
Candidate Kick(const Candidate& base, const ProblemBuilder& b, int max_chunks,
               std::mt19937_64& rng, bool feed) {
  Candidate c = base;
  c.policy.justify = false;  // the polish is for the final plan, too slow for every move
  c.policy.swap_steps = 0;
  const int S = static_cast<int>(c.stages.size());
  const int P = b.num_devices();
  auto uniform = [&rng](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
  c.policy = Perturb(c.policy, rng, feed);
  bool placement_changed = false;
  switch (uniform(4)) {
    case 0:  // the policy alone, twice perturbed
      c.policy = Perturb(c.policy, rng, feed);
      break;
    case 1: {  // swap the devices of two stages
      const int s = uniform(S), t = uniform(S);
      std::swap(c.stages[s].device, c.stages[t].device);
      placement_changed = c.stages[s].device != c.stages[t].device;
      break;
    }
    case 2:  // shift three boundaries by up to two layers
      for (int i = 0; i < 3 && S > 1; ++i) {
        const int k = 1 + uniform(S - 1);
        const int nf = c.stages[k].first_layer + (uniform(2) == 0 ? -1 : 1) * (1 + uniform(2));
        if (nf <= c.stages[k - 1].first_layer || nf > c.stages[k].last_layer) continue;
        c.stages[k - 1].last_layer = nf - 1;
        c.stages[k].first_layer = nf;
      }
      break;
    default: {  // split a stage onto another device, or merge it into its right neighbour
      const int s = uniform(S);
      StageAssignment& st = c.stages[s];
      std::vector<int> chunks(P, 0);
      for (const StageAssignment& x : c.stages) ++chunks[x.device];
      const int to = uniform(P);
      if (uniform(2) == 0 && st.last_layer > st.first_layer && to != st.device &&
          chunks[to] < max_chunks) {
        StageAssignment right = st;
        right.first_layer = (st.first_layer + st.last_layer + 1) / 2;
        right.device = to;
        st.last_layer = right.first_layer - 1;
        c.stages.insert(c.stages.begin() + s + 1, right);
        placement_changed = true;
      } else if (s + 1 < S) {
        st.last_layer = c.stages[s + 1].last_layer;
        c.stages.erase(c.stages.begin() + s + 1);
        placement_changed = true;
      }
      break;
    }
  }
  if (placement_changed) {
    c.policy.classic = -1;  // a fixed classic order only fits its own placement
    c.stages = BalanceDeviceLoads(b, c.stages, std::vector<double>(P, 1.0));
  }
  return c;
}

// Iterated local search after the restarts: kick the best plan and search locally from there,
// while the budget lasts, the best is more than 0.2% above the lower bound, one of the last
// `kStaleKicks` kicks improved it, and the kicks have evaluated fewer candidates than the
// search before them (so they at most about double the tuning time; counted in evaluations,
// not seconds, so that a seed still gives one plan when the budget is not exhausted).
void KickSearch(Search& search, const ProblemBuilder& builder, int max_chunks,
                TuneResult* result) {
  constexpr int kStaleKicks = 8;
  const double target = 1.002 * result->lower_bound.seconds;
  const double before = search.best_objective();
  const int64_t evals = search.evaluations();
  const int64_t until = 2 * search.evaluations();
  int kicks = 0, improving = 0;
  for (int stale = 0; stale < kStaleKicks && search.has_best() && !search.out_of_time() &&
                      search.evaluations() < until && search.best_objective() > target;
       ++kicks) {
    const double best = search.best_objective();
    const Candidate kicked = Kick(search.best(), builder, max_chunks, search.rng(),
                                   search.split_schedules());
    const std::vector<Score> score = search.EvaluateAll({kicked});
    const double obj = score[0].objective(search.steady());
    if (obj < kInf) {
      search.Restart(kicked, obj);
      LocalSearch(search, builder, result, /*log_phases=*/false);
    }
    if (search.best_objective() < best) {
      stale = 0;
      ++improving;
    } else {
      ++stale;
    }
  }
  search.Log(result, "kicks", before, evals,
             absl::StrCat(kicks, " kicks of the best plan + local search, ", improving,
                          " improved it"));
}

// The best plan's list schedule improved by forward-backward passes (Policy::justify,
// simulator/justify.h), kept when faster on both objectives and fitting: one evaluation.
void JustifyBest(Search& search, int num_microbatches, TuneResult* result) {
  if (!search.has_best() || search.out_of_time()) return;
  if (search.best().policy.classic >= 0) return;
  if (!search.best().policy.justify) {
    const double before = search.best_objective();
    const int64_t evals = search.evaluations();
    Candidate c = search.best();
    c.policy.justify = true;
    search.EvaluateAll({c});
    search.Log(result, "justify", before, evals,
               "the best plan's schedule, backward and forward passes");
  }
  // Then critical-path swaps (synchronous objective: the swaps shorten the critical path).
  if (!search.split_schedules() || search.steady() || search.out_of_time() ||
      search.best().policy.swap_steps > 0) {
    return;
  }
  const double justified = search.best_objective();
  const int64_t evals2 = search.evaluations();
  Candidate w = search.best();
  w.policy.justify = true;
  w.policy.swap_steps = SwapSteps(OpsOf(w, num_microbatches));
  if (w.policy.swap_steps == 0) return;
  search.EvaluateAll({w});
  search.Log(result, "swaps", justified, evals2,
             absl::StrCat("the best plan's schedule, ", w.policy.swap_steps,
                          " tabu steps of critical-path swaps"));
}

// Large instances: seeds, then a local search from the best one and from each restart point,
// then kicks of the best (KickSearch), then the best plan's schedule justified (JustifyBest).
void IterativeSearch(Search& search, const ProblemBuilder& builder,
                     const std::vector<Policy>& policies, int max_chunks, int num_microbatches,
                     TuneResult* result) {
  ScoredSeeds seeds = SeedPlacementFamilies(search, builder, policies, max_chunks, result);
  if (max_chunks >= 2) {
    const double before = search.best_objective();
    const int64_t evals = search.evaluations();
    AddBalancedVShapeSeeds(search, builder, policies, &seeds);
    search.Log(result, "seed", before, evals, "V shape with device loads balanced exactly");
  }
  const std::vector<size_t> restarts = RestartPoints(search, seeds);
  for (size_t start_point = 0; start_point <= restarts.size() && !search.out_of_time();
       ++start_point) {
    if (start_point > 0) {
      const size_t i = restarts[start_point - 1];
      search.Restart(seeds.candidates[i], seeds.scores[i].objective(search.steady()));
      search.Log(result, "restart", search.best_objective(), search.evaluations(),
                 absl::StrCat("local search from the best ", seeds.candidates[i].stages.size(),
                              "-stage seed (", search.current_objective(), " s)"));
    }
    LocalSearch(search, builder, result);
  }
  // After the restarts (so that they start where they did without it): the best plan's split
  // and the best seeds' splits rebalanced for their staggered starts; a local search from the
  // result when one of them is the new best.
  std::vector<std::pair<Candidate, double>> splits;
  if (!search.steady() && !search.out_of_time() && search.has_best()) {
    const double before = search.best_objective();
    const int64_t evals = search.evaluations();
    splits = TryStaggeredSplits(search, builder, num_microbatches, max_chunks, policies, seeds);
    search.Log(result, "staggered", before, evals,
               "the best splits rebalanced (local search and annealing) for their staggered "
               "starts (the bound's assignment term)");
    if (search.best_objective() < before) {
      search.Restart(search.best(), search.best_objective());
      LocalSearch(search, builder, result);
    }
  }
  // With split_schedules, under the synchronous objective, the kicks stop at 60% of the budget:
  // the schedules of the promising splits and the best plan's critical-path swaps
  // (JustifyBest) use the rest.
  const bool split_schedules = search.split_schedules() && !search.steady();
  if (split_schedules) search.set_stop_fraction(0.6);
  KickSearch(search, builder, max_chunks, result);
  if (split_schedules) {
    search.set_stop_fraction(0.85);
    ScheduleStaggeredSplits(search, builder, num_microbatches, max_chunks, splits, result);
  }
  search.set_stop_fraction(0.9);
  JustifyBest(search, num_microbatches, result);
}

// When the budget ran out before the search scheduled any candidate and no baseline fits (a
// short budget on a loaded machine): the fastest baseline that ran, as an answer that fits
// nowhere, saying the search was cut short — not an internal error.
absl::Status AnswerFromBaselinesOnly(const Search& search, TuneResult* result) {
  const BaselineResult* fastest = nullptr;
  for (const BaselineResult& b : result->baselines) {
    if (b.ran && (fastest == nullptr || BaselineObjective(b, search.steady()) <
                                            BaselineObjective(*fastest, search.steady()))) {
      fastest = &b;
    }
  }
  if (fastest == nullptr) return absl::InternalError("tuner: no candidate could be scheduled at all");
  result->plan = fastest->plan;
  result->required_memory_bytes.clear();
  for (const DeviceResult& d : fastest->result.devices) {
    result->required_memory_bytes.push_back(d.peak_memory_bytes);
  }
  result->infeasible_reason = absl::StrCat(
      "no baseline fits in memory, and the time budget ran out before the search could look "
      "for a plan that fits (recompute, other partitions); a larger time budget may find one. "
      "The plan shown is the fastest baseline, ", fastest->name, ", ignoring memory");
  result->origin = PlanOrigin::kIgnoringMemory;
  result->feasible = false;
  return absl::OkStatus();
}

// The answer: our best, unless a baseline is at least as good; when nothing fits, the
// infeasible answer. Fills the plan's stages and schedule, origin, feasibility and, when
// infeasible, the reason and the memory needed.
absl::Status ChooseAnswer(Search& search, const ProblemBuilder& builder, const Cluster& cluster,
                          const ClassicOrders& classic, const TunerOptions& options,
                          const BaselineResult* best_baseline, TuneResult* result) {
  const bool steady = search.steady();
  const double ours = search.best_objective();
  const bool baseline_wins =
      best_baseline != nullptr && BaselineObjective(*best_baseline, steady) <= ours;
  if (search.has_best() && !baseline_wins) {
    const Candidate& c = search.best();
    Schedule schedule;
    search.evaluator().Evaluate(c, &schedule);
    result->plan.stages = c.stages;
    result->plan.schedule = std::move(schedule);
    result->plan.vocab_parallel = builder.vocab_parallel();
    result->origin = PlanOrigin::kTuned;
    result->feasible = true;
    return absl::OkStatus();
  }
  if (best_baseline != nullptr) {
    result->plan = best_baseline->plan;
    result->origin = PlanOrigin::kBaseline;
    result->feasible = true;
    return absl::OkStatus();
  }
  if (!search.has_fastest() && !search.has_closest()) {
    return AnswerFromBaselinesOnly(search, result);
  }
  std::vector<Candidate> pool;
  if (search.has_fastest()) pool.push_back(search.fastest());
  if (search.has_closest()) pool.push_back(search.closest());
  ASSIGN_OR_RETURN(InfeasibleAnswer answer,
                   ExplainInfeasible(builder, cluster, &classic, options.num_microbatches,
                                     options.link_contention, options.max_chunks, pool,
                                     search.has_fastest() ? &search.fastest() : nullptr));
  result->plan.stages = std::move(answer.plan.stages);
  result->plan.schedule = std::move(answer.plan.schedule);
  result->plan.vocab_parallel = builder.vocab_parallel();
  result->required_memory_bytes = std::move(answer.required_memory_bytes);
  result->infeasible_reason = std::move(answer.reason);
  if (result->budget_exhausted && result->evaluations == 0) {
    result->infeasible_reason +=
        "; the search was stopped before evaluating any candidate (a larger time budget may "
        "find a plan that fits)";
  }
  result->origin = PlanOrigin::kIgnoringMemory;
  result->feasible = false;
  return absl::OkStatus();
}

// Names and sizes the plan, simulates it in full (critical path included) and compares it
// with the best fitting baseline.
absl::Status FinishResult(const ProblemBuilder& search_builder, const ProblemBuilder& plain,
                          const TunerOptions& options, const BaselineResult* best_baseline,
                          TuneResult* result) {
  const ProblemBuilder& builder = result->plan.vocab_parallel ? search_builder : plain;
  result->vocab_parallel = result->plan.vocab_parallel;
  // The split head's shards as the search costed them: the plan carries them for the executor.
  result->plan.vocab_shard_columns = builder.vocab_shard_columns();
  const bool steady = options.objective == Objective::kSteadyState;
  result->plan.schedule_name =
      result->origin == PlanOrigin::kTuned ? "octopipe" : PlanOriginText(*result);
  result->plan.num_devices = options.num_devices;
  result->plan.num_microbatches = options.num_microbatches;
  ASSIGN_OR_RETURN(PipelineProblem problem, builder.Build(result->plan));
  problem.link_contention = options.link_contention;
  EvalOptions eval;
  eval.critical_path = true;
  ASSIGN_OR_RETURN(result->predicted, octopipe::Simulate(problem, result->plan.schedule, eval));
  if (best_baseline != nullptr) {
    const double ours_final = steady ? result->predicted.steady_state_iteration_time_s
                                     : result->predicted.iteration_time_s;
    result->speedup_vs_best_baseline = BaselineObjective(*best_baseline, steady) / ours_final;
  }
  result->lower_bound_gap = LowerBoundGap(
      steady ? result->predicted.steady_state_iteration_time_s : result->predicted.iteration_time_s,
      result->lower_bound);
  return absl::OkStatus();
}

}  // namespace

std::shared_ptr<const Clock> BudgetClockOf(const TunerOptions& options) {
  if (options.clock != nullptr) return options.clock;
  return std::shared_ptr<const Clock>(&RealClock::Default(), [](const Clock*) {});
}

double TunedObjective(const TuneResult& result, bool steady) {
  if (!result.feasible) return std::numeric_limits<double>::infinity();
  return steady ? result.predicted.steady_state_iteration_time_s
                : result.predicted.iteration_time_s;
}

std::string PlanOriginText(const TuneResult& result) {
  switch (result.origin) {
    case PlanOrigin::kTuned: return "tuned";
    case PlanOrigin::kBaseline: return absl::StrCat("baseline:", result.best_baseline);
    case PlanOrigin::kIgnoringMemory: return "infeasible";
  }
  return "?";
}

namespace {

absl::StatusOr<TuneResult> TuneSearch(const ModelGraph& model, const Cluster& cluster,
                                      const CostModel& cost_model, const TunerOptions& options) {
  const std::function<double()> now = BudgetClock(BudgetClockOf(options));
  const double start = now();  // the budget covers everything from here
  const bool vocab = options.vocab_parallel == VocabParallelMode::kOn;
  // `builder` is what the search builds problems with; baselines never split the head.
  ASSIGN_OR_RETURN(ProblemBuilder plain,
                   ProblemBuilder::Create(model, cluster, cost_model, options.num_devices,
                                          options.layer_time_factors));
  std::optional<ProblemBuilder> split_head;
  if (vocab) {
    ASSIGN_OR_RETURN(ProblemBuilder b,
                     ProblemBuilder::Create(model, cluster, cost_model, options.num_devices,
                                            options.layer_time_factors, /*vocab_parallel=*/true));
    split_head.emplace(std::move(b));
  }
  const ProblemBuilder& builder = split_head ? *split_head : plain;
  const ClassicOrders classic(options.num_devices, options.num_microbatches, model.num_layers());
  Search search(builder, options, now, start, &classic);
  TuneResult result;
  const bool steady = options.objective == Objective::kSteadyState;
  const int L = model.num_layers(), P = options.num_devices, M = options.num_microbatches;
  // First, so its cost counts against the budget; the search also stops at it.
  // Searched with the head split, a plan may split it: the bound must allow that.
  std::vector<LayerCost> fastest = FastestLayerCosts(builder);
  if (builder.vocab_parallel()) {
    fastest = WithHeadSplit(std::move(fastest), P, builder.split_embedding());
  }
  result.lower_bound = PipelineLowerBound(fastest, P, M, steady);

  result.baselines = RunBaselines(model, plain, M, options.link_contention,
                                  [&search] { return search.out_of_time(); });
  const BaselineResult* best_baseline = BestFittingBaseline(result.baselines, steady);
  if (options.constraints.any()) {  // only a baseline the runtime can run is an answer
    best_baseline = nullptr;
    for (const BaselineResult& b : result.baselines) {
      if (!b.ran || !b.fits || !PlanMeetsConstraints(options.constraints, b.plan)) continue;
      if (best_baseline == nullptr ||
          BaselineObjective(b, steady) < BaselineObjective(*best_baseline, steady)) {
        best_baseline = &b;
      }
    }
  }
  if (best_baseline != nullptr) result.best_baseline = best_baseline->name;
  search.Log(&result, "baselines", kInf, 0,
             best_baseline ? absl::StrCat("best fitting baseline: ", best_baseline->name, " ",
                                          BaselineObjective(*best_baseline, steady), " s")
                           : "no baseline fits in memory");

  const std::vector<Policy> policies = SeedPolicies();
  if (!vocab) SeedClassicOrders(search, builder, classic, &result);  // they have no S/T passes
  if (!options.constraints.fixed_stages.empty()) {
    search.EvaluateAll(ConstraintSeeds(options.constraints, P, policies));
    search.Log(&result, "constraints", kInf, 0, "the fixed partition's start points");
  }
  SeedFromStages(search, builder, options.seed_stages, policies, &result);
  if (search.out_of_time()) {
    search.Log(&result, "seed", search.best_objective(), search.evaluations(),
               "skipped: the time budget ran out before the search");
  } else if (SpaceSize(L, P, options.exhaustive_limit) <= options.exhaustive_limit) {
    const double before_exhaustive = search.best_objective();
    const int64_t evals = search.evaluations();
    Exhaustive(search, builder, policies);
    search.Log(&result, "exhaustive", before_exhaustive, evals,
               "every partition and placement with each seed policy");
  } else {
    IterativeSearch(search, builder, policies, options.max_chunks, options.num_microbatches,
                    &result);
  }
  result.budget_exhausted = search.out_of_time();
  result.evaluations = search.evaluations();

  RETURN_IF_ERROR(ChooseAnswer(search, builder, cluster, classic, options, best_baseline, &result));
  RETURN_IF_ERROR(FinishResult(builder, plain, options, best_baseline, &result));
  result.vocab_parallel_tried = vocab;
  result.tuning_wall_s = search.elapsed();
  return result;
}

}  // namespace

absl::StatusOr<TuneResult> Tune(const ModelGraph& model, const Cluster& cluster,
                                const CostModel& cost_model, const TunerOptions& options) {
  RETURN_IF_ERROR(ValidateOptions(model, options));
  if (options.vocab_parallel == VocabParallelMode::kAuto) {
    return TuneWithAndWithoutVocabParallel(model, cluster, cost_model, options);
  }
  if (options.objective == Objective::kSteadyState && options.seed_stages.empty()) {
    return TuneSteadyFromSynchronous(options, [&](const TunerOptions& o) {
      return TuneSearch(model, cluster, cost_model, o);
    });
  }
  return TuneSearch(model, cluster, cost_model, options);
}

}  // namespace octopipe
