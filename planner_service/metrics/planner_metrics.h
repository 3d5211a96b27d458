// PlannerMetrics: every metric the planner service exports, declared in one place (name, help,
// unit, labels, buckets; docs/contributing.md) on a prometheus-cpp Registry. `main` builds the
// Registry and passes it to the PlannerServer, which calls Create once and hands the struct (by
// reference) to the code that updates it; an Exposer (metrics/exposer.h) serves the same
// Registry on /metrics.
//
//   name                                   type       labels         unit     notes
//   octopipe_plans_computed_total          counter    kind           -        oneshot | job
//   octopipe_tuning_seconds                histogram  -              seconds  0.01 .. 60 s
//   octopipe_predicted_iteration_seconds   gauge      job_id         seconds
//   octopipe_predicted_bubble_ratio        gauge      job_id         ratio    0 .. 1
//   octopipe_measured_iteration_seconds    gauge      job_id         seconds  from agents
//   octopipe_measured_bubble_ratio         gauge      job_id         ratio    all devices
//   octopipe_replans_total                 counter    reason         -        see ReplanReason
//   octopipe_agents_alive                  gauge      -              -
//   octopipe_rpcs_total                    counter    method, code   -        code: "OK", ...
//   octopipe_rpc_latency_seconds           histogram  method         seconds  0.5 ms .. 5 s
//   octopipe_jobs                          gauge      -              -
//   octopipe_tuning_queue_depth            gauge      lane           -        jobs | oneshot
//   octopipe_plan_cache_lookups_total      counter    result         -        hit | miss
//
// Per-job series are labelled `job_id`, not `job`: Prometheus attaches its own `job` label (the
// scrape job) to every series, and a metric label of that name would be renamed exported_job.
//
// The names, labels and buckets are what deploy/grafana/ and tests/prometheus_scrape_test.sh
// read; change them together. prometheus-cpp has no unit field, so the unit is the name's
// suffix and is stated in the help text.
//
// The known label values of `kind` and `reason` are created at Create, so their series exist
// (at 0) from the first scrape and rate() sees the first increment; the typed accessors return
// those cached children without a lookup. Per-job gauges are set with SetJobPrediction and
// SetJobMeasurement and dropped with RemoveJob when the job is deleted. The measured series
// appear once every device of the job's plan has been reported by the agents
// (planner_service/measured_bubble.h) and keep their last value until the next plan version's
// devices have all reported.
//
// Thread safety: every method may be called from any thread (prometheus-cpp metrics are atomic;
// its families lock on Add/Remove). Lifetime: the metric objects are owned by the Registry
// passed to Create, which must outlive this object.
#ifndef OCTOPIPE_PLANNER_SERVICE_METRICS_PLANNER_METRICS_H_
#define OCTOPIPE_PLANNER_SERVICE_METRICS_PLANNER_METRICS_H_

#include <array>
#include <memory>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "core/replan_reason.h"

namespace octopipe::metrics {

// Value of the `kind` label of octopipe_plans_computed_total.
enum class PlanKind { kOneshot, kJob };
inline constexpr int kNumPlanKinds = 2;
absl::string_view PlanKindLabel(PlanKind kind);  // "oneshot", "job"

// The `reason` label of octopipe_replans_total is ReplanReasonName (core/replan_reason.h) of
// the re-plan causes (never kInitial).
using ::octopipe::ReplanReason;

class PlannerMetrics {
 public:
  // Declares the families above on `registry`. kInvalidArgument if prometheus-cpp refuses a
  // declaration (e.g. a family of the same name but another type is already there).
  static absl::StatusOr<std::unique_ptr<PlannerMetrics>> Create(prometheus::Registry& registry);

  // Buckets of octopipe_tuning_seconds: a one-shot tune of a small model takes tens of
  // milliseconds, a large search up to a minute.
  static const std::vector<double>& TuningSecondsBuckets();

