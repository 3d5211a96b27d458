#include "planner_service/metrics/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"

namespace octopipe::metrics {
namespace {

constexpr absl::string_view kPrefix = "octopipe_";

// Misuse at the point of use: see the top comment of metrics.h.
[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "octopipe metrics: %s\n", message.c_str());
  std::fflush(stderr);
  std::abort();
}

const char* TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
  }
  return "untyped";
}

bool IsLower(char c) { return c >= 'a' && c <= 'z'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAlpha(char c) { return IsLower(c) || (c >= 'A' && c <= 'Z'); }

bool IsMetricName(absl::string_view s) {
  if (s.empty() || IsDigit(s[0])) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return IsLower(c) || IsDigit(c) || c == '_'; });
}

bool IsUnit(absl::string_view s) {
  if (s.empty() || !IsLower(s[0]) || s.back() == '_') return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return IsLower(c) || IsDigit(c) || c == '_'; });
}

bool IsLabelName(absl::string_view s) {
  if (s.empty() || IsDigit(s[0])) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return IsAlpha(c) || IsDigit(c) || c == '_'; });
}

// Adds `by` to an atomic double (std::atomic<double>::fetch_add is C++20).
void AtomicAdd(std::atomic<double>& a, double by) {
  double old = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(old, old + by, std::memory_order_relaxed)) {
  }
}

// `name{labels} value\n`, or `name value\n` without labels.
void AppendSample(std::string& out, absl::string_view name, absl::string_view labels,
                  double value) {
  out.append(name.data(), name.size());
  if (!labels.empty()) absl::StrAppend(&out, "{", labels, "}");
  absl::StrAppend(&out, " ", FormatValue(value), "\n");
}

}  // namespace

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // Integers (counts, mostly) print as integers while every integer is exact in a double.
  if (value == std::trunc(value) && std::fabs(value) < 9007199254740992.0) {
    return absl::StrCat(static_cast<int64_t>(value));
  }
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);  // shortest round trip
  if (ec != std::errc()) return absl::StrCat(value);
  return std::string(buf, end);
}

std::string EscapeLabelValue(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out;
}

std::string EscapeHelp(absl::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out;
}

absl::Status ValidateMetricInfo(const MetricInfo& info) {
  const std::string& name = info.name;
  auto invalid = [&name](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("metric '", name, "': ", why));
  };
  if (!absl::StartsWith(name, kPrefix) || name.size() == kPrefix.size()) {
    return invalid(absl::StrCat("name must start with '", kPrefix, "' and go on after it"));
  }
  if (!IsMetricName(name)) {
    return invalid("name must match [a-z_][a-z0-9_]* (lower case; colons are for recording "
                   "rules)");
  }
  if (info.help.empty()) return invalid("help text is empty");
  if (!info.unit.empty() && !IsUnit(info.unit)) {
    return invalid(absl::StrCat("unit '", info.unit, "' must match [a-z][a-z0-9_]*"));
  }
  const bool total = absl::EndsWith(name, "_total");
  absl::string_view base = name;  // the name without `_total`
  if (info.type == MetricType::kCounter) {
    if (!total) return invalid("a counter's name must end in '_total'");
    base.remove_suffix(std::string("_total").size());
  } else {
    for (absl::string_view suffix : {"_total", "_count", "_sum", "_bucket"}) {
      if (absl::EndsWith(name, suffix)) {
        return invalid(absl::StrCat("only counters may end in '_total', and '_count', '_sum', "
                                    "'_bucket' are reserved for histogram series; got suffix '",
                                    suffix, "'"));
      }
    }
  }
  if (!info.unit.empty() && !absl::EndsWith(base, absl::StrCat("_", info.unit))) {
    return invalid(absl::StrCat("name must carry its unit as a suffix: '_", info.unit,
                                info.type == MetricType::kCounter ? "_total'" : "'"));
  }
  std::set<absl::string_view> seen;
  for (const std::string& label : info.label_names) {
    if (!IsLabelName(label) || absl::StartsWith(label, "__")) {
      return invalid(absl::StrCat("label name '", label,
                                  "' must match [a-zA-Z_][a-zA-Z0-9_]* and not start with '__'"));
    }
    if (info.type == MetricType::kHistogram && label == "le") {
      return invalid("label name 'le' is reserved for histogram buckets");
    }
    if (!seen.insert(label).second) {
      return invalid(absl::StrCat("label name '", label, "' appears twice"));
    }
  }
  if (info.type == MetricType::kHistogram) {
    if (info.buckets.empty()) return invalid("a histogram needs at least one bucket");
    for (size_t i = 0; i < info.buckets.size(); ++i) {
      if (!std::isfinite(info.buckets[i])) {
        return invalid(absl::StrCat("bucket ", i, " is ", FormatValue(info.buckets[i]),
                                    "; bounds must be finite (+Inf is implicit)"));
      }
      if (i > 0 && info.buckets[i] <= info.buckets[i - 1]) {
        return invalid(absl::StrCat("buckets must be strictly increasing; bucket ", i, " (",
                                    FormatValue(info.buckets[i]), ") <= bucket ", i - 1, " (",
                                    FormatValue(info.buckets[i - 1]), ")"));
      }
    }
  } else if (!info.buckets.empty()) {
    return invalid("only histograms have buckets");
  }
  return absl::OkStatus();
}

