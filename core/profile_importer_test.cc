// Pins the importer on the four published profiles (data/measured_profiles) and on small
// inline documents for each error.
#include "core/profile_importer.h"

#include "core/cost_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace octopipe {
namespace {

using ::testing::HasSubstr;

// Bazel runs tests in the workspace root of the runfiles tree.
std::string ProfilePath(absl::string_view model) {
  return absl::StrCat("data/measured_profiles/", model, ".json");
}

ModelGraph Import(absl::string_view model, ProfileImportOptions options = {}) {
  absl::StatusOr<ModelGraph> m = ImportProfileFile(ProfilePath(model), options);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : ModelGraph{};
}

TEST(ProfileImporterTest, NemotronNanoTimesKindsAndOptions) {
  ProfileImportOptions options;
  options.training.num_microbatches = 32;
  options.training.seq_len = 1;  // overridden by the file
  const ModelGraph m = Import("nemotron-nano-v2-9B", options);
  ASSERT_EQ(56, m.num_layers());
  EXPECT_EQ("profile-nemotron-nano-v2-9B", m.name);
  EXPECT_EQ(4096, m.training.seq_len);
  EXPECT_EQ(1, m.training.micro_batch_size);
  EXPECT_EQ(32, m.training.num_microbatches);
  EXPECT_THAT(m.source, HasSubstr("PipelineSimulator@c791c38b1272"));

  // layers[0] is "M+E": forward_ms 3.3494526572299725, backward_ms 8.763008440985825.
  const Layer& first = m.layers[0];
  EXPECT_EQ(LayerKind::kMamba2, first.kind);
  EXPECT_EQ("L0.embedding+mamba2 (M+E)", first.name);
  EXPECT_DOUBLE_EQ(3.3494526572299725e-3, *first.measured.forward_s);
  EXPECT_DOUBLE_EQ(8.763008440985825e-3 / 2, *first.measured.backward_input_s);
  EXPECT_DOUBLE_EQ(8.763008440985825e-3 / 2, *first.measured.weight_grad_s);

  // Letters: M -> mamba2, - -> mlp (relu², plain), * -> attention.
  EXPECT_EQ(LayerKind::kMlp, m.layers[1].kind);
  EXPECT_FALSE(m.layers[1].dims.gated);
  EXPECT_EQ("L1.mlp (-)", m.layers[1].name);
  int attention = 0, mamba = 0, mlp = 0;
  for (const Layer& l : m.layers) {
    attention += l.kind == LayerKind::kAttention;
    mamba += l.kind == LayerKind::kMamba2;
    mlp += l.kind == LayerKind::kMlp;
  }
  EXPECT_EQ(4, attention);
  EXPECT_EQ(27, mamba);
  EXPECT_EQ(25, mlp);
  EXPECT_EQ("L55.mlp+head (-+H)", m.layers[55].name);
}

TEST(ProfileImporterTest, SinglePartLayersGetMemoryFromDims) {
  const ModelGraph m = Import("nemotron-nano-v2-9B");
  const Layer& mlp = m.layers[1];
  EXPECT_FALSE(mlp.measured.activation_bytes.has_value());
  EXPECT_FALSE(mlp.measured.param_bytes.has_value());
  EXPECT_EQ(4480, mlp.dims.hidden);
  EXPECT_EQ(15680, mlp.dims.ffn);
  // 2 plain matrices + norm.
  EXPECT_DOUBLE_EQ(2.0 * 4480 * 15680 + 4480, CostModel::ParamCount(mlp));
}

TEST(ProfileImporterTest, CompositeLayersCarryTheMemoryOfAllTheirParts) {
  const ModelGraph m = Import("nemotron-nano-v2-9B");
  // layers[0] = embedding + Mamba-2: parameters of both.
  Layer embedding;
  embedding.kind = LayerKind::kEmbedding;
  embedding.dims.hidden = 4480;
  embedding.dims.vocab = 131072;
  const Layer& first = m.layers[0];
  ASSERT_TRUE(first.measured.param_bytes.has_value());
  EXPECT_DOUBLE_EQ(
      2 * (CostModel::ParamCount(embedding) + CostModel::ParamCount(first)),
      *first.measured.param_bytes);
  // The head layer sends nothing on.
  EXPECT_EQ(0.0, *m.layers[55].measured.output_bytes);
  EXPECT_GT(*m.layers[55].measured.activation_bytes, 4096.0 * 131072 * 4);  // fp32 logits

  // gpt-13B 'T' layers are whole blocks: attention + 4h GeLU MLP = 12·h² (+ norms) params.
  const ModelGraph gpt = Import("gpt-13B");
  ASSERT_EQ(40, gpt.num_layers());
  const Layer& block = gpt.layers[5];
  EXPECT_EQ(LayerKind::kAttention, block.kind);
  EXPECT_EQ("L5.attention+mlp (T)", block.name);
  EXPECT_DOUBLE_EQ(2 * (12.0 * 5120 * 5120 + 2 * 5120), *block.measured.param_bytes);
  EXPECT_DOUBLE_EQ(4096.0 * 5120 * 2, *block.measured.output_bytes);
}

TEST(ProfileImporterTest, DeepSeekAndGptOssLettersAndSequenceLength) {
  const ModelGraph ds = Import("deepseek-16B");
  ASSERT_EQ(28, ds.num_layers());
  EXPECT_EQ(LayerKind::kMlp, ds.layers[1].kind);  // D
  EXPECT_EQ(LayerKind::kMoe, ds.layers[2].kind);  // M
  EXPECT_EQ("L2.attention+moe (M)", ds.layers[2].name);
  EXPECT_EQ("L27.attention+moe+head (M+H)", ds.layers[27].name);

  // Its weights are the whole layer's, every expert, whatever EP the import's training says
  // (the cost model takes off the experts a rank does not hold at the plan's EP).
  ProfileImportOptions at_ep4;
  at_ep4.training.ep_degree = 4;
  const ModelGraph ds4 = Import("deepseek-16B", at_ep4);
  EXPECT_EQ(*ds.layers[2].measured.param_bytes, *ds4.layers[2].measured.param_bytes);

  const ModelGraph oss = Import("gpt-oss-20B");
  ASSERT_EQ(24, oss.num_layers());
  EXPECT_EQ(2048, oss.training.seq_len);
  EXPECT_EQ(LayerKind::kAttention, oss.layers[0].kind);
  EXPECT_EQ("L0.embedding+attention+moe (F+E)", oss.layers[0].name);
  EXPECT_EQ("L1.attention+moe (S)", oss.layers[1].name);
}

TEST(ProfileImporterTest, AveragingReplacesPlainLayersByTheirKindMean) {
  ProfileImportOptions options;
  options.average_plain_layers = true;
  const ModelGraph raw = Import("gpt-13B");
  const ModelGraph avg = Import("gpt-13B", options);
  double sum = 0;
  for (int i = 1; i < 39; ++i) sum += *raw.layers[i].measured.forward_s;
  for (int i = 1; i < 39; ++i) EXPECT_DOUBLE_EQ(sum / 38, *avg.layers[i].measured.forward_s);
  // +E / +H layers keep their own times.
  EXPECT_EQ(*raw.layers[0].measured.forward_s, *avg.layers[0].measured.forward_s);
  EXPECT_EQ(*raw.layers[39].measured.weight_grad_s, *avg.layers[39].measured.weight_grad_s);
}

constexpr absl::string_view kGood = R"({"model": "gpt-13B", "units": "ms", "seq_len": 4096,
  "num_layers": 2, "layers": [
  {"index": 0, "kind": "T", "embedding": true, "head": false, "forward_ms": 1, "backward_ms": 2},
  {"index": 1, "kind": "T", "embedding": false, "head": true, "forward_ms": 3, "backward_ms": 4}
]})";

