#include "planner_service/metrics/planner_metrics.h"

#include <string>

#include "core/status_macros.h"

namespace octopipe::metrics {

absl::string_view PlanKindLabel(PlanKind kind) {
  switch (kind) {
    case PlanKind::kOneshot: return "oneshot";
    case PlanKind::kJob: return "job";
  }
  return "unknown";
}

absl::string_view ReplanReasonLabel(ReplanReason reason) { return ReplanReasonName(reason); }

const std::vector<double>& PlannerMetrics::TuningSecondsBuckets() {
  static const auto* buckets =
      new std::vector<double>{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
  return *buckets;
}

absl::StatusOr<std::unique_ptr<PlannerMetrics>> PlannerMetrics::Create(Registry& registry) {
  auto m = std::make_unique<PlannerMetrics>();
  ASSIGN_OR_RETURN(m->plans_computed,
                   registry.AddCounter("octopipe_plans_computed_total",
                                       "Plans computed by the tuner, by kind: oneshot (the Plan "
                                       "RPC) or job (a job's first plan and its re-plans).",
                                       "", {"kind"}));
  ASSIGN_OR_RETURN(m->tuning_seconds,
                   registry.AddHistogram("octopipe_tuning_seconds",
                                         "Wall time of one tuner run, in seconds.", "seconds", {},
                                         TuningSecondsBuckets()));
  ASSIGN_OR_RETURN(m->predicted_iteration_seconds,
                   registry.AddGauge("octopipe_predicted_iteration_seconds",
                                     "Iteration time the simulator predicts for the job's "
                                     "current plan, in seconds.",
                                     "seconds", {"job"}));
  ASSIGN_OR_RETURN(m->predicted_bubble_ratio,
                   registry.AddGauge("octopipe_predicted_bubble_ratio",
                                     "Fraction of device time the job's current plan leaves "
                                     "idle (pipeline bubble), as predicted, 0 to 1.",
                                     "ratio", {"job"}));
  ASSIGN_OR_RETURN(m->replans,
                   registry.AddCounter("octopipe_replans_total",
                                       "Re-plans of running jobs, by reason: measured (profiles "
                                       "drifted from the model), node_failure, drain, node_join.",
                                       "", {"reason"}));
  ASSIGN_OR_RETURN(GaugeFamily * agents_alive,
                   registry.AddGauge("octopipe_agents_alive",
                                     "Agents whose heartbeats are current.", ""));
  ASSIGN_OR_RETURN(m->rpcs, registry.AddCounter("octopipe_rpcs_total",
                                                "Planner RPCs handled, by method and status code.",
                                                "", {"method", "code"}));
  ASSIGN_OR_RETURN(GaugeFamily * jobs,
                   registry.AddGauge("octopipe_jobs", "Jobs the planner manages.", ""));
  ASSIGN_OR_RETURN(m->tuning_queue_depth,
                   registry.AddGauge("octopipe_tuning_queue_depth",
                                     "Tuning tasks waiting, by lane: jobs (first plans and "
                                     "re-plans) and oneshot (Plan calls).",
                                     "", {"lane"}));
  m->tuning_queue_depth->WithLabels({"jobs"}).Set(0);
  m->tuning_queue_depth->WithLabels({"oneshot"}).Set(0);

  m->agents_alive = &agents_alive->WithLabels({});
  m->jobs = &jobs->WithLabels({});
  m->tuning_seconds_child_ = &m->tuning_seconds->WithLabels({});
  for (int i = 0; i < kNumPlanKinds; ++i) {
    m->plans_by_kind_[i] =
        &m->plans_computed->WithLabels({PlanKindLabel(static_cast<PlanKind>(i))});
  }
  for (int i = 0; i < kNumReplanReasons; ++i) {
    m->replans_by_reason_[i] =
        &m->replans->WithLabels({ReplanReasonLabel(static_cast<ReplanReason>(i))});
  }
  return m;
}

Counter& PlannerMetrics::Rpcs(absl::string_view method, absl::StatusCode code) const {
  const std::string code_name = absl::StatusCodeToString(code);
  return rpcs->WithLabels({method, code_name});
}

}  // namespace octopipe::metrics
