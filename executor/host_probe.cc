#include "executor/host_probe.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "executor/data.h"
#include "executor/reference_trainer.h"

namespace octopipe::executor {

absl::StatusOr<HostProbe> RunHostProbe(const ModelSpec& spec, int repeats, uint64_t data_seed) {
  if (repeats < 1) {
    return absl::InvalidArgumentError(absl::StrCat("repeats must be >= 1, got ", repeats));
  }
  ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Layer>> layers,
                   BuildModel(spec.pattern, spec.dims));
  const std::vector<MicroBatch> data = MakeMicroBatches(spec.dims, data_seed, 0, 1);
  RunReferenceIteration(layers, data);  // warm-up: first-touch allocations, caches
  HostProbe probe;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    RunReferenceIteration(layers, data);
    probe.samples.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  probe.seconds = MedianProbeSeconds(probe.samples);
  const auto [lo, hi] = std::minmax_element(probe.samples.begin(), probe.samples.end());
  probe.spread = probe.seconds > 0 ? (*hi - *lo) / probe.seconds : 0;
  return probe;
}

double MedianProbeSeconds(std::vector<double> seconds) {
  seconds.erase(std::remove_if(seconds.begin(), seconds.end(), [](double s) { return !(s > 0); }),
                seconds.end());
  if (seconds.empty()) return 0;
  std::sort(seconds.begin(), seconds.end());
  const size_t n = seconds.size();
  return n % 2 ? seconds[n / 2] : (seconds[n / 2 - 1] + seconds[n / 2]) / 2;
}

double ProbeWorkloadSeconds(const octopipe::ModelGraph& model) {
  double total = 0;
  for (const octopipe::Layer& layer : model.layers) {
    const MeasuredCosts& m = layer.measured;
    if (!m.forward_s || !m.backward_input_s || !m.weight_grad_s) return 0;
    total += *m.forward_s + *m.backward_input_s + *m.weight_grad_s;
  }
  return total;
}

}  // namespace octopipe::executor