// ---- Children -------------------------------------------------------------------------------

void Counter::Inc(double by) {
  if (!(by >= 0)) {  // also catches NaN
    Die(absl::StrCat("counter '", *name_, "' incremented by ", FormatValue(by),
                     "; counters only go up"));
  }
  AtomicAdd(value_, by);
}

void Counter::Render(const MetricInfo& info, const std::string& labels, std::string& out) const {
  AppendSample(out, info.name, labels, Value());
}

void Gauge::Inc(double by) { AtomicAdd(value_, by); }

void Gauge::Render(const MetricInfo& info, const std::string& labels, std::string& out) const {
  AppendSample(out, info.name, labels, Value());
}

Histogram::Histogram(const std::vector<double>* bounds)
    : bounds_(bounds), counts_(new std::atomic<uint64_t>[bounds->size() + 1]()) {}

void Histogram::Observe(double value) {
  // First bound >= value; NaN compares false everywhere and so must be sent to +Inf by hand.
  size_t bucket = bounds_->size();
  if (!std::isnan(value)) {
    bucket = std::lower_bound(bounds_->begin(), bounds_->end(), value) - bounds_->begin();
  }
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(sum_, value);
}

uint64_t Histogram::Count() const {
  uint64_t total = 0;
  for (size_t i = 0; i <= bounds_->size(); ++i) total += counts_[i].load(std::memory_order_relaxed);
  return total;
}

std::vector<uint64_t> Histogram::CumulativeCounts() const {
  std::vector<uint64_t> out(bounds_->size());
  uint64_t running = 0;
  for (size_t i = 0; i < bounds_->size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    out[i] = running;
  }
  return out;
}

void Histogram::Reset() {
  for (size_t i = 0; i <= bounds_->size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
  sum_.store(0.0, std::memory_order_relaxed);
}

void Histogram::Render(const MetricInfo& info, const std::string& labels,
                       std::string& out) const {
  // Read each bucket once and derive _count from the same reads, so that _count always equals
  // the +Inf bucket even while observations race with the scrape.
  const std::string bucket_name = absl::StrCat(info.name, "_bucket");
  const std::string sep = labels.empty() ? "" : ",";
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_->size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    const std::string le = i < bounds_->size() ? FormatValue((*bounds_)[i]) : "+Inf";
    AppendSample(out, bucket_name, absl::StrCat(labels, sep, "le=\"", le, "\""),
                 static_cast<double>(running));
  }
  AppendSample(out, absl::StrCat(info.name, "_sum"), labels, Sum());
  AppendSample(out, absl::StrCat(info.name, "_count"), labels, static_cast<double>(running));
}

// ---- Families -------------------------------------------------------------------------------

namespace internal {

FamilyBase::FamilyBase(MetricInfo info) : info_(std::move(info)) {}

void FamilyBase::CheckArity(size_t got) const {
  if (got != info_.label_names.size()) {
    Die(absl::StrCat("metric '", info_.name, "' takes ", info_.label_names.size(),
                     " label value(s) (", absl::StrJoin(info_.label_names, ", "), "), got ", got));
  }
}

ChildBase& FamilyBase::GetOrCreate(absl::Span<const absl::string_view> values) {
  CheckArity(values.size());
  std::vector<std::string> key(values.begin(), values.end());
  absl::MutexLock lock(&mu_);
  auto it = children_.find(key);
  if (it == children_.end()) {
    it = children_.emplace(std::move(key), Entry{NewChild(), true}).first;
  }
  it->second.visible = true;
  return *it->second.child;
}

void FamilyBase::RemoveChild(absl::Span<const absl::string_view> values) {
  CheckArity(values.size());
  std::vector<std::string> key(values.begin(), values.end());
  absl::MutexLock lock(&mu_);
  auto it = children_.find(key);
  if (it == children_.end()) return;
  it->second.visible = false;
  it->second.child->Reset();
}

void FamilyBase::Render(std::string& out) const {
  absl::MutexLock lock(&mu_);
  bool header = false;
  for (const auto& [values, entry] : children_) {
    if (!entry.visible) continue;
    if (!header) {
      absl::StrAppend(&out, "# HELP ", info_.name, " ", EscapeHelp(info_.help), "\n", "# TYPE ",
                      info_.name, " ", TypeName(info_.type), "\n");
      header = true;
    }
    std::string labels;
    for (size_t i = 0; i < values.size(); ++i) {
      absl::StrAppend(&labels, i > 0 ? "," : "", info_.label_names[i], "=\"",
                      EscapeLabelValue(values[i]), "\"");
    }
    entry.child->Render(info_, labels, out);
  }
}

}  // namespace internal

