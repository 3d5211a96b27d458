// Host-speed probe: how fast this host runs the reference model's layers right now.
//
// A measured profile (`octopipe profile`) is taken minutes before the runs it predicts, and a
// shared host does not keep one speed: on this project's VMs every op of a run was 0.73-1.70x
// its profiled time, the same factor for every schedule run in the same minute (measured_win
// runs 13-18, README). The probe is a fixed workload of the model itself — one single-process
// iteration of one micro-batch through every layer: F, B and W (RunReferenceIteration) — timed
// a few times on the calling thread. `octopipe train --host_probe` runs it on every rank just
// before its first iteration, and `probe now / the profile's reference` (Model.host_probe_s) is
// the host's speed against the profile's, known before the plan runs (and reported next to the
// prediction, never folded into it silently).
//
// The profile's reference is not the probe it timed but what the probe's workload costs by the
// profile's own per-layer medians (ProbeWorkloadSeconds): the probe timed in a run tracks
// that run's summed F + B + W of one micro-batch within 0-4% (measured_win run 21, 45 runs), but
// the profile times it a few times at its launches' starts only, and once those samples fell in
// a faster phase of the host than the layers' (hundreds of samples over the launches): 57 ms
// timed against 62.5 ms of medians, and every prediction at the host's speed was 10% high.
#ifndef OCTOPIPE_EXECUTOR_HOST_PROBE_H_
#define OCTOPIPE_EXECUTOR_HOST_PROBE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model_graph.h"
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

// What the probe's workload (F, B and W of one micro-batch through every layer) costs by
// `model`'s measured per-layer times: the sum over layers of forward_s + backward_input_s +
// weight_grad_s. 0 when a layer lacks one of them (an analytic model: no host reference).
double ProbeWorkloadSeconds(const octopipe::ModelGraph& model);

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_HOST_PROBE_H_
