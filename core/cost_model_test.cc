// Pins the cost model to its formulas (docs/architecture.md, "Cost model") with numbers
// computed by hand (the literal constants), and pins the B/W split, tensor-parallel division,
// measured overrides and recompute rules documented in cost_model.h / cost_model.cc. A MoE
// layer's own costs: cost_model_moe_test.cc; communication: cost_model_comm_test.cc.
#include "core/cost_model.h"

#include <cmath>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "core/cost_model_test_layers.h"
#include "gtest/gtest.h"

namespace octopipe {
namespace {

using cost_model_test::Training;
using cost_model_test::H100;
using cost_model_test::Llama8bAttention;
using cost_model_test::DeepSeekV3Mla;
using cost_model_test::Llama8bMlp;
using cost_model_test::DeepSeekV3Moe;
using cost_model_test::MixtralMoe;
using cost_model_test::kNvlink;
using cost_model_test::kIb;

// Relative comparison for large FLOP / byte counts.
void ExpectNear(double expected, double actual) {
  EXPECT_NEAR(actual, expected, std::abs(expected) * 1e-12) << "expected " << expected;
}

TEST(ForwardFlopsTest, Llama3_8bAttentionMatchesMegatronFormula) {
  // 4·b·s·h·p·(h + h·g/n + s/2), p = kv_channels·n/h = 128·32/4096 = 1:
  // 4·4096·4096·(4096 + 1024 + 2048) = 67,108,864 · 7168.
  const auto f = CostModel::ForwardFlops(Llama8bAttention(), Training());
  ExpectNear(481036337152.0, f.total());
  // Linear = QKV + output projection = 4·b·s·h·hd·(n + g) = 4·4096·4096·128·40.
  ExpectNear(343597383680.0, f.linear);
  // Nonlinear = causal core 2·b·s²·n·hd = 2·4096²·4096.
  ExpectNear(137438953472.0, f.nonlinear);
}

TEST(ForwardFlopsTest, ExplicitHeadDimIsKvChannels) {
  // Megatron's p = kv_channels·n/h; with head_dim 64 and 32 heads on h = 4096, p = 1/2.
  Layer l = Llama8bAttention();
  l.dims.head_dim = 64;
  const double b = 1, s = 4096, h = 4096, n = 32, g = 8, p = 64.0 * 32 / 4096;
  ExpectNear(4 * b * s * h * p * (h + h * g / n + s / 2),
             CostModel::ForwardFlops(l, Training()).total());
}

TEST(ForwardFlopsTest, Llama3_8bSwiGluMlp) {
  // 4·b·s·h·ffn·3/2 = 6·4096·4096·14336, all linear.
  const auto f = CostModel::ForwardFlops(Llama8bMlp(), Training());
  ExpectNear(1443109011456.0, f.linear);
  EXPECT_EQ(0, f.nonlinear);
}

TEST(ForwardFlopsTest, PlainMlpAndProjector) {
  Layer l;
  l.kind = LayerKind::kMlp;
  l.dims.hidden = 4096;
  l.dims.ffn = 21504;  // Nemotron-H 8B relu² MLP
  l.dims.gated = false;
  // 4·b·s·h·ffn = 4·4096·4096·21504.
  ExpectNear(1443109011456.0, CostModel::ForwardFlops(l, Training()).linear);

  // LLaVA projector 1024 -> 4096 -> 4096 over 576 image tokens: 2·b·s·(h·ffn + ffn·out).
  Layer proj;
  proj.kind = LayerKind::kMlp;
  proj.dims.hidden = 1024;
  proj.dims.ffn = 4096;
  proj.dims.out_hidden = 4096;
  proj.dims.gated = false;
  proj.dims.tokens = 576;
  ExpectNear(2.0 * 576 * (1024.0 * 4096 + 4096.0 * 4096),
             CostModel::ForwardFlops(proj, Training()).linear);
}

TEST(ForwardFlopsTest, MixtralMoe) {
  const Layer l = MixtralMoe();
  // 4·b·s·h·f·top_k·3/2 + router 2·b·s·h·E = 4·4096·4096·14336·2·1.5 + 2·4096·4096·8.
  const auto f = CostModel::ForwardFlops(l, Training());
  ExpectNear(2886486458368.0, f.linear);
  EXPECT_EQ(0, f.nonlinear);
}

TEST(ForwardFlopsTest, DeepSeekV3MoeWithSharedExpert) {
  // 4·b·s·h·f·(8 + 1)·3/2 + 2·b·s·h·256 with h = 7168, f = 2048.
  ExpectNear(3262027661312.0, CostModel::ForwardFlops(DeepSeekV3Moe(), Training()).total());
}

TEST(ForwardFlopsTest, NemotronH8bMamba2) {
  Layer l;
  l.kind = LayerKind::kMamba2;
  l.dims.hidden = 4096;
  l.dims.expand = 2;  // d_in = 8192
  l.dims.d_state = 128;
  l.dims.ssm_groups = 8;
  l.dims.ssm_heads = 128;
  // 2·b·s·h·(2·d_in + 2·G·N + nheads) + 2·b·s·d_in·h linear; 7·b·s·d_in·N scan.
  const double b = 1, s = 4096, h = 4096, din = 8192;
  const auto f = CostModel::ForwardFlops(l, Training());
  ExpectNear(2 * b * s * h * (2 * din + 2 * 8 * 128 + 128) + 2 * b * s * din * h, f.linear);
  ExpectNear(897648164864.0, f.linear);
  ExpectNear(7 * b * s * din * 128, f.nonlinear);
  ExpectNear(30064771072.0, f.nonlinear);
}

TEST(ForwardFlopsTest, JambaMamba1) {
  Layer l;
  l.kind = LayerKind::kMamba;
  l.dims.hidden = 4096;
  l.dims.expand = 2;  // d_in = 8192
  l.dims.d_state = 16;
  l.dims.dt_rank = 256;
  // in_proj h->2·d_in, x_proj d_in->R+2N, dt_proj R->d_in, out_proj d_in->h; scan 9·b·s·d_in·N.
  const auto f = CostModel::ForwardFlops(l, Training());
  ExpectNear(861140942848.0, f.linear);
  ExpectNear(9.0 * 4096 * 8192 * 16, f.nonlinear);

  // dt_rank 0 means ceil(h/16) = 256 here: same numbers.
  l.dims.dt_rank = 0;
  ExpectNear(861140942848.0, CostModel::ForwardFlops(l, Training()).linear);
}

TEST(ForwardFlopsTest, DeepSeekV3Mla) {
  const Layer l = DeepSeekV3Mla();
  const double b = 1, s = 4096, h = 7168, n = 128;
  const auto f = CostModel::ForwardFlops(l, Training());
  // q down + q up + kv down (latent + rope key) + kv up + output projection.
  ExpectNear(2 * b * s *
                 (h * 1536 + 1536 * n * 192 + h * (512 + 64) + 512 * n * (128 + 128) +
                  n * 128 * h),
             f.linear);
  ExpectNear(1532766453760.0, f.linear);
  // Causal core: QKᵀ with head dim 192 and AV with 128, halved: b·s²·n·(192 + 128).
  ExpectNear(687194767360.0, f.nonlinear);
}

TEST(ForwardFlopsTest, LlavaVisionBlockIsBidirectionalAttentionPlusGeluMlp) {
  Layer l;
  l.kind = LayerKind::kVisionBlock;
  l.dims.hidden = 1024;
  l.dims.heads = 16;
  l.dims.ffn = 4096;
  l.dims.tokens = 576;  // over image tokens, not the sequence length
  const double b = 1, s = 576, h = 1024;
  const auto f = CostModel::ForwardFlops(l, Training());
  // Attention with kv_heads = heads: 4·b·s·h·hd·(n + n) = 8·b·s·h²; GeLU MLP 4·b·s·h·ffn.
  ExpectNear(8 * b * s * h * h + 4 * b * s * h * 4096, f.linear);
  ExpectNear(14495514624.0, f.linear);
  // No causal mask: the full 4·b·s²·n·hd.
  ExpectNear(4 * b * s * s * h, f.nonlinear);
}

TEST(ForwardFlopsTest, HeadIsLogitsPlusNormAndCrossEntropy) {
  Layer l;
  l.kind = LayerKind::kHead;
  l.dims.hidden = 4096;
  l.dims.vocab = 128256;
  const auto f = CostModel::ForwardFlops(l, Training());
  ExpectNear(2.0 * 4096 * 4096 * 128256, f.linear);  // logits 2·b·s·h·V
  ExpectNear(4303557230592.0, f.linear);
  // Norm 4 FLOPs per element, cross-entropy 4 per logit.
  ExpectNear(4.0 * 4096 * 4096 + 4.0 * 4096 * 128256, f.nonlinear);
}

TEST(CostTest, EmbeddingHasNoFlopsAndIsMemoryBound) {
  Layer l;
  l.kind = LayerKind::kEmbedding;
  l.dims.hidden = 4096;
  l.dims.vocab = 128256;
  EXPECT_EQ(0, CostModel::ForwardFlops(l, Training()).total());
  CostModel model;
  const LayerCost c = model.Cost(l, Training(), H100());
  const double eff = model.options().efficiency[static_cast<int>(LayerKind::kEmbedding)];
  // F moves 2·b·s·h·2 bytes (gather + write); W scatter-adds 3·b·s·h·2; no input gradient.
  EXPECT_DOUBLE_EQ(2.0 * 4096 * 4096 * 2 / (3.35e12 * eff), c.forward_s);
  EXPECT_EQ(0, c.backward_input_s);
  EXPECT_DOUBLE_EQ(3.0 * 4096 * 4096 * 2 / (3.35e12 * eff), c.weight_grad_s);
  EXPECT_DOUBLE_EQ(128256.0 * 4096, c.param_count);
  EXPECT_DOUBLE_EQ(4096.0 * 8, c.input_bytes);  // int64 token ids
  EXPECT_DOUBLE_EQ(4096.0 * 4096 * 2, c.output_bytes);
}

TEST(CostTest, BackwardSplitLinearOnceNonlinearTwice) {
  CostModel model;
  const LayerCost c = model.Cost(Llama8bAttention(), Training(), H100());
  const double rate = 989e12 * model.options().efficiency[static_cast<int>(LayerKind::kAttention)];
  const double lin = 343597383680.0, nl = 137438953472.0;
  EXPECT_DOUBLE_EQ((lin + nl) / rate, c.forward_s);
  EXPECT_DOUBLE_EQ((lin + 2 * nl) / rate, c.backward_input_s);
  EXPECT_DOUBLE_EQ(lin / rate, c.weight_grad_s);
  EXPECT_DOUBLE_EQ(c.forward_s, c.recompute_s);
  EXPECT_DOUBLE_EQ(lin + nl, c.forward_flops);

  // A purely linear layer: B = W = F.
  const LayerCost m = model.Cost(Llama8bMlp(), Training(), H100());
  EXPECT_DOUBLE_EQ(m.forward_s, m.backward_input_s);
  EXPECT_DOUBLE_EQ(m.forward_s, m.weight_grad_s);
}

TEST(CostTest, EfficiencyOptionScalesTime) {
  CostModelOptions opts;
  opts.efficiency[static_cast<int>(LayerKind::kMlp)] = 1.0;
  const LayerCost c = CostModel(opts).Cost(Llama8bMlp(), Training(), H100());
  EXPECT_DOUBLE_EQ(1443109011456.0 / 989e12, c.forward_s);
}

TEST(CostTest, ActivationBytesPerKind) {
  CostModel model;
  // Attention (bf16, b = 1, s = h = 4096, Q = 4096, KV = 1024): x + x̂ + Q,K,V + O in 2 bytes
  // each, plus 4-byte log-sum-exp per head and token.
  const double sbh2 = 4096.0 * 4096 * 2;
  LayerCost a = model.Cost(Llama8bAttention(), Training(), H100());
  EXPECT_DOUBLE_EQ(2 * sbh2 + 4096.0 * (4096 + 2 * 1024) * 2 + sbh2 + 4096.0 * 32 * 4,
                   a.activation_bytes);
  EXPECT_DOUBLE_EQ(151519232.0, a.activation_bytes);
  EXPECT_DOUBLE_EQ(sbh2 + sbh2, a.activation_bytes_w);  // x̂ (QKV input) + O (out-proj input)
  EXPECT_DOUBLE_EQ(sbh2, a.input_bytes);
  EXPECT_DOUBLE_EQ(sbh2, a.output_bytes);

  // SwiGLU MLP: x + x̂ + gate, up + activation output (ffn = 14336).
  LayerCost m = model.Cost(Llama8bMlp(), Training(), H100());
  EXPECT_DOUBLE_EQ(2 * sbh2 + 3 * 4096.0 * 14336 * 2, m.activation_bytes);
  EXPECT_DOUBLE_EQ(sbh2 + 4096.0 * 14336 * 2, m.activation_bytes_w);

  // A GeLU-MLP, multi-head transformer layer (attention + plain 4h MLP) stores 32·s·b·h bytes
  // plus the log-sum-exp: Korthikanti's 34·s·b·h less its two dropout masks.
  Layer attn = Llama8bAttention();
  attn.dims.kv_heads = 32;
  Layer mlp = Llama8bMlp();
  mlp.dims.gated = false;
  mlp.dims.ffn = 4 * 4096;
  const double sbh = 4096.0 * 4096;
  EXPECT_DOUBLE_EQ(32 * sbh + 4096.0 * 32 * 4,
                   model.Cost(attn, Training(), H100()).activation_bytes +
                       model.Cost(mlp, Training(), H100()).activation_bytes);

  // Head: x, x̂ and the fp32 softmax of the logits; sends nothing on.
  Layer head;
  head.kind = LayerKind::kHead;
  head.dims.hidden = 4096;
  head.dims.vocab = 128256;
  LayerCost hc = model.Cost(head, Training(), H100());
  EXPECT_DOUBLE_EQ(2 * sbh2 + 4096.0 * 128256 * 4, hc.activation_bytes);
  EXPECT_DOUBLE_EQ(sbh2, hc.activation_bytes_w);
  EXPECT_EQ(0, hc.output_bytes);
}

TEST(CostTest, ActivationWIsPartOfActivationForEveryKind) {
  CostModel model;
  std::vector<Layer> layers = {Llama8bAttention(), Llama8bMlp()};
  Layer moe;
  moe.kind = LayerKind::kMoe;
  moe.dims = {};
  moe.dims.hidden = 4096;
  moe.dims.experts = 8;
  moe.dims.top_k = 2;
  moe.dims.moe_ffn = 14336;
  moe.dims.shared_experts = 1;
  layers.push_back(moe);
  Layer m2;
  m2.kind = LayerKind::kMamba2;
  m2.dims.hidden = 4096;
  m2.dims.expand = 2;
  m2.dims.d_state = 128;
  m2.dims.ssm_groups = 8;
  m2.dims.ssm_heads = 128;
  layers.push_back(m2);
  Layer m1;
  m1.kind = LayerKind::kMamba;
  m1.dims.hidden = 4096;
  m1.dims.expand = 2;
  m1.dims.d_state = 16;
  layers.push_back(m1);
  for (RecomputePolicy r : {RecomputePolicy::kNone, RecomputePolicy::kSelective}) {
    TrainingOptions t = Training();
    t.recompute = r;
    for (const Layer& l : layers) {
      const LayerCost c = model.Cost(l, t, H100());
      EXPECT_GT(c.activation_bytes_w, 0) << LayerKindName(l.kind);
      EXPECT_LT(c.activation_bytes_w, c.activation_bytes) << LayerKindName(l.kind);
    }
  }
}

TEST(CostTest, Fp32DoublesActivationsAndUsesSixteenBytesPerParam) {
  CostModel model;
  TrainingOptions t = Training();
  const LayerCost bf16 = model.Cost(Llama8bMlp(), t, H100());
  t.precision = Precision::kFp32;
  const LayerCost fp32 = model.Cost(Llama8bMlp(), t, H100());
  EXPECT_DOUBLE_EQ(2 * bf16.activation_bytes, fp32.activation_bytes);
  EXPECT_DOUBLE_EQ(2 * bf16.param_bytes, fp32.param_bytes);
  EXPECT_DOUBLE_EQ(fp32.param_count * (4 + 4 + 8), fp32.static_bytes);
  EXPECT_DOUBLE_EQ(bf16.param_count * (2 + 2 + 12), bf16.static_bytes);
}

// FP8: the weight GEMMs (linear FLOPs) at the FP8 peak times the FP8 GEMM efficiency, the rest
// at the BF16 one; the GEMM inputs held until W in FP8 (half their bytes); weights and
// optimizer state as in BF16.
TEST(CostTest, Fp8RunsWeightGemmsAtTheFp8PeakAndHalvesTheirSavedInputs) {
  CostModelOptions options;
  options.fp8_gemm_efficiency = 0.75;
  CostModel model(options);
  TrainingOptions t = Training();
  HardwareSpec h100 = H100();
  h100.peak_flops_fp8 = 1979e12;
  const LayerCost bf16 = model.Cost(Llama8bAttention(), t, h100);
  t.precision = Precision::kFp8;
  const LayerCost fp8 = model.Cost(Llama8bAttention(), t, h100);
  const double eff = model.options().efficiency[static_cast<int>(LayerKind::kAttention)];
  const double lin = 343597383680.0, nl = 137438953472.0;
  // Cast-transposes at the HBM rate, 4 bytes per element: in F x̂ (4096) and O (4096) per
  // token, in B the gradients of QKV (4096 + 2 x 1024) and of the output (4096).
  const double mem = 3.35e12 * model.options().memory_efficiency;
  const double cast_f = 4 * 4096.0 * (4096 + 4096), cast_b = 4 * 4096.0 * (6144 + 4096);
  const double fp8_rate = 1979e12 * eff * 0.75;
  EXPECT_DOUBLE_EQ(lin / fp8_rate + nl / (989e12 * eff) + cast_f / mem, fp8.forward_s);
  EXPECT_DOUBLE_EQ(lin / fp8_rate + 2 * nl / (989e12 * eff) + cast_b / mem,
                   fp8.backward_input_s);
  EXPECT_DOUBLE_EQ(lin / fp8_rate, fp8.weight_grad_s);
  EXPECT_LT(fp8.forward_s, bf16.forward_s);
  EXPECT_DOUBLE_EQ(fp8.forward_flops, bf16.forward_flops);  // the same math
  EXPECT_DOUBLE_EQ(bf16.activation_bytes_w / 2, fp8.activation_bytes_w);
  EXPECT_DOUBLE_EQ(bf16.activation_bytes - bf16.activation_bytes_w / 2, fp8.activation_bytes);
  EXPECT_DOUBLE_EQ(bf16.static_bytes, fp8.static_bytes);
  EXPECT_DOUBLE_EQ(bf16.output_bytes, fp8.output_bytes);  // messages stay BF16
  EXPECT_EQ(PrecisionName(Precision::kFp8), "fp8");
  EXPECT_EQ(*ParsePrecision("fp8"), Precision::kFp8);

  // The output head stays in BF16 (DeepSeek-V3's recipe; Megatron's output layer is not a
  // Transformer Engine layer): no FP8 rate, no casts, its saved input in BF16.
  Layer head;
  head.kind = LayerKind::kHead;
  head.dims.hidden = 4096;
  head.dims.vocab = 128256;
  t.precision = Precision::kBf16;
  const LayerCost head16 = model.Cost(head, t, h100);
  t.precision = Precision::kFp8;
  const LayerCost head8 = model.Cost(head, t, h100);
  EXPECT_DOUBLE_EQ(head16.forward_s, head8.forward_s);
  EXPECT_DOUBLE_EQ(head16.backward_input_s, head8.backward_input_s);
  EXPECT_DOUBLE_EQ(head16.weight_grad_s, head8.weight_grad_s);
  EXPECT_DOUBLE_EQ(head16.activation_bytes, head8.activation_bytes);
}

TEST(CostTest, ParamCountsAndZeroSharding) {
  // Attention: h·(n·hd) + 2·h·(kv·hd) + (n·hd)·h + pre-norm h.
  EXPECT_DOUBLE_EQ(4096.0 * 4096 + 2 * 4096.0 * 1024 + 4096.0 * 4096 + 4096,
                   CostModel::ParamCount(Llama8bAttention()));
  // SwiGLU MLP: 3·h·ffn + h.
  EXPECT_DOUBLE_EQ(3 * 4096.0 * 14336 + 4096, CostModel::ParamCount(Llama8bMlp()));

  TrainingOptions t = Training();
  t.zero_degree = 4;
  const LayerCost c = CostModel().Cost(Llama8bMlp(), t, H100());
  EXPECT_DOUBLE_EQ(c.param_count * (2 + 2 + 12.0 / 4), c.static_bytes);
  EXPECT_DOUBLE_EQ(c.param_count * 2, c.param_bytes);
}

TEST(CostTest, TensorParallelDividesTimeMemoryAndParams) {
  CostModel model;
  TrainingOptions t = Training();
  const LayerCost one = model.Cost(Llama8bAttention(), t, H100());
  t.tp_degree = 4;
  const LayerCost four = model.Cost(Llama8bAttention(), t, H100());
  EXPECT_DOUBLE_EQ(one.forward_s / 4, four.forward_s);
  EXPECT_DOUBLE_EQ(one.backward_input_s / 4, four.backward_input_s);
  EXPECT_DOUBLE_EQ(one.weight_grad_s / 4, four.weight_grad_s);
  EXPECT_DOUBLE_EQ(one.activation_bytes / 4, four.activation_bytes);
  EXPECT_DOUBLE_EQ(one.activation_bytes_w / 4, four.activation_bytes_w);
  EXPECT_DOUBLE_EQ(one.input_bytes / 4, four.input_bytes);
  EXPECT_DOUBLE_EQ(one.output_bytes / 4, four.output_bytes);
  EXPECT_DOUBLE_EQ(one.param_count / 4, four.param_count);
  EXPECT_DOUBLE_EQ(one.param_bytes / 4, four.param_bytes);
  EXPECT_DOUBLE_EQ(one.static_bytes / 4, four.static_bytes);
  EXPECT_DOUBLE_EQ(one.forward_flops / 4, four.forward_flops);
}

TEST(CostTest, SelectiveRecomputeDropsCoreOutputsAndRerunsCoreInB) {
  CostModel model;
  TrainingOptions t = Training();
  const LayerCost none = model.Cost(Llama8bAttention(), t, H100());
  t.recompute = RecomputePolicy::kSelective;
  const LayerCost sel = model.Cost(Llama8bAttention(), t, H100());
  const double rate = 989e12 * model.options().efficiency[static_cast<int>(LayerKind::kAttention)];
  // Dropped: O (b·s·n·hd·2) and the log-sum-exp (b·s·n·4).
  EXPECT_DOUBLE_EQ(none.activation_bytes - (4096.0 * 4096 * 2 + 4096.0 * 32 * 4),
                   sel.activation_bytes);
  EXPECT_DOUBLE_EQ(none.activation_bytes_w, sel.activation_bytes_w);
  // B pays the core's forward FLOPs once more; F and W are unchanged.
  EXPECT_DOUBLE_EQ(none.backward_input_s + 137438953472.0 / rate, sel.backward_input_s);
  EXPECT_DOUBLE_EQ(none.forward_s, sel.forward_s);
  EXPECT_DOUBLE_EQ(none.weight_grad_s, sel.weight_grad_s);

  // Layers without an attention core are unaffected.
  t.recompute = RecomputePolicy::kNone;
  const LayerCost mlp_none = model.Cost(Llama8bMlp(), t, H100());
  t.recompute = RecomputePolicy::kSelective;
  const LayerCost mlp_sel = model.Cost(Llama8bMlp(), t, H100());
  EXPECT_DOUBLE_EQ(mlp_none.activation_bytes, mlp_sel.activation_bytes);
  EXPECT_DOUBLE_EQ(mlp_none.backward_input_s, mlp_sel.backward_input_s);
}

// Megatron-LM before FlashAttention: the full s x s square computed, the b·n·s² scores through
// HBM ((6e+1) bytes each in F, (10e+1) in B at e = 2: 13 and 21), P, the dropout mask and P'
// stored (5 bytes each: Korthikanti et al.'s 5·a·s²·b) instead of the log-sum-exp.
TEST(CostTest, MaterializedAttentionComputesTheFullSquareAndMovesItsScoresThroughHbm) {
  CostModel model;
  TrainingOptions t = Training();
  const LayerCost flash = model.Cost(Llama8bAttention(), t, H100());
  t.attention_kernel = AttentionKernel::kMaterialized;
  const LayerCost mat = model.Cost(Llama8bAttention(), t, H100());
  const double rate = 989e12 * model.options().efficiency[static_cast<int>(LayerKind::kAttention)];
  const double mem = 3.35e12 * model.options().memory_efficiency;
  const double lin = 343597383680.0, nl = 137438953472.0;  // nl: the causal half square
  const double z = 32.0 * 4096 * 4096;                     // scores: b·n·s²
  EXPECT_DOUBLE_EQ((lin + 2 * nl) / rate + 13 * z / mem, mat.forward_s);
  EXPECT_DOUBLE_EQ((lin + 4 * nl) / rate + 21 * z / mem, mat.backward_input_s);
  EXPECT_DOUBLE_EQ(flash.weight_grad_s, mat.weight_grad_s);
  EXPECT_DOUBLE_EQ(mat.forward_s, mat.recompute_s);
  EXPECT_DOUBLE_EQ(lin + 2 * nl, mat.forward_flops);
  EXPECT_DOUBLE_EQ(flash.activation_bytes - 4096.0 * 32 * 4 + 5 * z, mat.activation_bytes);
  EXPECT_DOUBLE_EQ(flash.activation_bytes_w, mat.activation_bytes_w);

  // Selective recompute drops exactly the stored scores and re-runs the core in B: its FLOPs
  // and its forward traffic.
  t.recompute = RecomputePolicy::kSelective;
  const LayerCost sel = model.Cost(Llama8bAttention(), t, H100());
  EXPECT_DOUBLE_EQ(mat.activation_bytes - 5 * z, sel.activation_bytes);
  EXPECT_NEAR(mat.backward_input_s + 2 * nl / rate + 13 * z / mem, sel.backward_input_s,
              1e-12 * sel.backward_input_s);

  // Tensor parallelism divides the heads, so the traffic and the stored scores too.
  t.recompute = RecomputePolicy::kNone;
  t.tp_degree = 4;
  const LayerCost tp4 = model.Cost(Llama8bAttention(), t, H100());
  EXPECT_NEAR(mat.forward_s / 4, tp4.forward_s, 1e-12 * tp4.forward_s);
  EXPECT_NEAR(mat.activation_bytes / 4, tp4.activation_bytes, 1e-12 * tp4.activation_bytes);

  // A bidirectional vision block computes the full square either way: only the traffic is new.
  Layer vision;
  vision.kind = LayerKind::kVisionBlock;
  vision.dims.hidden = 1024;
  vision.dims.heads = 16;
  vision.dims.ffn = 4096;
  t.tp_degree = 1;
  t.attention_kernel = AttentionKernel::kFlash;
  const LayerCost v_flash = model.Cost(vision, t, H100());
  t.attention_kernel = AttentionKernel::kMaterialized;
  const LayerCost v_mat = model.Cost(vision, t, H100());
  EXPECT_DOUBLE_EQ(v_flash.forward_flops, v_mat.forward_flops);
  EXPECT_NEAR(v_flash.forward_s + 13 * 16.0 * 4096 * 4096 / mem, v_mat.forward_s,
              1e-12 * v_mat.forward_s);

  // Layers without an attention core are unaffected.
  t.attention_kernel = AttentionKernel::kFlash;
  const LayerCost mlp_flash = model.Cost(Llama8bMlp(), t, H100());
  t.attention_kernel = AttentionKernel::kMaterialized;
  const LayerCost mlp_mat = model.Cost(Llama8bMlp(), t, H100());
  EXPECT_DOUBLE_EQ(mlp_flash.forward_s, mlp_mat.forward_s);
  EXPECT_DOUBLE_EQ(mlp_flash.activation_bytes, mlp_mat.activation_bytes);
}

TEST(CostTest, FullRecomputeInputsAreReported) {
  // Full recompute is chosen per stage by the plan; the cost model reports what it needs:
  // R = F and the layer input that is kept.
  TrainingOptions t = Training();
  t.recompute = RecomputePolicy::kFull;
  const LayerCost c = CostModel().Cost(Llama8bMlp(), t, H100());
  EXPECT_DOUBLE_EQ(c.forward_s, c.recompute_s);
  EXPECT_DOUBLE_EQ(4096.0 * 4096 * 2, c.input_bytes);
}

TEST(CostTest, MeasuredFieldsOverride) {
  CostModel model;
  Layer l = Llama8bAttention();
  const LayerCost formula = model.Cost(l, Training(), H100());
  l.measured.forward_s = 0.010;
  l.measured.backward_input_s = 0.011;
  l.measured.weight_grad_s = 0.005;
  l.measured.activation_bytes = 1e9;
  l.measured.param_bytes = 4e8;
  l.measured.output_bytes = 3e7;
  const LayerCost c = model.Cost(l, Training(), H100());
  EXPECT_EQ(0.010, c.forward_s);
  EXPECT_EQ(0.010, c.recompute_s);
  EXPECT_EQ(0.011, c.backward_input_s);
  EXPECT_EQ(0.005, c.weight_grad_s);
  EXPECT_EQ(1e9, c.activation_bytes);
  // W keeps the formula's share of the activations.
  EXPECT_DOUBLE_EQ(1e9 * formula.activation_bytes_w / formula.activation_bytes,
                   c.activation_bytes_w);
  EXPECT_EQ(4e8, c.param_bytes);
  EXPECT_DOUBLE_EQ(2e8, c.param_count);                    // 2 bytes per bf16 weight
  EXPECT_DOUBLE_EQ(2e8 * (2 + 2 + 12), c.static_bytes);  // static scales with it
  EXPECT_EQ(3e7, c.output_bytes);
  // Measured B is taken as measured under the model's own policy: no selective extra.
  TrainingOptions t = Training();
  t.recompute = RecomputePolicy::kSelective;
  EXPECT_EQ(0.011, model.Cost(l, t, H100()).backward_input_s);
}

// Measured values are per TP rank at measured.tp_degree (whole layers: 1). Planned at TP 2 a
// rank does half the measured work and holds half of the bytes; measured at 2, planned at 2,
// they stand; measured at 2, planned at 4, they halve.
TEST(CostTest, MeasuredValuesScaleFromTheirTensorParallelDegree) {
  Layer l;
  l.kind = LayerKind::kMlp;
  l.measured.forward_s = 1;
  l.measured.backward_input_s = 2;
  l.measured.weight_grad_s = 3;
  l.measured.recompute_s = 1.5;
  l.measured.activation_bytes = 100;
  l.measured.activation_bytes_w = 40;
  l.measured.param_bytes = 400;
  l.measured.output_bytes = 8;
  l.measured.input_bytes = 6;
  auto cost = [&](int measured_tp, int planned_tp) {
    l.measured.tp_degree = measured_tp;
    TrainingOptions t = Training();
    t.tp_degree = planned_tp;
    return CostModel().Cost(l, t, H100());
  };
  const LayerCost whole = cost(1, 1);
  for (auto [measured_tp, planned_tp, factor] :
       {std::tuple{1, 2, 0.5}, std::tuple{2, 2, 1.0}, std::tuple{2, 4, 0.5}, std::tuple{1, 8, 0.125}}) {
    const LayerCost c = cost(measured_tp, planned_tp);
    const std::string at = absl::StrCat("measured at TP", measured_tp, ", planned at TP", planned_tp);
    EXPECT_DOUBLE_EQ(c.forward_s, whole.forward_s * factor) << at;
    EXPECT_DOUBLE_EQ(c.backward_input_s, whole.backward_input_s * factor) << at;
    EXPECT_DOUBLE_EQ(c.weight_grad_s, whole.weight_grad_s * factor) << at;
    EXPECT_DOUBLE_EQ(c.recompute_s, whole.recompute_s * factor) << at;
    EXPECT_DOUBLE_EQ(c.activation_bytes, whole.activation_bytes * factor) << at;
    EXPECT_DOUBLE_EQ(c.activation_bytes_w, whole.activation_bytes_w * factor) << at;
    EXPECT_DOUBLE_EQ(c.param_bytes, whole.param_bytes * factor) << at;
    EXPECT_DOUBLE_EQ(c.output_bytes, whole.output_bytes * factor) << at;
    EXPECT_DOUBLE_EQ(c.input_bytes, whole.input_bytes * factor) << at;
  }
  EXPECT_EQ(whole.forward_s, 1);
  EXPECT_EQ(whole.param_bytes, 400);
}

TEST(CostTest, PartialMeasurementKeepsOtherFormulaFields) {
  CostModel model;
  Layer l = Llama8bMlp();
  const LayerCost formula = model.Cost(l, Training(), H100());
  l.measured.forward_s = 0.5;
  const LayerCost c = model.Cost(l, Training(), H100());
  EXPECT_EQ(0.5, c.forward_s);
  EXPECT_EQ(0.5, c.recompute_s);
  EXPECT_DOUBLE_EQ(formula.backward_input_s, c.backward_input_s);
  EXPECT_DOUBLE_EQ(formula.weight_grad_s, c.weight_grad_s);
  EXPECT_DOUBLE_EQ(formula.activation_bytes, c.activation_bytes);
}

TEST(CostTest, MeasuredActivationWithoutDimsSplitsInHalf) {
  Layer l;
  l.kind = LayerKind::kMlp;  // no dims: a synthetic layer
  l.measured.forward_s = 1;
  l.measured.backward_input_s = 2;
  l.measured.weight_grad_s = 3;
  l.measured.activation_bytes = 100;
  l.measured.param_bytes = 0;
  l.measured.output_bytes = 7;
  const LayerCost c = CostModel().Cost(l, Training(), H100());
  EXPECT_EQ(1, c.forward_s);
  EXPECT_EQ(2, c.backward_input_s);
  EXPECT_EQ(3, c.weight_grad_s);
  EXPECT_EQ(100, c.activation_bytes);
  EXPECT_EQ(50, c.activation_bytes_w);
  EXPECT_EQ(0, c.static_bytes);
  EXPECT_EQ(7, c.output_bytes);
  EXPECT_EQ(0, c.input_bytes);
}

TEST(CostTest, ZeroRateGivesInfiniteTimeNotNan) {
  HardwareSpec broken = H100();
  broken.peak_flops = 0;
  const LayerCost c = CostModel().Cost(Llama8bMlp(), Training(), broken);
  EXPECT_TRUE(std::isinf(c.forward_s));
}

// Megatron-Core's recompute modules, DeepSeek-V3's set (layernorm, mla_up_proj, moe_act):
// each drops its outputs from what F keeps and pays for recomputing them in B; F and W as
// without recompute. b = 1, s = 4096, BF16 (e = 2).
TEST(CostTest, RecomputeModulesDropTheirOutputsAndPayForThemInB) {
  CostModel model;
  const Layer mla = DeepSeekV3Mla();
  TrainingOptions t = Training();
  const LayerCost none = model.Cost(mla, t, H100());
  t.recompute = RecomputePolicy::kSelective;
  t.recompute_modules = RecomputeModules{};
  t.recompute_modules.core_attn = false;
  t.recompute_modules.layernorm = true;
  t.recompute_modules.mla_up_proj = true;
  const LayerCost re = model.Cost(mla, t, H100());
  const double mem = 3.35e12 * model.options().memory_efficiency;
  const double rate =
      989e12 * model.options().efficiency[static_cast<int>(LayerKind::kMlaAttention)];
  // Norm outputs: x̂ (7168), the normed q latent (1536) and kv latent (512), per token.
  const double norms = 4096.0 * (7168 + 1536 + 512) * 2;
  // Q and K (128 heads x 192) and V (128 x 128) as the up-projections write them.
  const double qkv = 4096.0 * (2 * 128 * 192 + 128 * 128) * 2;
  // The q up (1536 -> 24576) and kv up (512 -> 128 x 256) GEMMs once more.
  const double up_flops = 2 * 4096.0 * (1536.0 * 24576 + 512.0 * 128 * 256);
  EXPECT_DOUBLE_EQ(none.activation_bytes - norms - qkv, re.activation_bytes);
  EXPECT_DOUBLE_EQ(none.activation_bytes_w, re.activation_bytes_w);  // held again until W
  EXPECT_NEAR(none.backward_input_s + up_flops / rate + 2 * norms / mem, re.backward_input_s,
              1e-15);
  EXPECT_DOUBLE_EQ(none.forward_s, re.forward_s);
  EXPECT_DOUBLE_EQ(none.weight_grad_s, re.weight_grad_s);

  // moe_act: the SwiGLU outputs of the 8 routed and 1 shared experts (2048 wide); the pre-norm
  // output with layernorm.
  t.recompute = RecomputePolicy::kNone;
  const LayerCost moe_none = model.Cost(DeepSeekV3Moe(), t, H100());
  t.recompute = RecomputePolicy::kSelective;
  t.recompute_modules.moe_act = true;
  const LayerCost moe_re = model.Cost(DeepSeekV3Moe(), t, H100());
  const double swiglu = 4096.0 * 2048 * 9 * 2;
  const double x_hat = 4096.0 * 7168 * 2;
  EXPECT_DOUBLE_EQ(moe_none.activation_bytes - swiglu - x_hat, moe_re.activation_bytes);
  EXPECT_NEAR(moe_none.backward_input_s + (3 * swiglu + 2 * x_hat) / mem,
              moe_re.backward_input_s, 1e-15);
  // mla_up_proj does nothing to a MoE layer, moe_act nothing to MLA.
  EXPECT_DOUBLE_EQ(re.activation_bytes, model.Cost(mla, t, H100()).activation_bytes);

  // FP8 keeps weight-GEMM inputs in FP8: the dropped SwiGLU output was an FP8 copy, so moe_act
  // alone saves half its BF16 bytes.
  t.precision = Precision::kFp8;
  t.recompute = RecomputePolicy::kNone;
  const LayerCost fp8_none = model.Cost(DeepSeekV3Moe(), t, H100());
  t.recompute = RecomputePolicy::kSelective;
  t.recompute_modules = RecomputeModules{};
  t.recompute_modules.core_attn = false;
  t.recompute_modules.moe_act = true;
  EXPECT_DOUBLE_EQ(fp8_none.activation_bytes - swiglu / 2,
                   model.Cost(DeepSeekV3Moe(), t, H100()).activation_bytes);
}

// Times measured at the planned TP degree (`octopipe profile --tp`) are the layer's as they
// stand — not the whole layer's scaled — and already hold the TP all-reduces, so Comm adds
// none for that layer at that degree (and still does at a degree not measured). Bytes scale
// from measured.tp_degree as before.
TEST(CostTest, TimesMeasuredSplitAsPlannedStandAndCarryTheirCollectives) {
  Layer l = Llama8bMlp();
  l.measured.forward_s = 1;
  l.measured.backward_input_s = 2;
  l.measured.weight_grad_s = 3;
  l.measured.recompute_s = 1.5;
  l.measured.activation_bytes = 100;
  l.measured.sharded.push_back(MeasuredSharded{2, 1, 0.7, 1.3, 1.9, 0.8});
  TrainingOptions t = Training();
  t.tp_degree = 2;
  const LayerCost c = CostModel().Cost(l, t, H100());
  EXPECT_EQ(c.forward_s, 0.7);
  EXPECT_EQ(c.backward_input_s, 1.3);
  EXPECT_EQ(c.weight_grad_s, 1.9);
  EXPECT_EQ(c.recompute_s, 0.8);
  EXPECT_DOUBLE_EQ(c.activation_bytes, 50);
  const CommLinks links{kNvlink, kIb, 8};
  EXPECT_EQ(CostModel().Comm(l, t, links).forward_s, 0);
  EXPECT_EQ(CostModel().Comm(l, t, links).backward_input_s, 0);
  t.tp_degree = 4;  // not measured at 4: the TP1 times scaled, the all-reduces added
  EXPECT_DOUBLE_EQ(CostModel().Cost(l, t, H100()).forward_s, 0.25);
  EXPECT_GT(CostModel().Comm(l, t, links).forward_s, 0);
  EXPECT_GT(CostModel().Comm(l, t, links).backward_input_s, 0);
}

// Bytes measured split as planned (the profile's split launches: what each rank's shard keeps
// after F and after B, and its weights) stand as well: the executor's TP ranks keep more than
// 1 / tp of the whole layer's activations (the whole input, their partial outputs). Planned at
// a degree not measured, the whole layer's bytes scale by TP as before.
TEST(CostTest, BytesMeasuredSplitAsPlannedStand) {
  Layer l = Llama8bMlp();
  l.measured.forward_s = 1;
  l.measured.backward_input_s = 2;
  l.measured.weight_grad_s = 3;
  l.measured.activation_bytes = 100;
  l.measured.activation_bytes_w = 60;
  l.measured.param_bytes = 4000;
  MeasuredSharded at2{2, 1, 0.7, 1.3, 1.9, 0.8};
  at2.activation_bytes = 80;
  at2.activation_bytes_w = 70;
  at2.param_bytes = 2100;
  l.measured.sharded.push_back(at2);
  TrainingOptions t = Training();
  t.precision = Precision::kFp32;
  t.tp_degree = 2;
  const LayerCost c = CostModel().Cost(l, t, H100());
  EXPECT_EQ(c.activation_bytes, 80);
  EXPECT_EQ(c.activation_bytes_w, 70);
  EXPECT_DOUBLE_EQ(c.param_bytes, 2100);
  // fp32 weights, gradients and Adam's two moments: 4 x the weight bytes.
  EXPECT_DOUBLE_EQ(c.static_bytes, 4 * 2100);
  t.tp_degree = 4;
  const LayerCost c4 = CostModel().Cost(l, t, H100());
  EXPECT_DOUBLE_EQ(c4.activation_bytes, 25);
  EXPECT_DOUBLE_EQ(c4.activation_bytes_w, 15);
  EXPECT_DOUBLE_EQ(c4.param_bytes, 1000);
  // A split whose F keeps nothing (as the embedding's) still has its B bytes taken as measured.
  l.measured.sharded[0].activation_bytes = 0;
  t.tp_degree = 2;
  const LayerCost none_after_f = CostModel().Cost(l, t, H100());
  EXPECT_EQ(none_after_f.activation_bytes, 0);
  EXPECT_EQ(none_after_f.activation_bytes_w, 70);
  // An entry with times only (a profile from before the bytes were measured): the whole
  // layer's bytes / TP, as before.
  l.measured.sharded[0] = MeasuredSharded{2, 1, 0.7, 1.3, 1.9, 0.8};
  const LayerCost old_entry = CostModel().Cost(l, t, H100());
  EXPECT_EQ(old_entry.forward_s, 0.7);
  EXPECT_DOUBLE_EQ(old_entry.activation_bytes, 50);
  EXPECT_DOUBLE_EQ(old_entry.activation_bytes_w, 30);
  EXPECT_DOUBLE_EQ(old_entry.param_bytes, 2000);
}

}  // namespace
}  // namespace octopipe
