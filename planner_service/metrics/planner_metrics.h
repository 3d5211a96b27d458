// PlannerMetrics: every metric the planner service exports, declared in one place (STYLE.md
// item 11; DESIGN.md "Metrics (Prometheus)"). `main` builds a Registry, calls Create once and
// passes the struct (by reference) to the service, job manager and agent registry; an
// HttpExporter serves the same Registry.
//
//   name                                   type       labels         unit
//   octopipe_plans_computed_total          counter    kind           -        oneshot | job
//   octopipe_tuning_seconds                histogram  -              seconds  0.01 .. 60 s
//   octopipe_predicted_iteration_seconds   gauge      job            seconds
//   octopipe_predicted_bubble_ratio        gauge      job            ratio    0 .. 1
//   octopipe_replans_total                 counter    reason         -        see ReplanReason
//   octopipe_agents_alive                  gauge      -              -
//   octopipe_rpcs_total                    counter    method, code   -        code: "OK", ...
//   octopipe_jobs                          gauge      -              -
//   octopipe_tuning_queue_depth            gauge      lane           -        jobs | oneshot
//
// The known label values of `kind` and `reason` are created at Create, so their series exist
// (at 0) from the first scrape and rate() sees the first increment. Use the typed accessors for
// them; they return cached children without a lookup. Per-job gauges should be dropped with
// `Family::Remove({job})` when the job is deleted.
//
// Thread safety and lifetime: as metrics.h; the pointers are owned by the Registry passed to
// Create, which must outlive this struct's use.
#ifndef OCTOPIPE_PLANNER_SERVICE_METRICS_PLANNER_METRICS_H_
#define OCTOPIPE_PLANNER_SERVICE_METRICS_PLANNER_METRICS_H_

#include <array>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner_service/metrics/metrics.h"
#include "planner_service/replan_reason.h"

namespace octopipe::metrics {

// Value of the `kind` label of octopipe_plans_computed_total.
enum class PlanKind { kOneshot, kJob };
inline constexpr int kNumPlanKinds = 2;
absl::string_view PlanKindLabel(PlanKind kind);  // "oneshot", "job"

// The `reason` label of octopipe_replans_total: the one ReplanReason enum
// (planner_service/replan_reason.h), by ReplanReasonName; kInitial is not a re-plan and has no
// child.
using ::octopipe::ReplanReason;
absl::string_view ReplanReasonLabel(ReplanReason reason);  // "measured", "node_failure", ...

struct PlannerMetrics {
  // Declares the families above on `registry`. Fails (kAlreadyExists) if any is already there,
  // e.g. when called twice on one registry.
  static absl::StatusOr<std::unique_ptr<PlannerMetrics>> Create(Registry& registry);

  // Buckets of octopipe_tuning_seconds: a one-shot tune of a small model takes tens of
  // milliseconds, a large search up to a minute.
  static const std::vector<double>& TuningSecondsBuckets();

  CounterFamily* plans_computed = nullptr;          // {kind}
  HistogramFamily* tuning_seconds = nullptr;        // no labels: tuning_seconds->WithLabels({})
  GaugeFamily* predicted_iteration_seconds = nullptr;  // {job}
  GaugeFamily* predicted_bubble_ratio = nullptr;    // {job}
  CounterFamily* replans = nullptr;                 // {reason}
  Gauge* agents_alive = nullptr;                    // the single child of a label-less family
  CounterFamily* rpcs = nullptr;                    // {method, code}
  Gauge* jobs = nullptr;                            // the single child of a label-less family
  GaugeFamily* tuning_queue_depth = nullptr;        // {lane}: "jobs", "oneshot" (exist at 0)

  Counter& PlansComputed(PlanKind kind) const { return *plans_by_kind_[static_cast<int>(kind)]; }
  Counter& Replans(ReplanReason reason) const {
    return *replans_by_reason_[static_cast<int>(reason)];
  }
  Histogram& TuningSeconds() const { return *tuning_seconds_child_; }
  // The RPC counter for `method` (e.g. "SubmitJob") and the status it returned; the code label
  // is the canonical gRPC/Abseil name ("OK", "INVALID_ARGUMENT", ...). Looks the child up.
  Counter& Rpcs(absl::string_view method, absl::StatusCode code) const;

 private:
  std::array<Counter*, kNumPlanKinds> plans_by_kind_{};
  std::array<Counter*, kNumReplanReasons> replans_by_reason_{};
  Histogram* tuning_seconds_child_ = nullptr;
};

}  // namespace octopipe::metrics

#endif  // OCTOPIPE_PLANNER_SERVICE_METRICS_PLANNER_METRICS_H_
