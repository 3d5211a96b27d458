#include "calibration/profile_fit.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "simulator/evaluator.h"
#include "simulator/problem_builder.h"

namespace octopipe {
namespace {

// The simulator's iteration time for `plan` on the measured files with message_cpu_s = c.
absl::StatusOr<double> Predict(const ModelGraph& model, Cluster cluster, const Plan& plan,
                               double c) {
  for (HardwareSpec& hw : cluster.hardware) hw.message_cpu_s = c;
  ASSIGN_OR_RETURN(ProblemBuilder builder,
                   ProblemBuilder::Create(model, cluster, CostModel(), plan.num_devices));
  ASSIGN_OR_RETURN(PipelineProblem problem, builder.Build(plan));
  ASSIGN_OR_RETURN(SimResult r, Simulate(problem, plan.schedule));
  return r.iteration_time_s;
}

}  // namespace

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double Spread(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  const double m = Median(v);
  return m > 0 ? (*hi - *lo) / m : 0;
}

absl::StatusOr<double> FitMessageCpu(const ModelGraph& model, const Cluster& cluster,
                                     const Plan& light, double light_s, const Plan& heavy,
                                     double heavy_s, double max_c) {
  const double target = heavy_s / light_s;
  auto ratio = [&](double c) -> absl::StatusOr<double> {
    ASSIGN_OR_RETURN(double h, Predict(model, cluster, heavy, c));
    ASSIGN_OR_RETURN(double l, Predict(model, cluster, light, c));
    return h / l;
  };
  if (!(max_c > 0)) return 0.0;
  double lo = 0, hi = max_c;
  ASSIGN_OR_RETURN(double at_lo, ratio(lo));
  if (at_lo >= target) return 0.0;
  ASSIGN_OR_RETURN(double at_hi, ratio(hi));
  if (at_hi <= target) return hi;
  for (int i = 0; i < 40; ++i) {
    const double mid = 0.5 * (lo + hi);
    ASSIGN_OR_RETURN(double at_mid, ratio(mid));
    (at_mid < target ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

absl::StatusOr<LinkFit> FitLink(const std::vector<std::pair<double, double>>& samples) {
  const double n = static_cast<double>(samples.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : samples) {
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  const double den = n * sxx - sx * sx;
  if (samples.size() < 2 || !(den > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "link samples: need at least two distinct message sizes, got ", samples.size(), " samples"));
  }
  const double slope = (n * sxy - sx * sy) / den;
  LinkFit fit;
  if (slope > 0) {
    fit.bandwidth = 1 / slope;
    fit.latency_s = std::max(0.0, (sy - slope * sx) / n);
  } else {
    fit.bandwidth = std::numeric_limits<double>::infinity();
    fit.latency_s = std::max(0.0, sy / n);
  }
  return fit;
}

double RatioLowerBound(const std::vector<double>& ratios) {
  if (ratios.empty()) return 1;
  const auto [least, most] = std::minmax_element(ratios.begin(), ratios.end());
  return Median(ratios) - (*most - *least) / 2;
}

}  // namespace octopipe
