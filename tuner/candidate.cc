#include "tuner/candidate.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "simulator/critical_swap.h"
#include "simulator/justify.h"
#include "simulator/pipeline_rules.h"

namespace octopipe {

std::string Policy::ToString() const {
  if (classic >= 0) {
    return absl::StrCat("fixed ", ScheduleKindName(static_cast<ScheduleKind>(classic)), " order");
  }
  return absl::StrFormat(
      "%s, weights F=%g B=%g W=%g BW=%g, micro-batch %g, stage %g, in-flight scale %g%s%s%s",
      split_backward ? "split B/W" : "unsplit BW", kind_weight[0], kind_weight[1],
      kind_weight[2], kind_weight[3], microbatch_weight, stage_weight, inflight_scale,
      feed_weight != 0 ? absl::StrCat(", feed ", feed_weight) : "",
      justify ? ", justified" : "",
      swap_steps > 0 ? absl::StrCat(", ", swap_steps, " critical-path swap steps") : "");
}

std::vector<Policy> SeedPolicies() {
  std::vector<Policy> out;
  Policy zb;
  out.push_back(zb);
  Policy h1 = zb;
  h1.inflight_scale = 1;
  out.push_back(h1);
  Policy h2 = zb;
  h2.inflight_scale = 2;
  out.push_back(h2);
  Policy unsplit = zb;
  unsplit.split_backward = false;
  unsplit.inflight_scale = 1;
  out.push_back(unsplit);
  Policy eager = zb;
  eager.kind_weight = {3.0, 2.0, 1.0, 2.0, 2.0};
  out.push_back(eager);
  return out;
}

std::vector<int> InflightCaps(const Policy& policy, const std::vector<StageAssignment>& stages,
                              int num_devices) {
  if (policy.inflight_scale <= 0) return {};
  const int S = static_cast<int>(stages.size());
  std::vector<int> first(num_devices, S);
  for (int s = S - 1; s >= 0; --s) first[stages[s].device] = s;
  std::vector<int> caps(num_devices, 1);
  for (int d = 0; d < num_devices; ++d) {
    if (first[d] == S) continue;
    caps[d] = std::max(1, static_cast<int>(std::lround(policy.inflight_scale * (S - first[d]))));
  }
  return caps;
}

std::vector<std::vector<int>> SeedPlacements(int devices, int layers, int max_chunks) {
  std::vector<std::vector<int>> out;
  for (int v = 1; v <= max_chunks && v * devices <= layers; ++v) {
    out.push_back(LoopPlacement(devices, v));
    if (v == 2 && devices > 1) out.push_back(VShapePlacement(devices));
  }
  return out;
}

ClassicOrders::ClassicOrders(int devices, int microbatches, int num_layers)
    : devices_(devices), microbatches_(microbatches), num_layers_(num_layers) {
  size_t kinds = 0;
  for (ScheduleKind kind : AllScheduleKinds()) {
    kinds = std::max(kinds, static_cast<size_t>(kind) + 1);
  }
  orders_ = std::vector<Entry>(kinds);
}

const GeneratedSchedule* ClassicOrders::Get(ScheduleKind kind) const {
  const size_t i = static_cast<size_t>(kind);
  if (i >= orders_.size()) return nullptr;
  const Entry& e = orders_[i];
  std::call_once(e.once, [&] {
    generated_.fetch_add(1, std::memory_order_relaxed);
    absl::StatusOr<GeneratedSchedule> g = GenerateSchedule(kind, devices_, 0, microbatches_);
    if (g.ok() && g->num_stages <= num_layers_) {
      e.order = std::make_unique<GeneratedSchedule>(std::move(*g));
    }
  });
  return e.order.get();
}

Schedule WithRecompute(const Schedule& schedule, const std::vector<StageAssignment>& stages) {
  Schedule out;
  out.ops.resize(schedule.ops.size());
  for (size_t d = 0; d < schedule.ops.size(); ++d) {
    out.ops[d].reserve(schedule.ops[d].size() * 4 / 3);
    for (const Op& op : schedule.ops[d]) {
      if (IsBackward(op.kind) && stages[op.stage].recompute) {
        out.ops[d].push_back(Op{OpKind::kR, op.stage, op.microbatch});
      }
      out.ops[d].push_back(op);
    }
  }
  return out;
}

Score CandidateEvaluator::EvaluateClassic(const Candidate& c, Schedule* schedule,
                                          const std::function<bool()>* should_stop) {
  Score score;
  if (problem_.vocab_parallel) {
    score.why_not = "classic orders have no vocabulary passes";
    return score;
  }
  const GeneratedSchedule* g =
      classic_ ? classic_->Get(static_cast<ScheduleKind>(c.policy.classic)) : nullptr;
  if (g == nullptr || g->stage_device.size() != c.stages.size()) {
    score.why_not = "classic order not applicable";
    return score;
  }
  for (size_t s = 0; s < c.stages.size(); ++s) {
    if (c.stages[s].device != g->stage_device[s]) {
      score.why_not = "placement differs from the classic order's";
      return score;
    }
  }
  const ScheduleKind kind = static_cast<ScheduleKind>(c.policy.classic);
  Schedule built;  // the ZB family built for this candidate's costs (R included), or with R
  const Schedule* order = &g->schedule;
  if (BuiltForCosts(kind)) {
    absl::StatusOr<Schedule> s = ScheduleForProblem(kind, g->num_chunks, problem_);
    if (!s.ok()) {
      score.why_not = std::string(s.status().message());
      return score;
    }
    built = std::move(*s);
    order = &built;
  } else {
    bool any_recompute = false;
    for (const StageAssignment& st : c.stages) any_recompute |= st.recompute;
    if (any_recompute) {
      built = WithRecompute(g->schedule, c.stages);
      order = &built;
    }
  }
  EvalOptions eval;
  eval.should_stop = should_stop;
  absl::StatusOr<Evaluator::Summary> sum = evaluator_.EvaluateSummary(problem_, *order, eval);
  if (!sum.ok()) {
    score.why_not = std::string(sum.status().message());
    return score;
  }
  score.scheduled = true;
  score.fits = sum->fits_memory;
  score.iteration_time_s = sum->iteration_time_s;
  score.steady_state_iteration_time_s = sum->steady_state_iteration_time_s;
  if (!score.fits) score.memory_overflow_bytes = std::max(0.0, sum->memory_overflow_bytes);
  if (schedule != nullptr) *schedule = *order;
  return score;
}

Score CandidateEvaluator::Evaluate(const Candidate& c, Schedule* schedule,
                                   const std::function<bool()>* should_stop) {
  Score score;
  builder_.BuildInto(c.stages, num_microbatches_, &problem_);
  problem_.link_contention = contention_;
  const int P = problem_.num_devices;
  options_.split_backward = c.policy.split_backward;
  options_.inflight_until_b = true;
  options_.activation_cap_bytes.resize(P);
  for (int d = 0; d < P; ++d) {
    const double free = problem_.memory_capacity[d] - problem_.static_bytes[d];
    if (free < 0) {
      score.memory_overflow_bytes = std::max(score.memory_overflow_bytes, -free);
      score.why_not = absl::StrCat("device ", d, ": weights, gradients and optimizer state need ",
                                   problem_.static_bytes[d], " bytes of ",
                                   problem_.memory_capacity[d]);
    }
    options_.activation_cap_bytes[d] = std::max(0.0, free);
  }
  if (ignore_memory_) {
    score.memory_overflow_bytes = 0;
    score.why_not.clear();
    options_.activation_cap_bytes.clear();
  }
  if (score.memory_overflow_bytes > 0) return score;
  if (c.policy.classic >= 0) return EvaluateClassic(c, schedule, should_stop);
  options_.inflight_cap = InflightCaps(c.policy, c.stages, P);
  WeightedPolicy policy;
  policy.kind_weight = c.policy.kind_weight;
  policy.microbatch_weight = c.policy.microbatch_weight;
  policy.stage_weight = c.policy.stage_weight;
  if (c.policy.feed_weight != 0) {
    FeedBonuses(problem_, c.policy.feed_weight, &policy.forward_bonus, &policy.backward_bonus);
  }
  options_.should_stop = should_stop;  // a huge candidate's scheduling stops with the budget
  absl::StatusOr<ListScheduleResult> ls = ListSchedule(problem_, policy, options_);
  options_.should_stop = nullptr;
  if (!ls.ok()) {
    score.why_not = std::string(ls.status().message());
    return score;
  }
  EvalOptions eval;
  eval.should_stop = should_stop;
  absl::StatusOr<Evaluator::Summary> sum = evaluator_.EvaluateSummary(problem_, ls->schedule, eval);
  if (!sum.ok()) {
    score.why_not = std::string(sum.status().message());
    return score;
  }
  // An improved order replaces the list schedule when it is faster, no slower in the steady
  // state, and fits (its memory is not controlled: it may hold more activations).
  auto adopt = [&](Schedule* better) {
    absl::StatusOr<Evaluator::Summary> bs = evaluator_.EvaluateSummary(problem_, *better, eval);
    if (bs.ok() && (bs->fits_memory || !sum->fits_memory) &&
        bs->iteration_time_s < sum->iteration_time_s &&
        bs->steady_state_iteration_time_s <= sum->steady_state_iteration_time_s) {
      sum = bs;
      ls->schedule = std::move(*better);
    }
  };
  if (c.policy.justify) {
    JustifyOptions jo;
    jo.should_stop = should_stop;
    absl::StatusOr<JustifyResult> j = JustifySchedule(problem_, ls->schedule, jo);
    if (j.ok() && j->iteration_time_s < j->input_time_s) adopt(&j->schedule);
  }
  if (c.policy.swap_steps > 0) {
    CriticalSwapOptions so;
    so.max_iterations = c.policy.swap_steps;
    so.should_stop = should_stop;
    absl::StatusOr<CriticalSwapResult> sw = CriticalSwapSearch(problem_, ls->schedule, so);
    if (sw.ok() && sw->iteration_time_s < sw->input_time_s) adopt(&sw->schedule);
  }
  score.scheduled = true;
  score.fits = sum->fits_memory;
  score.iteration_time_s = sum->iteration_time_s;
  score.steady_state_iteration_time_s = sum->steady_state_iteration_time_s;
  // The activation caps gate F only; R and pending W can still overshoot: by this much.
  if (!score.fits) score.memory_overflow_bytes = std::max(0.0, sum->memory_overflow_bytes);
  if (schedule != nullptr) *schedule = std::move(ls->schedule);
  return score;
}

absl::StatusOr<SimResult> CandidateEvaluator::Simulate(const Candidate& c,
                                                       const Schedule& schedule,
                                                       const EvalOptions& options) {
  builder_.BuildInto(c.stages, num_microbatches_, &problem_);
  problem_.link_contention = contention_;
  return evaluator_.Evaluate(problem_, schedule, options);
}

}  // namespace octopipe
