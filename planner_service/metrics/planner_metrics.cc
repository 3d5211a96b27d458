#include "planner_service/metrics/planner_metrics.h"

#include <stdexcept>

#include "absl/strings/str_cat.h"

namespace octopipe::metrics {

absl::string_view PlanKindLabel(PlanKind kind) {
  switch (kind) {
    case PlanKind::kOneshot: return "oneshot";
    case PlanKind::kJob: return "job";
  }
  return "unknown";
}

const std::vector<double>& PlannerMetrics::TuningSecondsBuckets() {
  static const auto* buckets =
      new std::vector<double>{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
  return *buckets;
}

absl::StatusOr<std::unique_ptr<PlannerMetrics>> PlannerMetrics::Create(
    prometheus::Registry& registry) {
  std::unique_ptr<PlannerMetrics> m(new PlannerMetrics());
  // prometheus-cpp reports a refused declaration by throwing std::invalid_argument.
  try {
    m->plans_computed_ = &prometheus::BuildCounter()
                              .Name("octopipe_plans_computed_total")
                              .Help("Plans computed by the tuner, by kind: oneshot (the Plan "
                                    "RPC) or job (a job's first plan and its re-plans).")
                              .Register(registry);
    auto& tuning = prometheus::BuildHistogram()
                       .Name("octopipe_tuning_seconds")
                       .Help("Wall time of one tuner run, in seconds.")
                       .Register(registry);
    m->predicted_iteration_ = &prometheus::BuildGauge()
                                   .Name("octopipe_predicted_iteration_seconds")
                                   .Help("Iteration time the simulator predicts for the job's "
                                         "current plan, in seconds.")
                                   .Register(registry);
    m->predicted_bubble_ = &prometheus::BuildGauge()
                                .Name("octopipe_predicted_bubble_ratio")
                                .Help("Fraction of device time the job's current plan leaves "
                                      "idle (pipeline bubble), as predicted, ratio 0 to 1.")
                                .Register(registry);
    m->measured_iteration_ = &prometheus::BuildGauge()
                                  .Name("octopipe_measured_iteration_seconds")
                                  .Help("Iteration time the job's agents measured on its "
                                        "current plan: the slowest device's mean, in seconds.")
                                  .Register(registry);
    m->measured_bubble_ = &prometheus::BuildGauge()
                               .Name("octopipe_measured_bubble_ratio")
                               .Help("Fraction of device time the job's pipeline left idle, "
                                     "measured by its agents across all of the plan's devices "
                                     "(1 - busy / (devices x iteration time)), ratio 0 to 1.")
                               .Register(registry);
    m->replans_ = &prometheus::BuildCounter()
                       .Name("octopipe_replans_total")
                       .Help("Re-plans of running jobs, by reason: measured (profiles drifted "
                             "from the model), node_failure, drain, node_join.")
                       .Register(registry);
    auto& agents = prometheus::BuildGauge()
                       .Name("octopipe_agents_alive")
                       .Help("Agents whose heartbeats are current.")
                       .Register(registry);
    m->rpcs_ = &prometheus::BuildCounter()
                    .Name("octopipe_rpcs_total")
                    .Help("Planner RPCs handled, by method and status code.")
                    .Register(registry);
    m->rpc_latency_ = &prometheus::BuildHistogram()
                           .Name("octopipe_rpc_latency_seconds")
                           .Help("Server-side latency of planner RPCs (arrival to status), "
                                 "in seconds, by method.")
                           .Register(registry);
    auto& jobs = prometheus::BuildGauge()
                     .Name("octopipe_jobs")
                     .Help("Jobs the planner manages.")
                     .Register(registry);
    m->queue_depth_ = &prometheus::BuildGauge()
                           .Name("octopipe_tuning_queue_depth")
                           .Help("Tuning tasks waiting, by lane: jobs (first plans and "
                                 "re-plans) and oneshot (Plan calls).")
                           .Register(registry);
    m->queue_depth_->Add({{"lane", "jobs"}}).Set(0);
    m->queue_depth_->Add({{"lane", "oneshot"}}).Set(0);
    auto& cache = prometheus::BuildCounter()
                      .Name("octopipe_plan_cache_lookups_total")
                      .Help("One-shot Plan calls looked up in the cache of identical "
                            "requests, by result: hit (served from it) or miss (tuned).")
                      .Register(registry);
    m->plan_cache_hits_ = &cache.Add({{"result", "hit"}});
    m->plan_cache_misses_ = &cache.Add({{"result", "miss"}});

    m->tuning_seconds_ = &tuning.Add({}, TuningSecondsBuckets());
    m->agents_alive_ = &agents.Add({});
    m->jobs_ = &jobs.Add({});
    auto& phases = prometheus::BuildGauge()
                       .Name("octopipe_jobs_by_phase")
                       .Help("Jobs by phase: planning (no plan yet), pending (planned, not "
                             "started by agents), running, completed, failed.")
                       .Register(registry);
    for (const char* phase : {"planning", "pending", "running", "completed", "failed"}) {
      m->jobs_by_phase_[phase] = &phases.Add({{"phase", phase}});
    }
    for (int i = 0; i < kNumPlanKinds; ++i) {
      m->plans_by_kind_[i] = &m->plans_computed_->Add(
          {{"kind", std::string(PlanKindLabel(static_cast<PlanKind>(i)))}});
    }
    for (int i = 0; i < kNumReplanReasons; ++i) {
      m->replans_by_reason_[i] = &m->replans_->Add(
          {{"reason", std::string(ReplanReasonName(static_cast<ReplanReason>(i)))}});
    }
  } catch (const std::invalid_argument& e) {
    return absl::InvalidArgumentError(absl::StrCat("declaring the planner's metrics: ", e.what()));
  }
  return m;
}

prometheus::Counter& PlannerMetrics::Rpcs(absl::string_view method, absl::StatusCode code) const {
  const std::pair<std::string, int> key(std::string(method), static_cast<int>(code));
  {
    absl::ReaderMutexLock lock(&children_mu_);
    if (auto it = rpc_children_.find(key); it != rpc_children_.end()) return *it->second;
  }
  prometheus::Counter& c =
      rpcs_->Add({{"method", key.first}, {"code", absl::StatusCodeToString(code)}});
  absl::MutexLock lock(&children_mu_);
  rpc_children_[key] = &c;
  return c;
}

prometheus::Histogram& PlannerMetrics::RpcLatency(absl::string_view method) const {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5};
  const std::string key(method);
  {
    absl::ReaderMutexLock lock(&children_mu_);
    if (auto it = latency_children_.find(key); it != latency_children_.end()) return *it->second;
  }
  prometheus::Histogram& h = rpc_latency_->Add({{"method", key}}, kBuckets);
  absl::MutexLock lock(&children_mu_);
  latency_children_[key] = &h;
  return h;
}

prometheus::Gauge& PlannerMetrics::TuningQueueDepth(absl::string_view lane) const {
  return queue_depth_->Add({{"lane", std::string(lane)}});
}

void PlannerMetrics::SetJobPrediction(const std::string& job_id, double iteration_s,
                                      double bubble_ratio) {
  predicted_iteration_->Add({{"job_id", job_id}}).Set(iteration_s);
  predicted_bubble_->Add({{"job_id", job_id}}).Set(bubble_ratio);
}

void PlannerMetrics::SetJobMeasurement(const std::string& job_id, double iteration_s,
                                       double bubble_ratio) {
  measured_iteration_->Add({{"job_id", job_id}}).Set(iteration_s);
  measured_bubble_->Add({{"job_id", job_id}}).Set(bubble_ratio);
}

void PlannerMetrics::RemoveJob(const std::string& job_id) {
  for (prometheus::Family<prometheus::Gauge>* family :
       {predicted_iteration_, predicted_bubble_, measured_iteration_, measured_bubble_}) {
    if (family->Has({{"job_id", job_id}})) family->Remove(&family->Add({{"job_id", job_id}}));
  }
}

void PlannerMetrics::SetJobsInPhase(const std::string& phase, int jobs) const {
  auto it = jobs_by_phase_.find(phase);
  if (it != jobs_by_phase_.end()) it->second->Set(jobs);
}

}  // namespace octopipe::metrics
