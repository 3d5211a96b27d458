#include "tuner/search.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "tuner/partition.h"

namespace octopipe::tuner_internal {

namespace {

std::vector<int> DeviceOf(const std::vector<StageAssignment>& stages) {
  std::vector<int> out;
  for (const StageAssignment& st : stages) out.push_back(st.device);
  return out;
}

}  // namespace

// Number of (partition, placement) pairs over every stage count: sum_S C(L-1, S-1) P^S,
// saturating at `cap`.
int64_t SpaceSize(int L, int P, int64_t cap) {
  double total = 0, binom = 1, pow = P;
  for (int S = 1; S <= L; ++S) {
    total += binom * pow;
    if (total > cap) return cap + 1;
    binom = binom * (L - S) / S;
    pow *= P;
  }
  return static_cast<int64_t>(total);
}

void Exhaustive(Search& search, const ProblemBuilder& b, const std::vector<Policy>& policies) {
  const int L = b.num_layers(), P = b.num_devices();
  std::vector<Candidate> batch;
  auto flush = [&] {
    search.EvaluateAll(batch);
    batch.clear();
  };
  // Every composition of L into S parts (bit i of `cuts` set: a stage starts at layer i+1),
  // times every placement of the S stages.
  for (uint32_t cuts = 0; cuts < (1u << (L - 1)); ++cuts) {
    if (search.out_of_time()) break;
    std::vector<StageAssignment> stages;
    int first = 0;
    for (int l = 1; l <= L; ++l) {
      if (l == L || (cuts >> (l - 1)) & 1u) {
        StageAssignment st;
        st.first_layer = first;
        st.last_layer = l - 1;
        stages.push_back(st);
        first = l;
      }
    }
    const int S = static_cast<int>(stages.size());
    std::vector<int> digits(S, 0);
    while (true) {
      for (int s = 0; s < S; ++s) stages[s].device = digits[s];
      for (const Policy& p : policies) batch.push_back(Candidate{stages, p});
      if (batch.size() >= 2048) flush();
      int i = 0;
      while (i < S && ++digits[i] == P) digits[i++] = 0;
      if (i == S) break;
    }
  }
  flush();
}

namespace {

// Stages of a fixed placement re-partitioned exactly; keeps recompute flags by stage index.
bool Repartition(const ProblemBuilder& b, Candidate* c) {
  absl::StatusOr<std::vector<StageAssignment>> st = MinMaxPartition(b, DeviceOf(c->stages));
  if (!st.ok()) return false;
  for (size_t s = 0; s < st->size(); ++s) (*st)[s].recompute = c->stages[s].recompute;
  c->stages = *st;
  return true;
}

// Devices ordered by total work, heaviest first.
std::vector<int> DevicesByWork(const ProblemBuilder& b, const std::vector<StageAssignment>& st) {
  std::vector<double> work(b.num_devices(), 0.0);
  for (const StageAssignment& s : st)
    work[s.device] += b.Work(s.first_layer, s.last_layer, s.device);
  std::vector<int> order(b.num_devices());
  for (int d = 0; d < b.num_devices(); ++d) order[d] = d;
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return work[x] > work[y]; });
  return order;
}

}  // namespace

