// Pins MakeLayer / LayerKindsFromPattern (kinds, errors), deterministic initialisation, and
// forward behaviour that finite differences cannot see: the embedding gathers rows, the head's
// loss is ln(vocab) for uniform logits, attention and the scan are causal and keep the
// micro-batch's sequences apart, and the MoE router breaks ties towards lower expert indices.
#include "executor/layer.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "executor/data.h"
#include "executor/layers/init.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace octopipe::executor {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

ModelDims TinyDims() {
  ModelDims d;
  d.vocab = 32;
  d.hidden = 16;
  d.heads = 2;
  d.ffn = 24;
  d.experts = 4;
  d.top_k = 2;
  d.moe_ffn = 12;
  d.state = 4;
  d.seq_len = 8;
  d.batch = 2;
  return d;
}

std::unique_ptr<Layer> Make(const std::string& kind, const ModelDims& dims, int index = 1) {
  absl::StatusOr<std::unique_ptr<Layer>> layer = MakeLayer(kind, dims, index);
  EXPECT_TRUE(layer.ok()) << layer.status();
  return std::move(*layer);
}

Tensor Random(Eigen::Index rows, Eigen::Index cols, int stream) {
  Tensor t(rows, cols);
  InitUniform(/*seed=*/3, /*layer_index=*/0, stream, 1.0f, &t);
  return t;
}

TEST(LayerKindsFromPatternTest, EmbeddingThenOneKindPerLetterThenHead) {
  absl::StatusOr<std::vector<std::string>> kinds = LayerKindsFromPattern("M*-E");
  ASSERT_TRUE(kinds.ok()) << kinds.status();
  EXPECT_THAT(*kinds, ElementsAre("embedding", "mamba", "attention", "mlp", "moe", "head"));
  kinds = LayerKindsFromPattern("");
  ASSERT_TRUE(kinds.ok());
  EXPECT_THAT(*kinds, ElementsAre("embedding", "head"));
}

