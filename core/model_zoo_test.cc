// Pins the zoo's layer layouts to the layer rules of the models' published configurations and
// its parameter totals to the published model sizes.
#include "core/model_zoo.h"

#include <set>

#include "core/cost_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace octopipe {
namespace {

using ::testing::HasSubstr;

ModelGraph Build(absl::string_view name) {
  absl::StatusOr<ModelGraph> m = ZooModel(name, TrainingOptions{});
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : ModelGraph{};
}

double TotalParams(const ModelGraph& m) {
  double total = 0;
  for (const Layer& l : m.layers) total += CostModel::ParamCount(l);
  return total;
}

int Count(const ModelGraph& m, LayerKind kind) {
  int n = 0;
  for (const Layer& l : m.layers) n += l.kind == kind;
  return n;
}

TEST(ModelZooTest, EveryModelIsValidWithEmbeddingFirstAndHeadLast) {
  const std::vector<std::string> names = ZooModelNames();
  ASSERT_EQ(12u, names.size());
  ASSERT_EQ(names.size(), ZooCatalog().size());
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const ModelGraph m = Build(name);
    ASSERT_GE(m.num_layers(), 3);
    EXPECT_EQ(name, m.name);
    EXPECT_FALSE(m.source.empty());
    EXPECT_EQ(LayerKind::kEmbedding, m.layers.front().kind);
    EXPECT_EQ(LayerKind::kHead, m.layers.back().kind);
    EXPECT_EQ(1, Count(m, LayerKind::kEmbedding));
    EXPECT_EQ(1, Count(m, LayerKind::kHead));
    std::set<std::string> layer_names;
    for (const Layer& l : m.layers) {
      EXPECT_TRUE(layer_names.insert(l.name).second) << "duplicate layer name " << l.name;
      // Names say what the layer is: they end in the kind's name.
      EXPECT_THAT(l.name, HasSubstr(std::string(LayerKindName(l.kind)))) << l.name;
    }
  }
  for (const ZooModelInfo& info : ZooCatalog()) EXPECT_FALSE(info.description.empty());
}

TEST(ModelZooTest, UnknownNameListsValidNames) {
  absl::StatusOr<ModelGraph> m = ZooModel("gpt-5", TrainingOptions{});
  ASSERT_EQ(absl::StatusCode::kInvalidArgument, m.status().code());
  EXPECT_THAT(m.status().message(), HasSubstr("'gpt-5'"));
  EXPECT_THAT(m.status().message(), HasSubstr("llama3-8b"));
  EXPECT_THAT(m.status().message(), HasSubstr("nemotron-h-8b"));
}

TEST(ModelZooTest, TrainingOptionsAreCopiedAndValidated) {
  TrainingOptions t;
  t.seq_len = 8192;
  t.num_microbatches = 32;
  t.tp_degree = 2;
  absl::StatusOr<ModelGraph> m = ZooModel("llama3-8b", t);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(8192, m->training.seq_len);
  EXPECT_EQ(32, m->training.num_microbatches);
  EXPECT_EQ(2, m->training.tp_degree);

  t.micro_batch_size = 0;
  m = ZooModel("llama3-8b", t);
  ASSERT_EQ(absl::StatusCode::kInvalidArgument, m.status().code());
  EXPECT_THAT(m.status().message(), HasSubstr("training.micro_batch_size"));
}

TEST(ModelZooTest, LlamaBlocksSplitIntoAttentionAndMlp) {
  const ModelGraph m = Build("llama3-8b");
  ASSERT_EQ(1 + 2 * 32 + 1, m.num_layers());
  EXPECT_EQ("L7.attention", m.layers[1 + 2 * 7].name);
  EXPECT_EQ(LayerKind::kAttention, m.layers[1 + 2 * 7].kind);
  EXPECT_EQ("L7.mlp", m.layers[2 + 2 * 7].name);
  EXPECT_TRUE(m.layers[2 + 2 * 7].dims.gated);
  EXPECT_EQ(8, m.layers[1].dims.kv_heads);
}