// Partition phase: boundary moves of one or two layers, around the stages of the two busiest
// and the two idlest devices (all boundaries on small pipelines); best improvement, repeated.
bool PartitionPhase(Search& search, const ProblemBuilder& b) {
  bool improved = false;
  for (int round = 0; round < 200 && !search.out_of_time() && search.has_current(); ++round) {
    const Candidate base = search.current();
    const double before = search.current_objective();
    const int S = static_cast<int>(base.stages.size());
    std::vector<int> boundaries;  // boundary k: between stage k-1 and stage k
    if (S <= 24) {
      for (int k = 1; k < S; ++k) boundaries.push_back(k);
    } else {
      const std::vector<int> order = DevicesByWork(b, base.stages);
      std::vector<int> focus = {order[0], order[1], order[order.size() - 1],
                                order[order.size() - 2]};
      for (int s = 0; s < S; ++s) {
        if (std::find(focus.begin(), focus.end(), base.stages[s].device) == focus.end()) continue;
        if (s > 0) boundaries.push_back(s);
        if (s + 1 < S) boundaries.push_back(s + 1);
      }
      std::sort(boundaries.begin(), boundaries.end());
      boundaries.erase(std::unique(boundaries.begin(), boundaries.end()), boundaries.end());
    }
    std::vector<Candidate> moves;
    for (int k : boundaries) {
      for (int delta : {-2, -1, 1, 2}) {
        Candidate c = base;
        StageAssignment& left = c.stages[k - 1];
        StageAssignment& right = c.stages[k];
        const int nf = right.first_layer + delta;
        if (nf <= left.first_layer || nf > right.last_layer) continue;
        left.last_layer = nf - 1;
        right.first_layer = nf;
        moves.push_back(std::move(c));
      }
    }
    search.EvaluateAll(moves);
    if (!(search.current_objective() < before)) break;
    improved = true;
  }
  return improved;
}

// Placement phase: swap the devices of two stages, or move a stage to another device, then
// re-partition exactly for the new placement. Pairs involve the busiest and idlest devices.
bool PlacementPhase(Search& search, const ProblemBuilder& b) {
  if (!search.has_current() || search.out_of_time()) return false;
  const Candidate base = search.current();
  const double before = search.current_objective();
  const int S = static_cast<int>(base.stages.size());
  const int P = b.num_devices();
  if (P < 2) return false;
  const std::vector<int> order = DevicesByWork(b, base.stages);
  std::vector<Candidate> moves;
  std::uniform_int_distribution<int> pick_stage(0, S - 1);
  for (int focus : {order[0], order[P - 1]}) {
    for (int s = 0; s < S; ++s) {
      if (base.stages[s].device != focus) continue;
      // Swap with a few other stages (all on small pipelines, sampled on large ones).
      const int tries = S <= 16 ? S : 6;
      for (int i = 0; i < tries; ++i) {
        const int t = S <= 16 ? i : pick_stage(search.rng());
        if (base.stages[t].device == focus) continue;
        Candidate c = base;
        c.policy.classic = -1;  // a fixed classic order only fits its own placement
        std::swap(c.stages[s].device, c.stages[t].device);
        if (Repartition(b, &c)) moves.push_back(std::move(c));
      }
      // Move it to the least loaded device.
      if (order[P - 1] != focus) {
        Candidate c = base;
        c.policy.classic = -1;
        c.stages[s].device = order[P - 1];
        if (Repartition(b, &c)) moves.push_back(std::move(c));
      }
    }
  }
  search.EvaluateAll(moves);
  return search.current_objective() < before;
}

// Rebalance phase (bubble-driven partition): simulate the best plan, lower the weight of
// devices that idle (busy / iteration time < 1) and re-partition exactly with the weights, so
// layers flow to idle devices across any number of stage boundaries at once. A few rounds of
// multiplicative updates with two step sizes.
bool RebalancePhase(Search& search, const ProblemBuilder& b) {
  if (!search.has_current() || search.out_of_time()) return false;
  const double before = search.current_objective();
  const int P = b.num_devices();
  for (double alpha : {1.0, 0.5, 2.0}) {
    std::vector<double> weight(P, 1.0);
    Candidate current = search.current();
    for (int round = 0; round < 6 && !search.out_of_time(); ++round) {
      Schedule schedule;
      CandidateEvaluator& ev = search.evaluator();
      if (!ev.Evaluate(current, &schedule, search.stop_check()).scheduled) break;
      EvalOptions eval;
      eval.should_stop = search.stop_check();
      absl::StatusOr<SimResult> sim = ev.Simulate(current, schedule, eval);
      if (!sim.ok()) break;
      const double T = search.steady() ? sim->steady_state_iteration_time_s : sim->iteration_time_s;
      if (!(T > 0)) break;
      for (int d = 0; d < P; ++d) {
        const double busy = std::max(sim->devices[d].busy_s, 1e-3 * T);
        weight[d] *= std::pow(busy / T, alpha);
      }
      Candidate next = current;
      absl::StatusOr<std::vector<StageAssignment>> st =
          WeightedMinMaxPartition(b, DeviceOf(current.stages), weight);
      if (!st.ok()) break;
      for (size_t s = 0; s < st->size(); ++s) (*st)[s].recompute = current.stages[s].recompute;
      next.stages = BalanceDeviceLoads(b, *st, weight);
      std::vector<Candidate> batch = {next};
      Candidate with_list = next;  // a fixed classic order may suit the new split less
      if (with_list.policy.classic >= 0) {
        with_list.policy = Policy{};
        batch.push_back(with_list);
      }
      search.EvaluateAll(batch);
      current = next;
    }
  }
  return search.current_objective() < before;
}

