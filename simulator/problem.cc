#include "simulator/problem.h"

#include <limits>

namespace octopipe {

PipelineProblem UniformProblem(const std::vector<int>& stage_device, int num_devices,
                               int num_microbatches, double f, double b, double w) {
  const int S = static_cast<int>(stage_device.size());
  const int P = num_devices;
  PipelineProblem pb;
  pb.num_devices = P;
  pb.num_stages = S;
  pb.num_microbatches = num_microbatches;
  pb.stage_device.assign(stage_device.begin(), stage_device.end());
  pb.forward_s.assign(S, f);
  pb.backward_input_s.assign(S, b);
  pb.weight_grad_s.assign(S, w);
  pb.recompute_s.assign(S, f);
  pb.activation_bytes.assign(S, 0.0);
  pb.activation_bytes_w.assign(S, 0.0);
  pb.input_bytes.assign(S, 0.0);
  pb.output_bytes.assign(S, 0.0);
  pb.recompute.assign(S, 0);
  pb.static_bytes.assign(P, 0.0);
  pb.memory_capacity.assign(P, std::numeric_limits<double>::infinity());
  pb.link_latency_s.assign(static_cast<size_t>(P) * P, 0.0);
  pb.link_inv_bandwidth.assign(static_cast<size_t>(P) * P, 0.0);
  pb.tokens_per_microbatch = 1;
  return pb;
}

}  // namespace octopipe
