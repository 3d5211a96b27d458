// Metrics: a small thread-safe metrics library that renders the Prometheus text exposition format
// 0.0.4. Debian ships no prometheus-cpp; this is the part of it OctoPipe needs.
//
// Model. A *family* is one metric name with help text, unit, label names and (histograms only)
// bucket bounds, declared once on a `Registry` (STYLE.md item 11: declare every metric of a
// process in one place, e.g. `PlannerMetrics::Create`, built in `main` and passed in). A family
// hands out one *child* per distinct tuple of label values with `WithLabels({...})`; the child
// holds the numbers.
//
//   Registry registry;
//   ASSIGN_OR_RETURN(CounterFamily * rpcs,
//                    registry.AddCounter("octopipe_rpcs_total", "RPCs handled.", /*unit=*/"",
//                                        {"method", "code"}));
//   rpcs->WithLabels({"SubmitJob", "OK"}).Inc();
//   std::string page = registry.RenderText();
//
// Naming rules, checked at declaration (absl::Status kInvalidArgument naming the metric; a name
// already declared is kAlreadyExists): names match [a-z_][a-z0-9_]* and start with `octopipe_`
// (no colons: they are reserved for recording rules); help is non-empty; a non-empty unit
// ([a-z][a-z0-9_]*, a base unit such as "seconds", "bytes", "ratio") must be the name's suffix,
// before `_total` for counters; counter names end in `_total`; gauge and histogram names do not
// end in `_total`, `_count`, `_sum` or `_bucket` (so no two families render the same series
// name); label names match [a-zA-Z_][a-zA-Z0-9_]*, are unique, do not start with `__`, and `le`
// is refused on histograms; buckets are finite and strictly increasing (+Inf is implicit).
//
// Misuse at the point of use is a programming error and aborts the process with a message naming
// the metric, like a CHECK: `WithLabels` with the wrong number of values, `Counter::Inc` with a
// negative or NaN amount. Silently dropping the sample would hide the bug; the checks are cheap
// and sit outside the per-sample fast path of a cached child.
//
// Thread safety. Everything here may be called from any thread. Children are updated with
// relaxed atomics (lock-free; a histogram's sum is a compare-and-swap loop). `WithLabels` looks
// the child up under the family's own mutex, so hot paths should look a child up once and keep
// the reference. `RenderText` reads each child's atomics individually: a scrape racing with
// `Observe` may see a histogram whose _sum lags its _count by that one sample, but _count always
// equals the +Inf bucket, and buckets are cumulative.
//
// Ownership. The Registry owns its families and each family owns its children; the pointers and
// references handed out stay valid for the Registry's lifetime (children are never freed, see
// `Family::Remove`).
//
// Output. Families are sorted by name, children by their label values (in label-name order), so
// the page is deterministic. A family without labels has exactly one child, created at
// declaration, so it is exported (as 0) from the start. A labelled family with no children
// yet is left out entirely, HELP and TYPE included.
#ifndef OCTOPIPE_PLANNER_SERVICE_METRICS_METRICS_H_
#define OCTOPIPE_PLANNER_SERVICE_METRICS_METRICS_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace octopipe::metrics {

enum class MetricType { kCounter, kGauge, kHistogram };

// What a family was declared with. Immutable after declaration.
struct MetricInfo {
  std::string name;
  std::string help;
  std::string unit;  // empty for dimensionless counts
  MetricType type = MetricType::kGauge;
  std::vector<std::string> label_names;
  std::vector<double> buckets;  // histograms only: upper bounds, strictly increasing, no +Inf
};

namespace internal {

// What a family needs from its children: render and reset. The update methods of the concrete
// children are not virtual.
class ChildBase {
 public:
  virtual ~ChildBase() = default;
  // Appends the child's sample lines. `labels` is the rendered `k="v",...` list without braces
  // (empty for a label-less family).
  virtual void Render(const MetricInfo& info, const std::string& labels,
                      std::string& out) const = 0;
  virtual void Reset() = 0;
};

class FamilyBase {
 public:
  explicit FamilyBase(MetricInfo info);
  virtual ~FamilyBase() = default;
  FamilyBase(const FamilyBase&) = delete;
  FamilyBase& operator=(const FamilyBase&) = delete;

  const MetricInfo& info() const { return info_; }
  const std::string& name() const { return info_.name; }

  // Appends HELP, TYPE and the visible children's samples; nothing if no child is visible.
  void Render(std::string& out) const ABSL_LOCKS_EXCLUDED(mu_);

 protected:
  ChildBase& GetOrCreate(absl::Span<const absl::string_view> values) ABSL_LOCKS_EXCLUDED(mu_);
  void RemoveChild(absl::Span<const absl::string_view> values) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  virtual std::unique_ptr<ChildBase> NewChild() const = 0;
  void CheckArity(size_t got) const;

  struct Entry {
    std::unique_ptr<ChildBase> child;
    bool visible = true;
  };

  const MetricInfo info_;
  mutable absl::Mutex mu_;
  // Keyed by the label values, so iteration order is the output order.
  std::map<std::vector<std::string>, Entry> children_ ABSL_GUARDED_BY(mu_);
};

}  // namespace internal

