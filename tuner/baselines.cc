#include "tuner/baselines.h"

#include "absl/strings/str_cat.h"
#include "simulator/classic_pipeline.h"
#include "simulator/schedules.h"
#include "tuner/partition.h"

namespace octopipe {
namespace {

struct Spec {
  std::string name;
  ScheduleKind kind;
  int chunks;
  bool balanced;
};

// `should_stop` (may be null) is polled inside the simulation; when it fires the baseline has
// not run and says so.
BaselineResult RunOne(const Spec& spec, const ModelGraph& model, const ProblemBuilder& builder,
                      int M, bool contention, const std::function<bool()>* should_stop) {
  BaselineResult out;
  out.name = spec.name;
  absl::StatusOr<Plan> classic =
      ClassicPlan(spec.kind, builder.num_devices(), spec.chunks, M, model);
  if (!classic.ok()) {
    out.error = std::string(classic.status().message());
    return out;
  }
  Plan& plan = out.plan;
  plan = std::move(*classic);
  plan.schedule_name = spec.name;
  if (spec.balanced) {
    std::vector<int> placement;
    for (const StageAssignment& st : plan.stages) placement.push_back(st.device);
    absl::StatusOr<std::vector<StageAssignment>> stages = MinMaxPartition(builder, placement);
    if (!stages.ok()) {
      out.error = std::string(stages.status().message());
      return out;
    }
    plan.stages = *stages;
  }
  absl::StatusOr<PipelineProblem> problem = builder.Build(plan);
  if (!problem.ok()) {
    out.error = std::string(problem.status().message());
    return out;
  }
  problem->link_contention = contention;
  // The ZB family's order is built for this problem's costs, as ZeroBubble does.
  absl::StatusOr<Schedule> order = ScheduleForProblem(spec.kind, spec.chunks, *problem);
  if (!order.ok()) {
    out.error = std::string(order.status().message());
    return out;
  }
  plan.schedule = std::move(*order);
  EvalOptions eval;
  eval.should_stop = should_stop;
  absl::StatusOr<SimResult> result = Simulate(*problem, plan.schedule, eval);
  if (absl::IsDeadlineExceeded(result.status())) {
    out.error = "stopped: time budget exhausted during its simulation";
    return out;
  }
  if (!result.ok()) {
    out.error = std::string(result.status().message());
    return out;
  }
  out.ran = true;
  out.result = std::move(*result);
  out.fits = out.result.fits_memory;
  return out;
}

}  // namespace

std::vector<BaselineResult> RunBaselines(const ModelGraph& model, const ProblemBuilder& builder,
                                         int num_microbatches, bool link_contention,
                                         const std::function<bool()>& should_stop) {
  const std::vector<Spec> specs = {
      {"gpipe", ScheduleKind::kGpipe, 1, false},
      {"1f1b", ScheduleKind::k1F1B, 1, false},
      {"1f1b-balanced", ScheduleKind::k1F1B, 1, true},
      {"interleaved-v2", ScheduleKind::kInterleaved, 2, false},
      {"interleaved-v4", ScheduleKind::kInterleaved, 4, false},
      {"zb-h1", ScheduleKind::kZbH1, 1, false},
      {"zb-h2", ScheduleKind::kZbH2, 1, false},
      {"zb-v", ScheduleKind::kZbV, 2, false},
      {"dualpipev", ScheduleKind::kDualPipeV, 2, false},
  };
  std::vector<BaselineResult> out;
  out.reserve(specs.size());
  for (const Spec& spec : specs) {
    if (out.size() >= 2 && should_stop && should_stop()) {
      BaselineResult skipped;
      skipped.name = spec.name;
      skipped.error = "skipped: time budget exhausted";
      out.push_back(std::move(skipped));
      continue;
    }
    // GPipe and 1F1B always run to the end, so a plan exists; the others stop with the budget.
    out.push_back(RunOne(spec, model, builder, num_microbatches, link_contention,
                         out.size() >= 2 && should_stop ? &should_stop : nullptr));
  }
  return out;
}

const BaselineResult* BestFittingBaseline(const std::vector<BaselineResult>& baselines,
                                          bool steady_state) {
  const BaselineResult* best = nullptr;
  auto objective = [&](const BaselineResult& b) {
    return steady_state ? b.result.steady_state_iteration_time_s : b.result.iteration_time_s;
  };
  for (const BaselineResult& b : baselines) {
    if (!b.ran || !b.fits) continue;
    if (best == nullptr || objective(b) < objective(*best)) best = &b;
  }
  return best;
}

}  // namespace octopipe
