// A random pipeline problem for the property tests of the schedule improvers
// (simulator/justify.h, simulator/critical_swap.h) and a random policy to list-schedule it:
// test-only.
#ifndef OCTOPIPE_SIMULATOR_RANDOM_TEST_PROBLEM_H_
#define OCTOPIPE_SIMULATOR_RANDOM_TEST_PROBLEM_H_

#include <algorithm>
#include <random>
#include <vector>

#include "simulator/list_scheduler.h"
#include "simulator/problem.h"

namespace octopipe {

// S stages on P devices (every device holds one, the rest at random), costs in [0.2, 2],
// transfers of 0.05 + bytes / 1000 s, some stages recomputing, vocabulary passes when `vocab`.
inline PipelineProblem RandomProblem(std::mt19937_64& rng, bool vocab) {
  std::uniform_int_distribution<int> devices(1, 4), extra(0, 6), micro(1, 6);
  std::uniform_real_distribution<double> cost(0.2, 2.0), unit(0.0, 1.0);
  const int P = devices(rng);
  const int S = P + extra(rng);
  std::vector<int> stage_device(S);
  for (int s = 0; s < S; ++s) stage_device[s] = s < P ? s : static_cast<int>(unit(rng) * P) % P;
  std::shuffle(stage_device.begin(), stage_device.end(), rng);
  PipelineProblem pb = UniformProblem(stage_device, P, micro(rng), 1, 1, 1);
  for (int s = 0; s < S; ++s) {
    pb.forward_s[s] = cost(rng);
    pb.backward_input_s[s] = cost(rng);
    pb.weight_grad_s[s] = cost(rng);
    pb.recompute_s[s] = pb.forward_s[s];
    pb.recompute[s] = unit(rng) < 0.25 ? 1 : 0;
    pb.output_bytes[s] = 100 * unit(rng);
  }
  for (int a = 0; a < P; ++a) {
    for (int b = 0; b < P; ++b) {
      pb.link_latency_s[a * P + b] = a == b ? 0 : 0.05;
      pb.link_inv_bandwidth[a * P + b] = a == b ? 0 : 1e-3;
    }
  }
  if (vocab) {
    pb.vocab_parallel = true;
    pb.vocab_s_s.resize(P);
    pb.vocab_t_s.resize(P);
    pb.vocab_activation_bytes.assign(P, 0.0);
    for (int d = 0; d < P; ++d) {
      pb.vocab_s_s[d] = cost(rng) / 2;
      pb.vocab_t_s[d] = cost(rng) / 2;
    }
    pb.vocab_input_bytes = 50;
    pb.vocab_allreduce_s = 0.1;
  }
  return pb;
}

// A random linear list-scheduling policy: kind weights in [0, 3), either micro-batch order,
// either stage order.
inline WeightedPolicy RandomPolicy(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  WeightedPolicy p;
  for (double& w : p.kind_weight) w = 3 * unit(rng);
  p.microbatch_weight = unit(rng) < 0.8 ? 1e-3 : -1e-3;
  p.stage_weight = unit(rng) < 0.5 ? 1e-6 : -1e-6;
  return p;
}

}  // namespace octopipe

#endif  // OCTOPIPE_SIMULATOR_RANDOM_TEST_PROBLEM_H_
