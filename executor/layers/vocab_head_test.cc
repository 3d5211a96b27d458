// The head split by vocabulary computes what the whole head computes: shard ranges by hand, and
// one micro-batch through three shards (S, combine, T, and the norm) against HeadLayer.
#include "executor/layers/vocab_head.h"

#include <algorithm>
#include <memory>

#include "executor/data.h"
#include "executor/layers/head.h"
#include "executor/layers/init.h"
#include "gtest/gtest.h"

namespace octopipe::executor {
namespace {

double RelativeError(const Tensor& got, const Tensor& want) {
  return (got - want).norm() / std::max(1e-12, static_cast<double>(want.norm()));
}

TEST(VocabHeadTest, ShardRangesFollowTheColumnsInShardOrder) {
  const int want[3][2] = {{0, 4}, {4, 24}, {24, 31}};
  for (int d = 0; d < 3; ++d) {
    const VocabRange r = VocabShardRange({4, 20, 7}, d);
    EXPECT_EQ(r.begin, want[d][0]) << d;
    EXPECT_EQ(r.end, want[d][1]) << d;
  }
  EXPECT_EQ(VocabShardRange({4, 4}, 1).begin, 4);
  EXPECT_EQ(VocabShardRange({4, 4}, 1).end, 8);
}

TEST(VocabHeadTest, ThreeShardsComputeTheWholeHeadsLossAndGradients) {
  ModelDims dims;
  dims.vocab = 31;
  dims.hidden = 16;
  dims.seq_len = 8;
  dims.seed = 5;
  constexpr int kLayer = 4, kShards = 3, kHolder = 1;
  constexpr float kDloss = 0.25f;
  const MicroBatch mb = MakeMicroBatches(dims, 9, 0, 1)[0];
  Tensor x(dims.seq_len, dims.hidden);
  InitUniform(99, 0, 0, 2.0f, &x);

  HeadLayer whole(dims, kLayer);
  LayerContext whole_ctx;
  const float want_loss = whole.Forward(x, mb, &whole_ctx)(0, 0);
  const Tensor want_dx = whole.BackwardInput(Tensor::Constant(1, 1, kDloss), mb, &whole_ctx);
  whole.BackwardWeight(mb, &whole_ctx);

  std::vector<std::unique_ptr<VocabShardHead>> shards;
  for (int d = 0; d < kShards; ++d) {
    shards.push_back(std::make_unique<VocabShardHead>(
        dims, kLayer, VocabShardRange({5, 19, 7}, d), d == kHolder));  // unequal shards
  }
  VocabShardHead& holder = *shards[kHolder];
  LayerContext norm_ctx;
  const Tensor n = holder.Forward(x, mb, &norm_ctx);
  std::vector<LayerContext> ctx(kShards);
  std::vector<VocabPartial> partials;
  for (int d = 0; d < kShards; ++d) partials.push_back(shards[d]->ShardForward(n, mb, &ctx[d]));
  std::vector<const Tensor*> stats, grads;
  for (const VocabPartial& p : partials) {
    stats.push_back(&p.stats);
    grads.push_back(&p.grad);
  }
  float loss = 0;
  const Tensor dn = CombineInputGradient(stats, grads, kDloss, &loss);
  const Tensor dx = holder.BackwardInput(dn, mb, &norm_ctx);
  holder.BackwardWeight(mb, &norm_ctx);
  const Tensor normaliser = CombineNormaliser(stats);
  for (int d = 0; d < kShards; ++d) shards[d]->ShardBackwardWeight(normaliser, kDloss, mb, &ctx[d]);

  EXPECT_NEAR(loss, want_loss, 1e-6 * want_loss);
  EXPECT_LE(RelativeError(dx, want_dx), 1e-6);
  std::vector<std::vector<Tensor>> params, grad_parts;
  for (auto& s : shards) {
    params.emplace_back();
    for (Tensor* t : s->params()) params.back().push_back(*t);
    grad_parts.emplace_back();
    for (Tensor* t : s->grads()) grad_parts.back().push_back(*t);
  }
  absl::StatusOr<std::vector<Tensor>> merged_params = WholeHeadOf(params);
  absl::StatusOr<std::vector<Tensor>> merged_grads = WholeHeadOf(grad_parts);
  ASSERT_TRUE(merged_params.ok() && merged_grads.ok());
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ((*merged_params)[i], *whole.params()[i]) << "param " << i;  // bit for bit
    EXPECT_LE(RelativeError((*merged_grads)[i], *whole.grads()[i]), 1e-6) << "grad " << i;
  }
  // And cut again, the whole head gives each shard its own part.
  for (int d = 0; d < kShards; ++d) {
    const std::vector<Tensor> part = shards[d]->SliceOfWhole(*merged_params);
    ASSERT_EQ(part.size(), params[d].size());
    for (size_t i = 0; i < part.size(); ++i) EXPECT_EQ(part[i], params[d][i]) << d;
  }
}

TEST(VocabHeadTest, MergingNeedsExactlyOneNormHolder) {
  const Tensor gain = Tensor::Ones(1, 4), w = Tensor::Zero(4, 3);
  absl::StatusOr<std::vector<Tensor>> none = WholeHeadOf({{w}, {w}});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("0 of 2 hold the norm's gain"), absl::string_view::npos)
      << none.status();
  EXPECT_FALSE(WholeHeadOf({{gain, w}, {gain, w}}).ok());
  absl::StatusOr<std::vector<Tensor>> one = WholeHeadOf({{w}, {gain, w}});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ((*one)[1].cols(), 6);
}

}  // namespace
}  // namespace octopipe::executor
