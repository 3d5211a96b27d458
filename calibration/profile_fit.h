// The fits `octopipe profile` makes from its measurements (and the median and spread it
// reports): the link (latency + bytes / bandwidth over ping-pong samples) and the per-message
// CPU cost (the simulator's ratio between a message-heavy and a light plan matched to the
// measured one). Pure functions; thread-safe.
#ifndef OCTOPIPE_CALIBRATION_PROFILE_FIT_H_
#define OCTOPIPE_CALIBRATION_PROFILE_FIT_H_

#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cluster.h"
#include "core/model_graph.h"
#include "core/plan.h"

namespace octopipe {

// The median of `v` (0 when empty) and its spread, (max - min) / median (0 for fewer than two
// samples or a non-positive median).
double Median(std::vector<double> v);
double Spread(const std::vector<double>& v);

struct LinkFit {
  double latency_s = 0;
  double bandwidth = 0;  // bytes/s; +inf when the time does not grow with the size
};
// Least-squares fit of seconds = latency + bytes / bandwidth over (bytes, seconds) samples with
// at least two distinct sizes; the latency is clamped at 0. kInvalidArgument otherwise.
absl::StatusOr<LinkFit> FitLink(const std::vector<std::pair<double, double>>& samples);

// The median of `ratios` (each a pair of adjacent runs' heavy / light) less half their range: a
// lower bound of the ratio that noise between the pairs does not inflate (FitMessageCpu's input
// in `octopipe profile`). 1 for none.
double RatioLowerBound(const std::vector<double>& ratios);

// The per-message CPU cost c (HardwareSpec::message_cpu_s, seconds at each end) at which the
// simulator's ratio heavy / light, on `model` and `cluster` with c, equals the measured
// heavy_s / light_s: a bias common to both runs cancels, what grows with the messages is c.
// Bisection over [0, max_c]; 0 when even c = 0 predicts a larger ratio than measured, max_c
// when even that predicts a smaller one. Errors: the simulator's (e.g. a plan that does not
// fit the model or the cluster).
absl::StatusOr<double> FitMessageCpu(const ModelGraph& model, const Cluster& cluster,
                                     const Plan& light, double light_s, const Plan& heavy,
                                     double heavy_s, double max_c = 0.01);

}  // namespace octopipe

#endif  // OCTOPIPE_CALIBRATION_PROFILE_FIT_H_
