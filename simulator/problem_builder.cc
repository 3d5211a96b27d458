#include "simulator/problem_builder.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace octopipe {

absl::StatusOr<PipelineProblem> BuildProblem(const ModelGraph& model, const Cluster& cluster,
                                             const CostModel& cost_model, const Plan& plan) {
  RETURN_IF_ERROR(ValidatePlanShape(plan, model.num_layers()));
  if (plan.num_devices > cluster.num_devices()) {
    return absl::InvalidArgumentError(absl::StrCat("devices: ", plan.num_devices,
                                                   " requested but the cluster '", cluster.name,
                                                   "' has ", cluster.num_devices()));
  }
  const int P = plan.num_devices;
  const int S = plan.num_stages();
  PipelineProblem p;
  p.num_devices = P;
  p.num_stages = S;
  p.num_microbatches = plan.num_microbatches;
  p.stage_device.resize(S);
  p.forward_s.assign(S, 0);
  p.backward_input_s.assign(S, 0);
  p.weight_grad_s.assign(S, 0);
  p.recompute_s.assign(S, 0);
  p.activation_bytes.assign(S, 0);
  p.activation_bytes_w.assign(S, 0);
  p.input_bytes.assign(S, 0);
  p.output_bytes.assign(S, 0);
  p.recompute.assign(S, 0);
  p.static_bytes.assign(P, 0);
  p.memory_capacity.resize(P);
  for (int d = 0; d < P; ++d) p.memory_capacity[d] = cluster.usable_memory(d);

  for (int s = 0; s < S; ++s) {
    const StageAssignment& st = plan.stages[s];
    const HardwareSpec& hw = cluster.device_hardware(st.device);
    p.stage_device[s] = st.device;
    p.recompute[s] = st.recompute ? 1 : 0;
    for (int l = st.first_layer; l <= st.last_layer; ++l) {
      const LayerCost c = cost_model.Cost(model.layers[l], model.training, hw);
      p.forward_s[s] += c.forward_s;
      p.backward_input_s[s] += c.backward_input_s;
      p.weight_grad_s[s] += c.weight_grad_s;
      p.recompute_s[s] += c.recompute_s;
      p.activation_bytes[s] += c.activation_bytes;
      p.activation_bytes_w[s] += c.activation_bytes_w;
      if (l == st.first_layer) p.input_bytes[s] = c.input_bytes;
      if (l == st.last_layer) p.output_bytes[s] = c.output_bytes;
      p.static_bytes[st.device] += c.static_bytes;
    }
    // Under recompute F keeps the stage input; it can never exceed what F would hold anyway.
    p.input_bytes[s] = std::min(p.input_bytes[s], p.activation_bytes[s]);
  }

  p.link_latency_s.resize(static_cast<size_t>(P) * P);
  p.link_inv_bandwidth.resize(static_cast<size_t>(P) * P);
  for (int a = 0; a < P; ++a) {
    for (int b = 0; b < P; ++b) {
      const size_t i = static_cast<size_t>(a) * P + b;
      if (a == b) {
        p.link_latency_s[i] = 0;
        p.link_inv_bandwidth[i] = 0;
        continue;
      }
      const LinkSpec& link = cluster.link(a, b);
      p.link_latency_s[i] = link.latency_s;
      p.link_inv_bandwidth[i] = std::isinf(link.bandwidth) ? 0.0 : 1.0 / link.bandwidth;
    }
  }
  p.tokens_per_microbatch = model.tokens_per_microbatch();
  return p;
}

}  // namespace octopipe
