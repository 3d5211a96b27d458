#include "executor/reference_trainer.h"

#include <cmath>
#include <memory>
#include <vector>

#include "executor/data.h"
#include "gtest/gtest.h"

namespace octopipe::executor {
namespace {

ModelDims TinyDims() {
  ModelDims d;
  d.vocab = 32;
  d.hidden = 16;
  d.heads = 2;
  d.ffn = 32;
  d.experts = 4;
  d.top_k = 2;
  d.moe_ffn = 16;
  d.state = 4;
  d.seq_len = 16;
  d.batch = 2;
  return d;
}

TEST(ReferenceTrainerTest, BuildModelFollowsThePattern) {
  absl::StatusOr<std::vector<std::unique_ptr<Layer>>> layers = BuildModel("M*-E", TinyDims());
  ASSERT_TRUE(layers.ok()) << layers.status();
  std::vector<std::string> kinds;
  for (const auto& layer : *layers) kinds.emplace_back(layer->kind());
  EXPECT_EQ(kinds,
            (std::vector<std::string>{"embedding", "mamba", "attention", "mlp", "moe", "head"}));
  EXPECT_EQ(BuildModel("M?", TinyDims()).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ReferenceTrainerTest, InitialLossNearLogVocabAndGradientsFinite) {
  const ModelDims dims = TinyDims();
  std::vector<std::unique_ptr<Layer>> layers = *BuildModel("M*-E", dims);
  const ReferenceResult result = RunReferenceIteration(layers, MakeMicroBatches(dims, 1, 0, 3));
  EXPECT_NEAR(result.loss, std::log(32.0), 0.5);
  ASSERT_EQ(result.grads_per_layer.size(), layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    ASSERT_EQ(result.grads_per_layer[i].size(), layers[i]->grads().size());
    for (size_t j = 0; j < result.grads_per_layer[i].size(); ++j) {
      const Tensor& g = result.grads_per_layer[i][j];
      EXPECT_TRUE(g.allFinite()) << "layer " << i << " grad " << j;
      EXPECT_GT(g.norm(), 0.0f) << "layer " << i << " grad " << j;
      EXPECT_EQ(g, *layers[i]->grads()[j]);
    }
  }
}

TEST(ReferenceTrainerTest, DeterministicAcrossFreshModels) {
  const ModelDims dims = TinyDims();
  std::vector<std::unique_ptr<Layer>> a = *BuildModel("M*-E", dims);
  std::vector<std::unique_ptr<Layer>> b = *BuildModel("M*-E", dims);
  const std::vector<MicroBatch> mbs = MakeMicroBatches(dims, 1, 0, 2);
  const ReferenceResult ra = RunReferenceIteration(a, mbs);
  const ReferenceResult rb = RunReferenceIteration(b, mbs);
  EXPECT_EQ(ra.loss, rb.loss);
  for (size_t i = 0; i < ra.grads_per_layer.size(); ++i) {
    for (size_t j = 0; j < ra.grads_per_layer[i].size(); ++j) {
      EXPECT_EQ(ra.grads_per_layer[i][j], rb.grads_per_layer[i][j]);
    }
  }
}

TEST(ReferenceTrainerTest, AdamWTrainingReducesTheLoss) {
  const ModelDims dims = TinyDims();
  std::vector<std::unique_ptr<Layer>> layers = *BuildModel("M*-E", dims);
  AdamWOptions options;
  options.lr = 1e-2f;
  options.weight_decay = 0.01f;
  AdamW adam(options);
  // The same held-fixed micro-batches before and after, so only the parameters change.
  const std::vector<MicroBatch> eval = MakeMicroBatches(dims, 1, /*iteration=*/100, 4);
  const double before = RunReferenceIteration(layers, eval).loss;
  for (int it = 0; it < 2; ++it) {
    const ReferenceResult r = RunReferenceIteration(layers, MakeMicroBatches(dims, 1, it, 4));
    ASSERT_TRUE(std::isfinite(r.loss));
    ASSERT_TRUE(ApplyAdamW(layers, &adam).ok());
  }
  EXPECT_EQ(adam.step(), 2);
  const double after = RunReferenceIteration(layers, eval).loss;
  EXPECT_LT(after, before - 0.2) << "before " << before << " after " << after;
}

TEST(ReferenceTrainerTest, ApplyAdamWSkipsNullLayers) {
  const ModelDims dims = TinyDims();
  std::vector<std::unique_ptr<Layer>> full = *BuildModel("-", dims);
  std::vector<std::unique_ptr<Layer>> partial = *BuildModel("-", dims);
  RunReferenceIteration(full, MakeMicroBatches(dims, 1, 0, 1));
  RunReferenceIteration(partial, MakeMicroBatches(dims, 1, 0, 1));
  partial[0].reset();
  partial[2].reset();
  AdamW adam_full(AdamWOptions{}), adam_partial(AdamWOptions{});
  ASSERT_TRUE(ApplyAdamW(full, &adam_full).ok());
  ASSERT_TRUE(ApplyAdamW(partial, &adam_partial).ok());
  for (size_t j = 0; j < full[1]->params().size(); ++j) {
    EXPECT_EQ(*full[1]->params()[j], *partial[1]->params()[j]);
  }
}

}  // namespace
}  // namespace octopipe::executor
