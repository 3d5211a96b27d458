#include "executor/testing/random_plan.h"

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "simulator/list_scheduler.h"
#include "simulator/problem.h"

namespace octopipe::executor::testing {

Plan RandomPlan(std::mt19937& rng, int L, int P, int S, int M, bool split_backward,
                bool vocab_parallel) {
  std::vector<int> placement(S);
  for (int s = 0; s < S; ++s) placement[s] = s < P ? s : static_cast<int>(rng() % P);
  std::shuffle(placement.begin(), placement.end(), rng);
  PipelineProblem pb = UniformProblem(placement, P, M, 1, 1, 1);
  std::uniform_real_distribution<double> u(0.1, 3.0);
  for (int s = 0; s < S; ++s) {
    pb.forward_s[s] = u(rng);
    pb.backward_input_s[s] = u(rng);
    pb.weight_grad_s[s] = u(rng);
    pb.recompute[s] = rng() % 4 == 0;
  }
  if (vocab_parallel) {
    pb.vocab_parallel = true;
    pb.vocab_activation_bytes.assign(P, 0.0);
    for (int d = 0; d < P; ++d) {
      pb.vocab_s_s.push_back(u(rng));
      pb.vocab_t_s.push_back(u(rng));
    }
  }
  WeightedPolicy policy;
  policy.kind_weight = {u(rng), u(rng), u(rng), u(rng), u(rng)};
  policy.microbatch_weight = u(rng) - 1.5;
  policy.stage_weight = u(rng) - 1.5;
  if (vocab_parallel) {
    policy.kind_weight[static_cast<int>(OpKind::kS)] = u(rng);
    policy.kind_weight[static_cast<int>(OpKind::kT)] = u(rng);
  }
  ListSchedulerOptions options;
  options.split_backward = split_backward;
  absl::StatusOr<ListScheduleResult> ls = ListSchedule(pb, policy, options);
  if (!ls.ok()) std::abort();  // no caps: cannot fail
  std::vector<int> cuts;
  for (int l = 1; l < L; ++l) cuts.push_back(l);
  std::shuffle(cuts.begin(), cuts.end(), rng);
  cuts.resize(S - 1);
  std::sort(cuts.begin(), cuts.end());
  cuts.insert(cuts.begin(), 0);
  cuts.push_back(L);
  Plan plan;
  plan.num_devices = P;
  plan.num_microbatches = M;
  plan.vocab_parallel = vocab_parallel;
  for (int s = 0; s < S; ++s) {
    plan.stages.push_back(
        StageAssignment{cuts[s], cuts[s + 1] - 1, placement[s], pb.recompute[s] != 0});
  }
  plan.schedule = std::move(ls->schedule);
  return plan;
}

}  // namespace octopipe::executor::testing