// A monotonically increasing count. Resets only when the process restarts.
class Counter final : public internal::ChildBase {
 public:
  // Adds `by` (default 1). Aborts if `by` is negative or NaN: counters only go up.
  void Inc(double by = 1.0);
  double Value() const { return value_.load(std::memory_order_relaxed); }

  explicit Counter(const std::string* name) : name_(name) {}  // for CounterFamily only
  void Render(const MetricInfo& info, const std::string& labels, std::string& out) const override;
  void Reset() override { value_.store(0.0, std::memory_order_relaxed); }

 private:
  const std::string* name_;  // the family's name, for the abort message
  std::atomic<double> value_{0.0};
};

// A value that goes up and down.
class Gauge final : public internal::ChildBase {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Inc(double by = 1.0);
  void Dec(double by = 1.0) { Inc(-by); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

  Gauge() = default;  // for GaugeFamily only
  void Render(const MetricInfo& info, const std::string& labels, std::string& out) const override;
  void Reset() override { value_.store(0.0, std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Counts observations into the fixed buckets of its family. A value v lands in the first bucket
// whose upper bound b satisfies v <= b (the +Inf bucket if none; NaN too).
class Histogram final : public internal::ChildBase {
 public:
  void Observe(double value);
  // Observations so far: total count, sum, and the cumulative count at each declared bound
  // (one entry per bound, without +Inf, which equals Count()).
  uint64_t Count() const;
  double Sum() const { return sum_.load(std::memory_order_relaxed); }
  std::vector<uint64_t> CumulativeCounts() const;

  explicit Histogram(const std::vector<double>* bounds);  // for HistogramFamily only
  void Render(const MetricInfo& info, const std::string& labels, std::string& out) const override;
  void Reset() override;

 private:
  const std::vector<double>* bounds_;  // the family's buckets
  // counts_[i] counts (bounds[i-1], bounds[i]]; the last element is the +Inf overflow bucket.
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::atomic<double> sum_{0.0};
};

// A family of children of type T, one per tuple of label values.
template <typename T>
class Family final : public internal::FamilyBase {
 public:
  explicit Family(MetricInfo info);

  // The child for these label values (in the order of the declared label names), created on
  // first use. Aborts if the number of values differs from the number of label names. For a
  // family without labels, `WithLabels({})` is its only child.
  T& WithLabels(absl::Span<const absl::string_view> values) {
    return static_cast<T&>(GetOrCreate(values));
  }

  // Drops the series from the output and zeroes it (e.g. the gauges of a deleted job). The
  // child's memory is kept so that references handed out earlier stay valid: updates through
  // them are not exported until `WithLabels` is called again with the same values, which
  // brings the series back. No-op if the series does not exist.
  void Remove(absl::Span<const absl::string_view> values) { RemoveChild(values); }

 private:
  std::unique_ptr<internal::ChildBase> NewChild() const override;
};

using CounterFamily = Family<Counter>;
using GaugeFamily = Family<Gauge>;
using HistogramFamily = Family<Histogram>;

template <>
std::unique_ptr<internal::ChildBase> Family<Counter>::NewChild() const;
template <>
std::unique_ptr<internal::ChildBase> Family<Gauge>::NewChild() const;
template <>
std::unique_ptr<internal::ChildBase> Family<Histogram>::NewChild() const;

extern template class Family<Counter>;
extern template class Family<Gauge>;
extern template class Family<Histogram>;

// The set of families one process exports. Declare every family once (see the rules above),
// then hand out the family pointers; `RenderText` is what /metrics serves.
class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // The returned family is owned by the registry and lives as long as it does.
  absl::StatusOr<CounterFamily*> AddCounter(absl::string_view name, absl::string_view help,
                                            absl::string_view unit,
                                            std::vector<std::string> label_names = {})
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<GaugeFamily*> AddGauge(absl::string_view name, absl::string_view help,
                                        absl::string_view unit,
                                        std::vector<std::string> label_names = {})
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<HistogramFamily*> AddHistogram(absl::string_view name, absl::string_view help,
                                                absl::string_view unit,
                                                std::vector<std::string> label_names,
                                                std::vector<double> buckets)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The whole registry in the Prometheus text format 0.0.4, deterministic (see top comment).
  std::string RenderText() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Takes ownership of a validated family; kAlreadyExists if its name is taken.
  absl::Status Insert(std::unique_ptr<internal::FamilyBase> family) ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<internal::FamilyBase>> families_ ABSL_GUARDED_BY(mu_);
};

// Checks a declaration against the rules in the top comment. Exposed for tests.
absl::Status ValidateMetricInfo(const MetricInfo& info);

// Sample value as the text format writes it: integers without a decimal point, other values
// in the shortest form that reads back exactly, and NaN, +Inf, -Inf.
std::string FormatValue(double value);

// Escapes a label value (backslash, double quote, newline) or help text (backslash, newline).
std::string EscapeLabelValue(absl::string_view value);
std::string EscapeHelp(absl::string_view help);

}  // namespace octopipe::metrics

#endif  // OCTOPIPE_PLANNER_SERVICE_METRICS_METRICS_H_