  prometheus::Counter& PlansComputed(PlanKind kind) const {
    return *plans_by_kind_[static_cast<int>(kind)];
  }
  prometheus::Counter& Replans(ReplanReason reason) const {
    return *replans_by_reason_[static_cast<int>(reason)];
  }
  prometheus::Histogram& TuningSeconds() const { return *tuning_seconds_; }
  prometheus::Gauge& AgentsAlive() const { return *agents_alive_; }
  prometheus::Gauge& Jobs() const { return *jobs_; }
  // Jobs in a phase (planning, pending, running, completed, failed; others are ignored).
  void SetJobsInPhase(const std::string& phase, int jobs) const;
  // Tuning tasks waiting in a lane of the pool: "jobs" or "oneshot".
  prometheus::Gauge& TuningQueueDepth(absl::string_view lane) const;
  // One-shot Plan calls answered from the cache of identical requests (hit) or not (miss).
  prometheus::Counter& PlanCacheLookups(bool hit) const {
    return *(hit ? plan_cache_hits_ : plan_cache_misses_);
  }
  // The RPC counter for `method` (e.g. "CreateJob") and the status it returned; the code label
  // is the canonical gRPC/Abseil name ("OK", "INVALID_ARGUMENT", ...). Looks the child up.
  prometheus::Counter& Rpcs(absl::string_view method, absl::StatusCode code) const;
  // Server-side latency of one RPC (arrival to status), by method.
  prometheus::Histogram& RpcLatency(absl::string_view method) const;

  // The predicted iteration time and bubble ratio of a job's current plan.
  void SetJobPrediction(const std::string& job_id, double iteration_s, double bubble_ratio);
  // The iteration time and pipeline bubble ratio the agents measured across all of the job's
  // devices.
  void SetJobMeasurement(const std::string& job_id, double iteration_s, double bubble_ratio);
  // Drops the job's series from the page. No-op for a job without series.
  void RemoveJob(const std::string& job_id);

 private:
  PlannerMetrics() = default;

  prometheus::Family<prometheus::Counter>* plans_computed_ = nullptr;       // {kind}
  prometheus::Family<prometheus::Gauge>* predicted_iteration_ = nullptr;    // {job_id}
  prometheus::Family<prometheus::Gauge>* predicted_bubble_ = nullptr;       // {job_id}
  prometheus::Family<prometheus::Gauge>* measured_iteration_ = nullptr;     // {job_id}
  prometheus::Family<prometheus::Gauge>* measured_bubble_ = nullptr;        // {job_id}
  prometheus::Family<prometheus::Counter>* replans_ = nullptr;              // {reason}
  prometheus::Family<prometheus::Counter>* rpcs_ = nullptr;                 // {method, code}
  prometheus::Family<prometheus::Histogram>* rpc_latency_ = nullptr;        // {method}
  // Children of the two per-call families, by method (and code), found without the family's
  // label-map lookup: every RPC updates them.
  mutable absl::Mutex children_mu_;
  mutable absl::flat_hash_map<std::string, prometheus::Histogram*> latency_children_
      ABSL_GUARDED_BY(children_mu_);
  mutable absl::flat_hash_map<std::pair<std::string, int>, prometheus::Counter*> rpc_children_
      ABSL_GUARDED_BY(children_mu_);
  prometheus::Family<prometheus::Gauge>* queue_depth_ = nullptr;            // {lane}
  prometheus::Counter* plan_cache_hits_ = nullptr;
  prometheus::Counter* plan_cache_misses_ = nullptr;
  std::array<prometheus::Counter*, kNumPlanKinds> plans_by_kind_{};
  std::array<prometheus::Counter*, kNumReplanReasons> replans_by_reason_{};
  prometheus::Histogram* tuning_seconds_ = nullptr;
  prometheus::Gauge* agents_alive_ = nullptr;
  prometheus::Gauge* jobs_ = nullptr;
  std::map<std::string, prometheus::Gauge*> jobs_by_phase_;
};

}  // namespace octopipe::metrics

#endif  // OCTOPIPE_PLANNER_SERVICE_METRICS_PLANNER_METRICS_H_
