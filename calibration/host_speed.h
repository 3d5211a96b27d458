// Host speed: a profile measured on one machine, brought to the speed the host runs at now.
//
// `octopipe profile` records a host-speed reference with the profile (Model.host_probe_s: the
// probe workload's seconds by the profile's own layer times, executor/host_probe.h); a later run
// times the same probe, and probe now / reference is the host's speed relative to the profile
// (a shared or throttled machine drifts by 10-60% between runs). Pure; thread-safe.
#ifndef OCTOPIPE_CALIBRATION_HOST_SPEED_H_
#define OCTOPIPE_CALIBRATION_HOST_SPEED_H_

#include "absl/status/status.h"
#include "core/cluster.h"
#include "core/model_graph.h"

namespace octopipe {

// Scales every layer time of `model` and the per-op and per-message CPU costs of every hardware
// of `cluster` by `ratio` (> 0; link times unchanged: the wire does not slow with the CPU).
// kInvalidArgument naming `ratio` when it is not finite and positive.
absl::Status ScaleToHostSpeed(double ratio, ModelGraph* model, Cluster* cluster);

}  // namespace octopipe

#endif  // OCTOPIPE_CALIBRATION_HOST_SPEED_H_