TEST(ProfileImporterTest, MinimalDocumentWithoutArchToken) {
  absl::StatusOr<ModelGraph> m = ImportProfile(kGood);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ("L0.embedding+attention+mlp (T+E)", m->layers[0].name);
  EXPECT_DOUBLE_EQ(2e-3, *m->layers[1].measured.weight_grad_s);  // 4 ms / 2
}

void ExpectError(const std::string& doc, absl::string_view fragment) {
  absl::StatusOr<ModelGraph> m = ImportProfile(doc);
  ASSERT_EQ(absl::StatusCode::kInvalidArgument, m.status().code()) << doc;
  EXPECT_THAT(std::string(m.status().message()), HasSubstr(std::string(fragment)));
}

std::string Replace(absl::string_view from, absl::string_view to) {
  std::string doc(kGood);
  const size_t at = doc.find(std::string(from));
  EXPECT_NE(std::string::npos, at) << from;
  doc.replace(at, from.size(), std::string(to));
  return doc;
}

TEST(ProfileImporterTest, ErrorsNameTheJsonPath) {
  ExpectError("{", "JSON parse error");
  ExpectError(Replace("\"forward_ms\": 3", "\"forward_ms\": 1e999"), "number overflow");
  ExpectError(Replace("\"forward_ms\": 3", "\"forward_ms\": 3,"), "JSON parse error");
  ExpectError(Replace("\"forward_ms\": 3", "\"forward_ms\": 3, \"forward_ms\": 5"),
              "duplicate key 'forward_ms'");
  ExpectError("[]", "must be a JSON object");
  ExpectError(Replace("gpt-13B", "gpt-99B"), "model 'gpt-99B' has no known architecture");
  ExpectError(Replace("\"ms\"", "\"s\""), "units must be \"ms\"");
  ExpectError(Replace("4096", "-1"), "seq_len must be a positive integer");
  ExpectError(Replace("\"num_layers\": 2", "\"num_layers\": 3"), "num_layers must equal");
  ExpectError(Replace("\"kind\": \"T\", \"embedding\": false",
                      "\"kind\": \"M\", \"embedding\": false"),
              "layers[1].kind 'M' is not a layer letter of gpt-13B (valid: T)");
  ExpectError(Replace("\"forward_ms\": 3", "\"forward_ms\": -3"),
              "layers[1].forward_ms must be >= 0, got -3");
  ExpectError(Replace("\"backward_ms\": 4", "\"backward_ms\": \"4\""),
              "layers[1].backward_ms must be a number, got a string");
  ExpectError(Replace(", \"forward_ms\": 1", ""), "layers[0].forward_ms is missing");
  ExpectError(Replace("\"index\": 1", "\"index\": 7"), "layers[1].index must be 1");
  ExpectError(Replace("\"embedding\": false", "\"embedding\": true"),
              "layers[1].embedding is true but only layers[0] can hold it");
}

TEST(ProfileImporterTest, MissingFileIsNotFound) {
  absl::StatusOr<ModelGraph> m = ImportProfileFile("data/measured_profiles/none.json");
  EXPECT_EQ(absl::StatusCode::kNotFound, m.status().code());
}

}  // namespace
}  // namespace octopipe