TEST(ModelZooTest, NemotronH8bFollowsItsHybridPattern) {
  const ModelGraph m = Build("nemotron-h-8b");
  EXPECT_EQ(24, Count(m, LayerKind::kMamba2));
  EXPECT_EQ(4, Count(m, LayerKind::kAttention));
  EXPECT_EQ(24, Count(m, LayerKind::kMlp));
  ASSERT_EQ(1 + 52 + 1, m.num_layers());
  // Attention sits at indices 7, 18, 29, 40 of hybrid_override_pattern. Our layer list has the
  // embedding at 0, so pattern index p is layers[p + 1].
  std::vector<int> attention_pattern_positions;
  for (int i = 0; i < m.num_layers(); ++i) {
    if (m.layers[i].kind == LayerKind::kAttention) attention_pattern_positions.push_back(i - 1);
  }
  EXPECT_EQ((std::vector<int>{7, 18, 29, 40}), attention_pattern_positions);
  EXPECT_EQ("L7.attention", m.layers[8].name);
  // The MLP is relu², not gated; Mamba-2 inner width is 128 heads × 64 = 2 × 4096.
  EXPECT_FALSE(m.layers[2].dims.gated);
  EXPECT_EQ(2, m.layers[1].dims.expand);
  EXPECT_EQ(128, m.layers[1].dims.ssm_heads);
}

TEST(ModelZooTest, NemotronHLargeModelsHaveTheirPatternLength) {
  EXPECT_EQ(1 + 98 + 1, Build("nemotron-h-47b").num_layers());
  EXPECT_EQ(1 + 118 + 1, Build("nemotron-h-56b").num_layers());
  EXPECT_EQ(10, Count(Build("nemotron-h-56b"), LayerKind::kAttention));
}

TEST(ModelZooTest, JambaV01AttentionEveryEighthBlockAndMoeOnOddBlocks) {
  const ModelGraph m = Build("jamba-v0.1");
  ASSERT_EQ(1 + 2 * 32 + 1, m.num_layers());
  // Block i's mixer is layers[1 + 2i], its FFN layers[2 + 2i].
  std::vector<int> attention_blocks;
  for (int i = 0; i < 32; ++i) {
    const Layer& mixer = m.layers[1 + 2 * i];
    const Layer& ffn = m.layers[2 + 2 * i];
    if (mixer.kind == LayerKind::kAttention) {
      attention_blocks.push_back(i);
    } else {
      EXPECT_EQ(LayerKind::kMamba, mixer.kind) << i;
    }
    EXPECT_EQ(i % 2 == 1 ? LayerKind::kMoe : LayerKind::kMlp, ffn.kind) << i;
  }
  EXPECT_EQ((std::vector<int>{4, 12, 20, 28}), attention_blocks);
  // About 52B parameters.
  EXPECT_NEAR(52e9, TotalParams(m), 0.03 * 52e9);
}

TEST(ModelZooTest, Jamba15LargeAssumptionsReproducePublishedTotals) {
  const ModelGraph m = Build("jamba-1.5-large");
  ASSERT_EQ(1 + 2 * 72 + 1, m.num_layers());
  EXPECT_EQ(9, Count(m, LayerKind::kAttention));
  EXPECT_EQ(36, Count(m, LayerKind::kMoe));
  EXPECT_NEAR(398e9, TotalParams(m), 0.01 * 398e9);
}