TEST(LayerKindsFromPatternTest, UnknownLetterIsInvalidArgumentNamingIt) {
  absl::StatusOr<std::vector<std::string>> kinds = LayerKindsFromPattern("M*X-");
  ASSERT_EQ(kinds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(kinds.status().message(), HasSubstr("'X' at position 2"));
}

TEST(MakeLayerTest, BuildsEveryKindWithMatchingParamsAndGrads) {
  for (const char* kind : {"embedding", "attention", "mlp", "moe", "mamba", "head"}) {
    std::unique_ptr<Layer> layer = Make(kind, TinyDims());
    EXPECT_EQ(layer->kind(), kind);
    std::vector<Tensor*> p = layer->params(), g = layer->grads();
    ASSERT_EQ(p.size(), g.size()) << kind;
    for (size_t i = 0; i < p.size(); ++i) {
      EXPECT_EQ(p[i]->rows(), g[i]->rows()) << kind << " " << i;
      EXPECT_EQ(p[i]->cols(), g[i]->cols()) << kind << " " << i;
      EXPECT_TRUE(g[i]->isZero(0)) << kind << " " << i;
      EXPECT_TRUE(p[i]->allFinite()) << kind << " " << i;
    }
  }
}

TEST(MakeLayerTest, UnknownKindIsInvalidArgumentNamingIt) {
  absl::StatusOr<std::unique_ptr<Layer>> layer = MakeLayer("convolution", TinyDims(), 0);
  ASSERT_EQ(layer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(layer.status().message(), HasSubstr("\"convolution\""));
}

TEST(MakeLayerTest, BadDimsAreInvalidArgumentNamingTheField) {
  ModelDims dims = TinyDims();
  dims.heads = 3;
  absl::StatusOr<std::unique_ptr<Layer>> layer = MakeLayer("attention", dims, 0);
  ASSERT_EQ(layer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(layer.status().message(), HasSubstr("dims.heads (3)"));

  dims = TinyDims();
  dims.top_k = 5;
  layer = MakeLayer("moe", dims, 0);
  ASSERT_EQ(layer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(layer.status().message(), HasSubstr("dims.top_k must be in [1, 4], got 5"));

  dims = TinyDims();
  dims.vocab = 0;
  layer = MakeLayer("head", dims, 0);
  ASSERT_EQ(layer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(layer.status().message(), HasSubstr("dims.vocab must be > 0, got 0"));
}

TEST(ParamInitTest, SplitMix64MatchesTheReferenceSequence) {
  // Vigna's splitmix64.c seeded with 1234567.
  SplitMix64 rng(1234567);
  EXPECT_EQ(rng.Next(), 6457827717110365317ULL);
  EXPECT_EQ(rng.Next(), 3203168211198807973ULL);
  EXPECT_EQ(rng.Next(), 9817491932198370423ULL);
}

TEST(ParamInitTest, SameSeedAndIndexGiveIdenticalLayersOthersDiffer) {
  for (const char* kind : {"embedding", "attention", "mlp", "moe", "mamba", "head"}) {
    std::unique_ptr<Layer> a = Make(kind, TinyDims(), 4);
    std::unique_ptr<Layer> b = Make(kind, TinyDims(), 4);
    std::unique_ptr<Layer> other_index = Make(kind, TinyDims(), 5);
    ModelDims reseeded = TinyDims();
    reseeded.seed = 2;
    std::unique_ptr<Layer> other_seed = Make(kind, reseeded, 4);
    bool index_differs = false, seed_differs = false;
    for (size_t i = 0; i < a->params().size(); ++i) {
      EXPECT_EQ(*a->params()[i], *b->params()[i]) << kind << " " << i;
      index_differs |= *a->params()[i] != *other_index->params()[i];
      seed_differs |= *a->params()[i] != *other_seed->params()[i];
    }
    EXPECT_TRUE(index_differs) << kind;
    EXPECT_TRUE(seed_differs) << kind;
  }
}

TEST(EmbeddingTest, GathersTheTokensRows) {
  const ModelDims dims = TinyDims();
  std::unique_ptr<Layer> layer = Make("embedding", dims);
  const MicroBatch mb = MakeMicroBatch(dims, 1, 0, 0);
  LayerContext ctx;
  const Tensor y = layer->Forward(Tensor(), mb, &ctx);
  ASSERT_EQ(y.rows(), static_cast<Eigen::Index>(mb.tokens.size()));
  for (size_t t = 0; t < mb.tokens.size(); ++t) {
    EXPECT_EQ(y.row(t), layer->params()[0]->row(mb.tokens[t]));
  }
}

TEST(HeadTest, UniformLogitsGiveLogVocab) {
  const ModelDims dims = TinyDims();
  std::unique_ptr<Layer> layer = Make("head", dims);
  layer->params()[1]->setZero();  // W_out
  const MicroBatch mb = MakeMicroBatch(dims, 1, 0, 0);
  LayerContext ctx;
  const Tensor loss = layer->Forward(Random(16, dims.hidden, 1), mb, &ctx);
  ASSERT_EQ(loss.rows(), 1);
  ASSERT_EQ(loss.cols(), 1);
  EXPECT_NEAR(loss(0, 0), std::log(32.0), 1e-5);
}

// Changing the input at (sequence 1, position 4) changes outputs only at positions >= 4 of
// sequence 1.
void ExpectCausalPerSequence(const std::string& kind) {
  const ModelDims dims = TinyDims();  // batch 2, seq_len 8
  std::unique_ptr<Layer> layer = Make(kind, dims);
  const MicroBatch mb = MakeMicroBatch(dims, 1, 0, 0);
  Tensor x = Random(16, dims.hidden, 1);
  LayerContext ctx;
  const Tensor before = layer->Forward(x, mb, &ctx);
  x.row(8 + 4) = Random(1, dims.hidden, 2);
  const Tensor after = layer->Forward(x, mb, &ctx);
  for (int row = 0; row < 16; ++row) {
    if (row >= 12) {
      EXPECT_NE(before.row(row), after.row(row)) << kind << " row " << row;
    } else {
      EXPECT_EQ(before.row(row), after.row(row)) << kind << " row " << row;
    }
  }
}

TEST(AttentionTest, CausalWithinEachSequence) { ExpectCausalPerSequence("attention"); }
TEST(MambaTest, CausalWithinEachSequence) { ExpectCausalPerSequence("mamba"); }

TEST(MoeTest, TiedRouterLogitsPickTheLowestExpertsWithEqualGates) {
  const ModelDims dims = TinyDims();  // 4 experts, top 2
  std::unique_ptr<Layer> layer = Make("moe", dims);
  layer->params()[1]->setZero();  // router: every logit 0
  const MicroBatch mb = MakeMicroBatch(dims, 1, 0, 0);
  const Tensor x = Random(16, dims.hidden, 1);
  LayerContext ctx;
  const Tensor y = layer->Forward(x, mb, &ctx);
  ASSERT_FALSE(ctx.saved_index.empty());
  for (int t = 0; t < 16; ++t) {
    EXPECT_EQ(ctx.saved_index[0][2 * t], 0);
    EXPECT_EQ(ctx.saved_index[0][2 * t + 1], 1);
  }
  // y = x + 0.5 * (expert 0 + expert 1): the same as an MoE whose router picks only those.
  EXPECT_TRUE(ctx.saved_index[3].empty());
  EXPECT_TRUE(ctx.saved_index[4].empty());
  EXPECT_TRUE(y.allFinite());
}

}  // namespace
}  // namespace octopipe::executor
