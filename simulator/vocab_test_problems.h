// Test problems shared by the vocabulary-parallel tests (testonly).
#ifndef OCTOPIPE_SIMULATOR_VOCAB_TEST_PROBLEMS_H_
#define OCTOPIPE_SIMULATOR_VOCAB_TEST_PROBLEMS_H_

#include "simulator/problem.h"

namespace octopipe {

// Three devices, four stages (device 0 holds stages 0 and 3), 6 micro-batches, unequal stage
// costs and links (latency by sender), the head split over the devices with unequal S and T.
inline PipelineProblem ThreeUnequalVocabDevices() {
  PipelineProblem pb = UniformProblem({0, 1, 2, 0}, 3, 6, 1, 2, 1);
  pb.forward_s = {1.0, 1.5, 0.7, 1.2};
  pb.backward_input_s = {2.0, 2.5, 1.1, 2.2};
  pb.weight_grad_s = {0.9, 1.3, 0.5, 1.0};
  pb.output_bytes = {50, 80, 60, 0};
  for (int a = 0; a < 3; ++a) {
    for (int b = 0; b < 3; ++b) {
      if (a == b) continue;
      pb.link_latency_s[a * 3 + b] = 0.05 * (1 + a);
      pb.link_inv_bandwidth[a * 3 + b] = 1e-3;
    }
  }
  pb.vocab_parallel = true;
  pb.vocab_s_s = {0.6, 0.3, 0.45};
  pb.vocab_t_s = {0.2, 0.35, 0.25};
  pb.vocab_activation_bytes = {1, 1, 1};
  pb.vocab_input_bytes = 70;
  pb.vocab_allreduce_s = 0.15;
  return pb;
}

}  // namespace octopipe

#endif  // OCTOPIPE_SIMULATOR_VOCAB_TEST_PROBLEMS_H_
