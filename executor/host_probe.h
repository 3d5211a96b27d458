// Host-speed probe: how fast this host runs the reference model's layers right now.
//
// A measured profile (`octopipe profile`) is taken minutes before the runs it predicts, and a
// shared host does not keep one speed: on this project's VMs every op of a run was 0.73-1.70x
// its profiled time, the same factor for every schedule run in the same minute (measured_win
// runs 13-18, README). The probe is a fixed workload of the model itself — one single-process
// iteration of one micro-batch through every layer: F, B and W (RunReferenceIteration) — timed
// a few times on the calling thread. The profile records it next to the op times
// (Model.host_probe_s); `octopipe train --host_probe` runs it again on every rank just before
// its first iteration, so `probe now / probe then` is the host's speed against the profile's,
// known before the plan runs (and reported next to the prediction, never folded into it
// silently).
#ifndef OCTOPIPE_EXECUTOR_HOST_PROBE_H_
#define OCTOPIPE_EXECUTOR_HOST_PROBE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "executor/model_spec.h"

namespace octopipe::executor {

struct HostProbe {
  double seconds = 0;  // median over the timed repetitions
  double spread = 0;   // (max - min) / median of the timed repetitions
  std::vector<double> samples;
};

// Builds every layer of `spec` (as BuildModel; data of seed `data_seed`, iteration 0, one
// micro-batch) and times `repeats` reference iterations after one untimed warm-up.
// kInvalidArgument naming `repeats` unless >= 1; model errors as BuildModel.
absl::StatusOr<HostProbe> RunHostProbe(const ModelSpec& spec, int repeats, uint64_t data_seed = 7);

// The median of positive probe seconds (e.g. every rank's); 0 when there is none.
double MedianProbeSeconds(std::vector<double> seconds);

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_HOST_PROBE_H_