Policy Perturb(const Policy& p, std::mt19937_64& rng, bool feed) {
  Policy q = p;
  q.classic = -1;  // perturbing a fixed classic order means list scheduling instead
  std::uniform_int_distribution<int> which(0, feed ? 6 : 5);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  switch (which(rng)) {
    case 0:
      q.split_backward = !q.split_backward;
      break;
    case 1: {
      const int k = static_cast<int>(unit(rng) * 3);  // F, B or W
      q.kind_weight[k] = 0.5 + 3.0 * unit(rng);
      q.kind_weight[3] = q.kind_weight[1];
      q.kind_weight[4] = q.kind_weight[1];
      break;
    }
    case 2:
      q.microbatch_weight = (unit(rng) < 0.8 ? 1 : -1) * std::pow(10, -1 - 3 * unit(rng));
      break;
    case 3:
      q.stage_weight = (unit(rng) < 0.5 ? 1 : -1) * std::pow(10, -1 - 5 * unit(rng));
      break;
    case 4: {
      const double scales[] = {0, 0.5, 0.75, 1, 1.25, 1.5, 2, 3};
      q.inflight_scale = scales[static_cast<int>(unit(rng) * 8) % 8];
      break;
    }
    case 6: {
      const double feeds[] = {0, 0.01, 0.1, 0.3, 1, 3};
      q.feed_weight = feeds[static_cast<int>(unit(rng) * 6) % 6];
      break;
    }
    case 5:
    default:
      q.kind_weight = {2.0 + unit(rng), 2.0 + unit(rng), unit(rng) * 2.0, 0, 0};
      q.kind_weight[3] = q.kind_weight[1];
      q.kind_weight[4] = q.kind_weight[1];
      break;
  }
  return q;
}

// Schedule phase: random local search over the policy (seeded), plus recompute toggles on the
// stages of the device with the most memory pressure when that helps.
bool SchedulePhase(Search& search, int trials) {
  if (!search.has_current() || search.out_of_time()) return false;
  const double before = search.current_objective();
  const Candidate base = search.current();
  std::vector<Candidate> moves;
  for (int i = 0; i < trials; ++i) {
    Candidate c = base;
    c.policy = Perturb(base.policy, search.rng(), search.split_schedules());
    if (i % 4 == 3) c.policy = Perturb(c.policy, search.rng(), search.split_schedules());
    moves.push_back(std::move(c));
  }
  // Recompute toggles: early stages hold the most micro-batches in flight, so try them first.
  const int S = static_cast<int>(base.stages.size());
  for (int s = 0; s < std::min(S, 12); ++s) {
    Candidate c = base;
    c.stages[s].recompute = !c.stages[s].recompute;
    moves.push_back(std::move(c));
  }
  search.EvaluateAll(moves);
  return search.current_objective() < before;
}

}  // namespace octopipe::tuner_internal