TEST(ModelZooTest, DeepSeekV3HasThreeDenseThenFiftyEightMoe) {
  const ModelGraph m = Build("deepseek-v3");
  ASSERT_EQ(1 + 2 * 61 + 1, m.num_layers());
  EXPECT_EQ(61, Count(m, LayerKind::kMlaAttention));
  for (int i = 0; i < 61; ++i) {
    EXPECT_EQ(LayerKind::kMlaAttention, m.layers[1 + 2 * i].kind) << i;
    EXPECT_EQ(i < 3 ? LayerKind::kMlp : LayerKind::kMoe, m.layers[2 + 2 * i].kind) << i;
  }
  EXPECT_EQ(3, Count(m, LayerKind::kMlp));
  EXPECT_EQ(58, Count(m, LayerKind::kMoe));
}

TEST(ModelZooTest, ParameterTotalsArePlausible) {
  EXPECT_NEAR(8.0e9, TotalParams(Build("llama3-8b")), 0.03 * 8.0e9);
  EXPECT_NEAR(70.6e9, TotalParams(Build("llama3-70b")), 0.03 * 70.6e9);
  EXPECT_NEAR(46.7e9, TotalParams(Build("mixtral-8x7b")), 0.03 * 46.7e9);
  // 671B main model; the 14B multi-token-prediction module is not built.
  EXPECT_NEAR(671e9, TotalParams(Build("deepseek-v3")), 0.05 * 671e9);
  EXPECT_NEAR(8e9, TotalParams(Build("nemotron-h-8b")), 0.05 * 8e9);
  EXPECT_NEAR(56e9, TotalParams(Build("nemotron-h-56b")), 0.05 * 56e9);
  EXPECT_NEAR(47e9, TotalParams(Build("nemotron-h-47b")), 0.05 * 47e9);
  // LLaVA-1.5-7B ≈ 7.06e9 and Qwen2-VL-7B ≈ 8.29e9 with their vision towers.
  EXPECT_NEAR(7.06e9, TotalParams(Build("llava-1.5-7b")), 0.03 * 7.06e9);
  EXPECT_NEAR(8.29e9, TotalParams(Build("qwen2-vl-7b")), 0.03 * 8.29e9);
  // Mamba2-2.7B ties its head to the embedding; counting the head's copy adds 50277·2560.
  EXPECT_NEAR(2.7e9 + 50277.0 * 2560, TotalParams(Build("mamba2-2.7b")), 0.03 * 2.7e9);
}

TEST(ModelZooTest, VisionLanguageModelsLineariseTheVisionTowerFirst) {
  const ModelGraph m = Build("llava-1.5-7b");
  ASSERT_EQ(1 + 24 + 1 + 64 + 1, m.num_layers());
  EXPECT_EQ(LayerKind::kEmbedding, m.layers[0].kind);
  for (int i = 1; i <= 24; ++i) {
    EXPECT_EQ(LayerKind::kVisionBlock, m.layers[i].kind);
    EXPECT_EQ(576, m.layers[i].dims.tokens);
  }
  const Layer& projector = m.layers[25];
  EXPECT_EQ("projector.mlp", projector.name);
  EXPECT_EQ(1024, projector.dims.hidden);
  EXPECT_EQ(4096, projector.dims.out_hidden);
  EXPECT_EQ(LayerKind::kAttention, m.layers[26].kind);

  const ModelGraph q = Build("qwen2-vl-7b");
  ASSERT_EQ(1 + 32 + 1 + 56 + 1, q.num_layers());
  EXPECT_EQ(576, q.layers[1].dims.tokens);
  EXPECT_EQ(1280 * 4, q.layers[33].dims.hidden);  // 2x2 merged patches
  EXPECT_EQ(144, q.layers[33].dims.tokens);
  EXPECT_EQ(3584, q.layers[33].dims.out_hidden);
}

TEST(ModelZooTest, Mamba2HasMixersOnly) {
  const ModelGraph m = Build("mamba2-2.7b");
  ASSERT_EQ(1 + 64 + 1, m.num_layers());
  EXPECT_EQ(64, Count(m, LayerKind::kMamba2));
  EXPECT_EQ(80, m.layers[1].dims.ssm_heads);
}

}  // namespace
}  // namespace octopipe
