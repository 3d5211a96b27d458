// The embedding split by vocabulary computes what the whole embedding computes, bit for bit:
// three unequal shards' partials summed and their scatter-adds against EmbeddingLayer, stage
// 0's shard adding the others' sum in Forward, the whole table from the shards and back, and
// malformed shard sets refused.
#include "executor/layers/vocab_embedding.h"

#include <memory>

#include "executor/data.h"
#include "executor/layers/embedding.h"
#include "executor/layers/init.h"
#include "gtest/gtest.h"

namespace octopipe::executor {
namespace {

TEST(VocabEmbeddingTest, ThreeShardsAreTheWholeEmbeddingBitForBit) {
  ModelDims dims;
  dims.vocab = 31;
  dims.hidden = 16;
  dims.seq_len = 24;
  dims.seed = 5;
  constexpr int kShards = 3, kStageZero = 1;
  const std::vector<int64_t> columns = {5, 19, 7};  // unequal shards
  // Tokens in every shard, one of them twice (its gradient rows add up).
  MicroBatch mb = MakeMicroBatches(dims, 9, 0, 1)[0];
  for (int t = 0; t < dims.seq_len; ++t) mb.tokens[t] = (7 * t) % dims.vocab;
  mb.tokens[dims.seq_len - 1] = mb.tokens[1];
  Tensor dy(dims.seq_len, dims.hidden);
  InitUniform(99, 0, 0, 2.0f, &dy);

  EmbeddingLayer whole(dims, 0);
  LayerContext whole_ctx;
  const Tensor want_y = whole.Forward(Tensor(), mb, &whole_ctx);
  EXPECT_EQ(whole.BackwardInput(dy, mb, &whole_ctx).size(), 0);
  whole.BackwardWeight(mb, &whole_ctx);

  std::vector<std::unique_ptr<VocabShardEmbedding>> shards;
  for (int d = 0; d < kShards; ++d) {
    shards.push_back(
        std::make_unique<VocabShardEmbedding>(dims, 0, VocabShardRange(columns, d)));
    EXPECT_EQ(shards[d]->params()[0]->rows(), columns[d]);
  }
  // The other shards' partials, summed in shard order, then stage 0's shard's Forward.
  Tensor others;
  for (int d = 0; d < kShards; ++d) {
    if (d == kStageZero) continue;
    const Tensor part = shards[d]->Partial(mb);
    others = others.size() == 0 ? part : Tensor(others + part);
  }
  LayerContext ctx;
  const Tensor y = shards[kStageZero]->Forward(others, mb, &ctx);
  EXPECT_TRUE(y == want_y);
  // Stage 0's shard scatter-adds in W, the others from the received gradient.
  EXPECT_EQ(shards[kStageZero]->BackwardInput(dy, mb, &ctx).size(), 0);
  shards[kStageZero]->BackwardWeight(mb, &ctx);
  for (int d = 0; d < kShards; ++d) {
    if (d != kStageZero) shards[d]->AccumulateGradient(dy, mb);
  }
  std::vector<std::vector<Tensor>> tables, grads;
  for (auto& s : shards) {
    tables.push_back({*s->params()[0]});
    grads.push_back({*s->grads()[0]});
  }
  absl::StatusOr<std::vector<Tensor>> table = WholeEmbeddingOf(tables);
  absl::StatusOr<std::vector<Tensor>> grad = WholeEmbeddingOf(grads);
  ASSERT_TRUE(table.ok() && grad.ok()) << table.status() << grad.status();
  EXPECT_TRUE((*table)[0] == *whole.params()[0]);
  EXPECT_TRUE((*grad)[0] == *whole.grads()[0]);
  // Every shard's rows of the whole table are its own.
  for (int d = 0; d < kShards; ++d) {
    EXPECT_TRUE(shards[d]->SliceOfWhole(*table)[0] == *shards[d]->params()[0]) << d;
  }
  // A token of the micro-batch falls in every shard, so each had work to do.
  for (int d = 0; d < kShards; ++d) EXPECT_GT(shards[d]->grads()[0]->norm(), 0) << d;
}

TEST(VocabEmbeddingTest, OneShardAloneLooksUpEverything) {
  ModelDims dims;
  dims.vocab = 12;
  dims.hidden = 4;
  dims.seq_len = 6;
  const MicroBatch mb = MakeMicroBatches(dims, 3, 0, 1)[0];
  EmbeddingLayer whole(dims, 0);
  VocabShardEmbedding alone(dims, 0, VocabShardRange({12}, 0));
  LayerContext a, b;
  EXPECT_TRUE(alone.Forward(Tensor(), mb, &a) == whole.Forward(Tensor(), mb, &b));
}

TEST(VocabEmbeddingTest, MalformedShardsAreRefused) {
  EXPECT_FALSE(WholeEmbeddingOf({}).ok());
  const std::vector<std::vector<Tensor>> ragged = {{Tensor::Zero(2, 4)}, {Tensor::Zero(3, 5)}};
  absl::StatusOr<std::vector<Tensor>> r = WholeEmbeddingOf(ragged);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(WholeEmbeddingOf({{Tensor::Zero(2, 4), Tensor::Zero(2, 4)}}).ok());
}

}  // namespace
}  // namespace octopipe::executor
