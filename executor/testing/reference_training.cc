#include "executor/testing/reference_training.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "executor/optimizer.h"
#include "executor/reference_trainer.h"
#include "executor/trainer.h"

namespace octopipe::executor::testing {

Reference TrainReference(const ModelSpec& spec, int microbatches, int iterations) {
  auto layers = BuildModel(spec.pattern, spec.dims);
  if (!layers.ok()) {
    std::fprintf(stderr, "TrainReference: %s\n", layers.status().ToString().c_str());
    std::abort();
  }
  AdamWOptions adam;
  adam.lr = static_cast<float>(TrainOptions{}.lr);
  AdamW optimizer(adam);
  const uint64_t seed = TrainOptions{}.data_seed;
  Reference ref;
  for (int it = 0; it < iterations; ++it) {
    ReferenceResult r =
        RunReferenceIteration(*layers, IterationData(spec, seed, it, microbatches));
    ref.losses.push_back(r.loss);
    ref.loss = r.loss;
    ref.grads = std::move(r.grads_per_layer);
    if (absl::Status s = ApplyAdamW(*layers, &optimizer); !s.ok()) {
      std::fprintf(stderr, "TrainReference: %s\n", s.ToString().c_str());
      std::abort();
    }
  }
  for (auto& layer : *layers) {
    std::vector<Tensor> copies;
    for (Tensor* p : layer->params()) copies.push_back(*p);
    ref.params.push_back(std::move(copies));
  }
  return ref;
}

LayoutPlan HomogeneousLayout(const Plan& plan, int tp, int ep, int dp) {
  LayoutPlan lp;
  lp.layout = {plan.num_devices, tp, ep, dp, true};
  lp.num_ranks = plan.num_devices * tp * dp;
  lp.global_microbatches = plan.num_microbatches * dp;
  LayoutPipelinePlan pipe;
  pipe.plan = plan;
  for (int r = 0; r < dp; ++r) {
    PipelineReplica rep;
    rep.dp_rank = r;
    rep.first_microbatch = r * plan.num_microbatches;
    for (int j = 0; j < plan.num_devices; ++j) rep.device_ranks.push_back((r + dp * j) * tp);
    pipe.replicas.push_back(std::move(rep));
  }
  lp.pipelines.push_back(std::move(pipe));
  return lp;
}

ModelSpec EqualityTestSpec(int microbatches) {
  absl::StatusOr<ModelSpec> spec = ParseModelSpec(
      "ref:pattern=M*-EM-*E,hidden=16,heads=2,ffn=24,experts=4,top_k=2,moe_ffn=12,state=4,"
      "expand=2,seq=8,batch=1,vocab=32,seed=3,microbatches=" +
      std::to_string(microbatches));
  if (!spec.ok()) {
    std::fprintf(stderr, "EqualityTestSpec: %s\n", std::string(spec.status().message()).c_str());
    std::abort();
  }
  return *spec;
}

}  // namespace octopipe::executor::testing