template <typename T>
Family<T>::Family(MetricInfo info) : internal::FamilyBase(std::move(info)) {
  if (this->info().label_names.empty()) GetOrCreate({});  // exported as 0 from the start
}

template <>
std::unique_ptr<internal::ChildBase> Family<Counter>::NewChild() const {
  return std::make_unique<Counter>(&info().name);
}
template <>
std::unique_ptr<internal::ChildBase> Family<Gauge>::NewChild() const {
  return std::make_unique<Gauge>();
}
template <>
std::unique_ptr<internal::ChildBase> Family<Histogram>::NewChild() const {
  return std::make_unique<Histogram>(&info().buckets);
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

// ---- Registry -------------------------------------------------------------------------------

namespace {

MetricInfo MakeInfo(absl::string_view name, absl::string_view help, absl::string_view unit,
                    MetricType type, std::vector<std::string> label_names,
                    std::vector<double> buckets) {
  MetricInfo info;
  info.name = std::string(name);
  info.help = std::string(help);
  info.unit = std::string(unit);
  info.type = type;
  info.label_names = std::move(label_names);
  info.buckets = std::move(buckets);
  return info;
}

// Validates before constructing: a family's constructor creates the child of a label-less
// family, which needs valid buckets.
template <typename T>
absl::StatusOr<std::unique_ptr<Family<T>>> MakeFamily(MetricInfo info) {
  absl::Status status = ValidateMetricInfo(info);
  if (!status.ok()) return status;
  return std::make_unique<Family<T>>(std::move(info));
}

}  // namespace

absl::Status Registry::Insert(std::unique_ptr<internal::FamilyBase> family) {
  absl::MutexLock lock(&mu_);
  const std::string& name = family->name();
  if (families_.count(name) > 0) {
    return absl::AlreadyExistsError(absl::StrCat("metric '", name, "' is already declared"));
  }
  families_.emplace(name, std::move(family));
  return absl::OkStatus();
}

absl::StatusOr<CounterFamily*> Registry::AddCounter(absl::string_view name,
                                                    absl::string_view help,
                                                    absl::string_view unit,
                                                    std::vector<std::string> label_names) {
  ASSIGN_OR_RETURN(auto family, MakeFamily<Counter>(MakeInfo(name, help, unit,
                                                             MetricType::kCounter,
                                                             std::move(label_names), {})));
  CounterFamily* raw = family.get();
  RETURN_IF_ERROR(Insert(std::move(family)));
  return raw;
}

absl::StatusOr<GaugeFamily*> Registry::AddGauge(absl::string_view name, absl::string_view help,
                                                absl::string_view unit,
                                                std::vector<std::string> label_names) {
  ASSIGN_OR_RETURN(auto family, MakeFamily<Gauge>(MakeInfo(name, help, unit, MetricType::kGauge,
                                                           std::move(label_names), {})));
  GaugeFamily* raw = family.get();
  RETURN_IF_ERROR(Insert(std::move(family)));
  return raw;
}

absl::StatusOr<HistogramFamily*> Registry::AddHistogram(absl::string_view name,
                                                        absl::string_view help,
                                                        absl::string_view unit,
                                                        std::vector<std::string> label_names,
                                                        std::vector<double> buckets) {
  ASSIGN_OR_RETURN(auto family,
                   MakeFamily<Histogram>(MakeInfo(name, help, unit, MetricType::kHistogram,
                                                  std::move(label_names), std::move(buckets))));
  HistogramFamily* raw = family.get();
  RETURN_IF_ERROR(Insert(std::move(family)));
  return raw;
}

std::string Registry::RenderText() const {
  std::string out;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, family] : families_) family->Render(out);
  return out;
}

}  // namespace octopipe::metrics
