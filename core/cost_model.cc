// Analytic per-layer costs. Every formula lives in exactly one place: `Analyze` below, one
// function per layer kind, returning FLOPs, activation bytes and parameters of the whole layer
// (before tensor parallelism). `CostModel::Cost` turns that into seconds and per-rank bytes and
// applies the measured overrides.
//
// Notation: b = micro-batch size, s = tokens per sample the layer sees (dims.tokens, else the
// sequence length), h = hidden, e = bytes per activation element (2 for bf16/fp16, 4 for fp32).
//
// FLOPs follow Megatron-LM's `num_floating_point_operations` (docs/architecture.md, "Cost
// model"). Each kind's forward FLOPs are split into
//   linear    - FLOPs of GEMMs with weights: cost the same again in B (input gradient) and in W
//               (weight gradient);
//   nonlinear - FLOPs without weights (attention core, SSM scans, softmax): cost twice in B,
//               nothing in W.
//
// Activation bytes are derived per kind for FlashAttention-style training with no dropout: the
// s x s score matrix is never stored, only what each op's backward reads. The reference is
// Korthikanti et al. (arXiv 2205.05198), 34·s·b·h bytes for a GeLU-MLP transformer layer with
// 16-bit activations: 11·s·b·h (attention, incl. one dropout mask) + 19·s·b·h (MLP, incl. one
// dropout mask) + 4·s·b·h (two LayerNorm inputs). Without dropout masks the same accounting
// gives 32·s·b·h, which is what AttentionPart + MlpPart below sum to for that layer (12 + 20,
// in units of s·b·h bytes at e = 2: the attention layer stores its input x, the normed input
// x̂, Q, K, V and the core output O; the MLP stores x, x̂, the GeLU input and the GeLU output).
// Every mixer / FFN layer here has its own pre-norm, so it stores its input x (norm backward)
// and the normed x̂ (input of its first weight GEMMs).
//
// `act_w` is the part of the activations read by weight-gradient GEMMs (the inputs of weight
// GEMMs): B frees the rest, W frees these. `act_core` is what selective recompute drops: the
// attention core's outputs (O and the fp32 softmax log-sum-exp); B re-runs the core first, so it
// costs the core's forward FLOPs once more, and O is then held until W (it stays in act_w).
//
// With tensor parallelism t (and sequence parallelism) every FLOP, stored byte and parameter
// is divided by t, the layer's input and output bytes too (each rank holds, and sends to its
// peer in the next stage, its own sequence shard); small replicated tensors (norm weights,
// token ids) are not treated apart.
//
// Materialized attention (`training.attention_kernel == kMaterialized`, Megatron-LM before
// FlashAttention): the core computes the full s x s square (the causal mask is applied after
// QKᵀ), and its z = b·n·s² scores go through HBM, costed as bytes moved at the HBM bandwidth
// (CostModelOptions::memory_efficiency), in elements of e bytes plus a 1-byte dropout mask:
//   F: QKᵀ writes S (e); fused scale-mask-softmax reads S, writes P (2e); dropout reads P,
//      writes P' and the mask (2e + 1); AV reads P' (e)                        -> (6e + 1)·z
//   B: dV reads P' (e), dP' is written (e); dropout backward reads dP' and the mask, writes
//      dP (2e + 1); softmax backward reads dP and P, writes dS (3e); dQ and dK read dS (2e)
//                                                                               -> (10e + 1)·z
// Stored for the backward instead of the log-sum-exp: P, the mask and P', (2e + 1)·z bytes —
// Korthikanti et al.'s 5·a·s²·b at e = 2, which is exactly what their selective recompute
// drops (act_core; O is kept).
//
// Recompute: `training.recompute == kSelective` applies here, per module of
// `training.recompute_modules` (Megatron-Core's names; each module's outputs dropped after F
// and recomputed in B from what F kept):
//   core_attn    act_core dropped; the core's FLOPs (materialized: its F score traffic too)
//                re-run at the start of B.
//   layernorm    every norm's output dropped (norm_act: the pre-norms' x̂, MLA's normed
//                latents, the head's final norm); recomputing reads the input and writes the
//                output, 2·norm_act bytes at the HBM rate. The outputs are weight-GEMM inputs,
//                so once recomputed they are held until W as before (act_w unchanged).
//   mla_up_proj  Q, K, V dropped (up_act); B re-runs the q and kv up-projection GEMMs from the
//                kept normed latents (up_linear FLOPs at the weight-GEMM rate).
//   moe_act      the experts' SwiGLU outputs dropped (swiglu_act); recomputing reads gate and
//                up and writes the output, 3·swiglu_act bytes at the HBM rate; held until W.
// Under FP8 the weight-GEMM inputs F still keeps are held in FP8 (half of act_w, less what
// layernorm / moe_act dropped). Full recompute is a per-stage choice of the plan; the cost
// model reports what it needs — recompute_s (= F) and input_bytes (what the stage keeps) — and
// leaves activation_bytes as without recompute.
//
// Efficiencies (CostModelOptions::efficiency, achieved fraction of peak per layer kind). Their
// ratios are judgement, not measurement: GEMM-only layers (MLP 0.66) highest, layers with an
// attention core lower (attention, MLA, vision 0.54; the head 0.60), the scans lowest (Mamba
// 0.36, Mamba-2 0.42). A MoE layer's expert GEMMs are SwiGLU MLPs and run at the MLP's 0.66;
// what its routing and its narrow experts cost besides is HBM traffic per routed token copy,
// fitted to published kernel measurements (MoePart). Their level is one factor fitted to
// published measurements: Table 1 of Narayanan et al. (SC '21, arXiv 2104.04473), ten GPT runs
// of 1.7B to 1008B parameters on 32 to 3072 A100s with their published layouts, each planned as
// run (full recompute, materialized attention, published global batch) by
// bench/published_runs. The factor (x1.2 on the earlier 0.45 / 0.55 / ... set) is the one that
// brings every row within ±10% of its published TFLOP/s; no run has its own. The MoE runs of
// that benchmark (Mixtral on H100, DeepSeek-V3 on H800) were not used to fit it, and checked
// afterwards (docs/benchmarks.md). The embedding's 0.30 is a fraction of the HBM bandwidth
// (memory-bound), not fitted; memory_efficiency is a measured figure (cost_model.h).
//
// FP8 (CostModelOptions::fp8_gemm_efficiency, 0.73): FP8 weight GEMMs reach 0.73 of the
// fraction of the FP8 peak that the kind's BF16 GEMMs reach of the BF16 peak, i.e. about 1.46x
// the BF16 rate rather than the data sheets' 2x. Fitted to the two dense FP8 runs of Megatron
// Bridge's H100 table (Llama3 8B on 8 and 70B on 64 H100, per-tensor current scaling,
// 744 and 719 model TFLOP/s: bench/published_runs/megatron_bridge_dense_h100.json), which the
// 2x ratio predicted 26-27% too fast; 0.73 brings both within a few percent. The fitted
// factor carries what an analytic FP8 GEMM leaves out: current scaling's amax pass before each
// cast, the BF16 epilogue and per-kernel fixed costs, which do not halve with the FP8 math.
// The FP8 MoE runs of that benchmark were not used to fit it (docs/benchmarks.md).
// A MoE layer's routed experts (grouped GEMMs, each expert's tokens quantized on their own)
// gain less: CostModelOptions::fp8_expert_gemm_efficiency, 0.61 (about 1.22x the BF16 rate),
// is the least-squares fit of the modelled FP8 / BF16 time of a whole MoE layer to the six
// pairs Megatron-LM measured in its MoE layer performance test (tests/functional_tests/
// test_cases/common/moe_perf/baseline.json at cf39a4dd: H100, EP 8 in one node, blockwise FP8,
// Mixtral and DeepSeek proxies, three dispatchers), where FP8 took 0.85-1.01 of the BF16 time
// (CostTest.Fp8MoeLayerGainsWhatMegatronMeasuredOverBf16). No training run was used. Two
// caveats: those layers used blockwise scaling and the dense runs per-tensor current scaling,
// so part of the difference may be the recipe's (both factors apply to every FP8 recipe); and
// the ratio was fitted over this model's own BF16 layer, which is 1.5-1.9x slower than those
// measurements (docs/benchmarks.md), so 0.61 corrects what FP8 gains on the whole layer as
// modelled, not a kernel's rate.
#include "core/cost_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace octopipe {
namespace {

// Depthwise causal conv1d kernel width of Mamba / Mamba-2 mixers. Every model of the zoo uses 4
// (its published configurations: Jamba v0.1's mamba_d_conv, Nemotron-H 8B's conv_kernel,
// Mamba2-2.7B's d_conv); LayerDims has no field for it.
constexpr double kConvKernel = 4;

// Element-wise op counts for the head (not from the formula sheet; they are small next to the
// logits GEMM and any misfit is absorbed by the head's calibrated efficiency):
//   RMSNorm: square, accumulate, scale by rsqrt, multiply by weight.
constexpr double kNormFlopsPerElement = 4;
//   Fused cross-entropy: running max, subtract, exp, accumulate per logit.
constexpr double kCrossEntropyFlopsPerLogit = 4;
// Softmax statistics kept by FlashAttention for its backward: one fp32 per head and token.
constexpr double kLseBytes = 4;
// Cross-entropy keeps the softmax of the logits for its backward in fp32, as Megatron-LM's
// vocab-parallel cross-entropy does (it upcasts the logits).
constexpr double kLogitBytes = 4;
// Token ids are int64 in PyTorch.
constexpr double kTokenIdBytes = 8;
// FP8 training (Transformer Engine's recipe): every weight GEMM's input in F and its output
// gradient in B are cast from BF16 to FP8 by a fused cast-transpose, which reads 2 bytes per
// element and writes the row-wise and the column-wise (transposed, for the other GEMM of the
// backward) FP8 copies, 1 byte each.
constexpr double kFp8CastBytesPerElement = 4;

// A MoE layer's HBM traffic per routed token copy besides its GEMMs and its permutation, in
// elements of hidden size h and expert width f (MoePart): F 7.9·h + 22.5·f, B 20·h + 31.5·f.
// Fitted by least squares (relative error) to the "Megatron" bars of Figure 14 of SonicMoE
// (Guo et al., arXiv 2512.14080: forward and backward TFLOP/s of a whole MoE layer — router,
// gather, grouped GEMMs, SwiGLU, scatter — on one H100 in BF16 at twelve shapes, h 768 to
// 4096, f 256 to 2048, top-2 to top-16, 1536 to 2560 tokens per expert; read off the figure,
// ±3 TFLOP/s), with the GEMMs at the MLP's efficiency and the permutation as below: the
// modelled layer is within 9% of every forward bar and 22% of every backward one (rms 5% and
// 12%). The bars and the fit: bench/published_runs/moe_layer_fit.py. Fitted on H100 alone, as
// bytes: on other GPUs the term scales with their memory bandwidth. No training run was used;
// Mixtral 8x7B's published runs, checked afterwards, come out as before (docs/benchmarks.md).
struct MoeCopyElements {
  double per_hidden;
  double per_expert_width;
};
constexpr MoeCopyElements kMoeCopyF{7.9, 22.5};
constexpr MoeCopyElements kMoeCopyB{20.0, 31.5};

// One kind's contribution, for the whole layer before tensor parallelism.
struct Part {
  double linear = 0;     // forward FLOPs of weight GEMMs
  double nonlinear = 0;  // forward FLOPs without weights
  double core = 0;       // the part of `nonlinear` selective recompute re-runs in B
  double act = 0;        // activation bytes held from F to the backward (no recompute)
  double act_w = 0;      // of which read by weight-gradient GEMMs (held until W)
  double act_core = 0;   // of which dropped by selective recompute of core_attn
  // Selective recompute's other modules (TrainingOptions::recompute_modules): the bytes each
  // drops from what F keeps, and what recomputing them costs in B.
  double norm_act = 0;    // layernorm: every norm's output (a weight GEMM's input, in act_w)
  double up_act = 0;      // mla_up_proj: Q, K, V as the up-projections write them
  double up_linear = 0;   //   the up-projection FLOPs re-run
  double swiglu_act = 0;  // moe_act: the experts' SwiGLU outputs (the down GEMMs' input, in
                          // act_w), recomputed from the kept gate/up outputs
  double params = 0;
  double expert_params = 0;  // of which routed experts (divided by the EP degree)
  // Materialized attention only: HBM bytes its scores move in F and in B.
  double core_bytes_f = 0;
  double core_bytes_b = 0;
  // FP8 only: the MoE router's GEMM FLOPs (of `linear`; the router stays in BF16), and the
  // elements of the weight GEMMs' distinct inputs (F) and output gradients (B) a FP8 run
  // casts (kFp8CastBytesPerElement).
  double router_linear = 0;
  double expert_linear = 0;  // MoE only: the routed experts' grouped-GEMM FLOPs (of `linear`)
  double cast_f = 0;
  double cast_b = 0;
  // MoE only: HBM bytes the token permutation and the rest of the layer (per routed copy) move
  // in F and in B, and what the alltoall dispatcher's chunk sorts add to each under expert
  // parallelism (MoePart).
  double route_bytes_f = 0;
  double route_bytes_b = 0;
  double sort_bytes = 0;
  // Embedding only: bytes moved by F and by W (the embedding has no matmul FLOPs).
  double fwd_bytes_moved = 0;
  double wgrad_bytes_moved = 0;

  Part& operator+=(const Part& o) {
    linear += o.linear;
    nonlinear += o.nonlinear;
    core += o.core;
    act += o.act;
    act_w += o.act_w;
    act_core += o.act_core;
    norm_act += o.norm_act;
    up_act += o.up_act;
    up_linear += o.up_linear;
    swiglu_act += o.swiglu_act;
    router_linear += o.router_linear;
    expert_linear += o.expert_linear;
    cast_f += o.cast_f;
    cast_b += o.cast_b;
    route_bytes_f += o.route_bytes_f;
    route_bytes_b += o.route_bytes_b;
    sort_bytes += o.sort_bytes;
    params += o.params;
    expert_params += o.expert_params;
    core_bytes_f += o.core_bytes_f;
    core_bytes_b += o.core_bytes_b;
    fwd_bytes_moved += o.fwd_bytes_moved;
    wgrad_bytes_moved += o.wgrad_bytes_moved;
    return *this;
  }
};

// Activations, messages and weights: fp32 4 bytes, else 2 (FP8 training keeps them in BF16;
// only the weight GEMMs' saved inputs are FP8, see Cost).
double ElementBytes(Precision p) { return p == Precision::kFp32 ? 4.0 : 2.0; }

double TokensPerSample(const Layer& layer, const TrainingOptions& t) {
  return static_cast<double>(layer.dims.tokens > 0 ? layer.dims.tokens : t.seq_len);
}

double AttentionHeadDim(const LayerDims& d) {
  if (d.head_dim > 0) return static_cast<double>(d.head_dim);
  return d.heads > 0 ? static_cast<double>(d.hidden) / d.heads : 0.0;
}

// Turns a FlashAttention core (`p` as AttentionPart / MlaPart return it, `n` heads, `lse` its
// log-sum-exp bytes) into a materialized one (see the top of this file): the causal half-square
// FLOPs doubled, the scores' HBM traffic added, P, mask and P' stored instead of the
// log-sum-exp and dropped by selective recompute instead of O and the log-sum-exp.
void MaterializeScores(Part& p, double b, double s, double n, double e, double lse,
                       bool causal) {
  if (causal) {
    p.nonlinear *= 2;
    p.core *= 2;
  }
  const double z = b * n * s * s;
  const double stored = (2 * e + 1) * z;
  p.core_bytes_f = (6 * e + 1) * z;
  p.core_bytes_b = (10 * e + 1) * z;
  p.act += stored - lse;
  p.act_core = stored;
}

// Self-attention with a pre-norm: QKV projection, core, output projection.
//   n query heads, g key/value heads, hd head dim; Q = n·hd, KV = g·hd.
// FLOPs (Megatron, GQA, causal): 4·b·s·h·p·(h + h·g/n + s/2) with p·h = n·hd, i.e.
//   linear    = 2·b·s·h·(Q + 2·KV)  [QKV]  + 2·b·s·Q·h  [output]  = 4·b·s·h·hd·(n + g)
//   nonlinear = 2·b·s²·Q  (QKᵀ and AV, 2·b·s²·Q each, halved by the causal mask)
// Non-causal attention (vision encoders) computes the full square: 4·b·s²·Q.
// Stored: x, x̂ (QKV input), Q, K, V (post-RoPE, FlashAttention backward), O (core output and
// output-projection input) and the fp32 log-sum-exp per head and token.
Part AttentionPart(double b, double s, double h, double n, double g, double hd, double e,
                   bool causal, bool materialized) {
  const double q = n * hd;
  const double kv = g * hd;
  const double bs = b * s;
  Part p;
  p.linear = 2 * bs * h * (q + 2 * kv) + 2 * bs * q * h;
  p.nonlinear = (causal ? 2.0 : 4.0) * b * s * s * q;
  p.core = p.nonlinear;
  p.act = 2 * bs * h * e + bs * (q + 2 * kv) * e + bs * q * e + bs * n * kLseBytes;
  p.act_w = bs * h * e + bs * q * e;
  p.act_core = bs * q * e + bs * n * kLseBytes;
  p.norm_act = bs * h * e;
  p.cast_f = bs * (h + q);             // x̂ (fused QKV input), O
  p.cast_b = bs * (q + 2 * kv + h);    // dQKV, d(output)
  p.params = h * q + 2 * h * kv + q * h + h;
  if (materialized) MaterializeScores(p, b, s, n, e, bs * n * kLseBytes, causal);
  return p;
}

// Dense FFN with a pre-norm. Gated (SwiGLU): up and gate h->ffn, down ffn->out; plain (GeLU,
// relu²): up h->ffn, down ffn->out. out = h except for projectors.
// FLOPs: 2·b·s·ffn·(h·m + out), m = 2 gated / 1 plain; for out = h that is Megatron's
// 4·b·s·h·ffn (×3/2 gated). All linear.
// Stored: x, x̂ (up/gate input), the up/gate outputs (activation backward), the activation
// output (down input).
Part MlpPart(double b, double s, double h, double ffn, double out, bool gated, double e) {
  const double m = gated ? 2.0 : 1.0;
  const double bs = b * s;
  Part p;
  p.linear = 2 * bs * ffn * (h * m + out);
  p.act = 2 * bs * h * e + m * bs * ffn * e + bs * ffn * e;
  p.act_w = bs * h * e + bs * ffn * e;
  p.norm_act = bs * h * e;
  p.cast_f = bs * (h + ffn);
  p.cast_b = bs * (m * ffn + out);
  p.params = h * ffn * m + ffn * out + h;
  return p;
}

// Top-k routed SwiGLU experts of size f plus S shared experts of the same size, and a router
// GEMM h->E. FLOPs (Megatron): 4·b·s·h·f·top_k·3/2 + 4·b·s·h·f·S·3/2 + 2·b·s·h·E, all linear.
// Stored: x, x̂ (router and shared-expert input), router probabilities (b·s·E), the top_k
// dispatched copies of x̂ (routed-expert GEMM input), per routed and shared expert the gate/up
// outputs (2·f) and the activation output (f, down input), and the top_k expert outputs before
// the weighted combine (gradient of the routing weights).
// Token permutation: HBM traffic without FLOPs, at the memory rate (the shared experts read x̂
// in place). Per token, in elements of h: F gathers the top_k copies into expert order (reads
// and writes k) and the combine reads the k expert outputs and writes their weighted sum
// (k + 1): (3k + 1). B: the combine's backward reads the output gradient for each copy and the
// k outputs (the routing weights' gradient) and writes k gradients (3k), the permutation's
// backward sums them back into one (k + 1): (4k + 1). The alltoall dispatcher with experts
// spread over ranks (EP > 1, several per rank) also sorts the received chunks by local expert
// after the dispatch and back before the combine, reading and writing k each: 4k more in F and
// in B (MoeDispatcher; Cost applies it).
// The rest of the layer's cost beyond its GEMMs (at the MLP's efficiency) — the SwiGLU and its
// backward, the router's softmax and top-k, the routing weights, and the fixed costs of grouped
// GEMMs too narrow to fill the GPU — grows with the routed copies and with both the hidden size
// and the expert width, and is timed as HBM traffic per routed copy: kMoeCopyF elements in F
// and kMoeCopyB in B (below). With it, the layer's F + B + W is its GEMMs' time (at 0.66) plus
// 39% for Mixtral 8x7B (h 4096, f 14336, top-2; the same total as the 0.48 fitted to its
// published runs before this term existed), 60% for DeepSeek-V3's routed experts (7168, 2048,
// top-8; 54% with its shared expert) and 176% for Qwen3-30B-A3B (2048, 768, top-8), BF16, no
// chunk sorts. Under tensor parallelism it is divided by t like every other cost here (each TP
// rank handles its shard of the tokens).
Part MoePart(const LayerDims& d, double b, double s, double e) {
  const double h = d.hidden, f = d.moe_ffn, k = d.top_k, sh = d.shared_experts, E = d.experts;
  const double bs = b * s;
  Part p;
  p.linear = 4 * bs * h * f * k * 1.5 + 4 * bs * h * f * sh * 1.5 + 2 * bs * h * E;
  p.act = 2 * bs * h * e + bs * E * e + k * bs * h * e + 3 * bs * f * e * (k + sh) +
          k * bs * h * e;
  p.act_w = bs * h * e + k * bs * h * e + bs * f * e * (k + sh);
  p.norm_act = bs * h * e;
  p.swiglu_act = bs * f * e * (k + sh);
  p.router_linear = 2 * bs * h * E;
  p.expert_linear = 4 * bs * h * f * k * 1.5;
  // x̂ once (before the dispatch; the shared experts read the same copy), the down GEMMs'
  // inputs; in B the gate/up and down outputs' gradients of every expert copy.
  p.cast_f = bs * (h + (k + sh) * f);
  p.cast_b = bs * (k + sh) * (2 * f + h);
  p.route_bytes_f = (3 * k + 1) * bs * h * e +
                    k * bs * (kMoeCopyF.per_hidden * h + kMoeCopyF.per_expert_width * f) * e;
  p.route_bytes_b = (4 * k + 1) * bs * h * e +
                    k * bs * (kMoeCopyB.per_hidden * h + kMoeCopyB.per_expert_width * f) * e;
  p.sort_bytes = 4 * k * bs * h * e;
  p.params = 3 * h * f * (E + sh) + h * E + h;
  p.expert_params = 3 * h * f * E;
  return p;
}

// Mamba-2 (SSD) mixer. d_in = expand·h, N = d_state, G = groups, H = SSM heads.
// FLOPs (formula sheet): in_proj 2·b·s·h·(2·d_in + 2·G·N + H) and out_proj 2·b·s·d_in·h are
// linear; the chunked scan 7·b·s·d_in·N is nonlinear (conv1d is not counted, as in the sheet).
// Stored: x, x̂ (in_proj input), the in_proj output z|xBC|dt, the conv output xBC (scan input),
// the scan output y (gated-norm backward) and the gated-norm output (out_proj input).
Part Mamba2Part(const LayerDims& d, double b, double s, double e) {
  const double h = d.hidden, din = static_cast<double>(d.expand) * d.hidden, N = d.d_state,
               G = d.ssm_groups, H = d.ssm_heads;
  const double in_w = 2 * din + 2 * G * N + H;
  const double bs = b * s;
  Part p;
  p.linear = 2 * bs * h * in_w + 2 * bs * din * h;
  p.nonlinear = 7 * bs * din * N;
  p.act = 2 * bs * h * e + bs * in_w * e + bs * (din + 2 * G * N) * e + 2 * bs * din * e;
  p.act_w = bs * h * e + bs * din * e;
  p.norm_act = bs * h * e;
  p.cast_f = bs * (h + din);  // in_proj and out_proj inputs
  p.cast_b = bs * (in_w + h);
  // in_proj, conv1d (weights + bias), dt_bias + A_log + D per head, gated-norm weight,
  // out_proj, pre-norm.
  p.params = h * in_w + (din + 2 * G * N) * (kConvKernel + 1) + 3 * H + din + din * h + h;
  return p;
}

// Mamba-1 selective-scan mixer. d_in = expand·h, N = d_state, R = dt_rank (0: ceil(h/16), the
// Mamba default; Jamba v0.1's 256 = 4096/16 follows it).
// FLOPs: in_proj h->2·d_in, x_proj d_in->R+2N, dt_proj R->d_in, out_proj d_in->h are linear;
// the scan ≈ 9·b·s·d_in·N (formula sheet) is nonlinear.
// Stored: x, x̂ (in_proj input), in_proj output x|z, conv output u (x_proj and scan input),
// x_proj output dt_low|B|C (dt_low is dt_proj's input), delta, scan output y, gated output
// y·silu(z) (out_proj input).
Part MambaPart(const LayerDims& d, double b, double s, double e) {
  const double h = d.hidden, din = static_cast<double>(d.expand) * d.hidden, N = d.d_state;
  const double R = d.dt_rank > 0 ? static_cast<double>(d.dt_rank) : std::ceil(h / 16.0);
  const double bs = b * s;
  Part p;
  p.linear = 2 * bs * h * 2 * din + 2 * bs * din * (R + 2 * N) + 2 * bs * R * din +
             2 * bs * din * h;
  p.nonlinear = 9 * bs * din * N;
  p.act = 2 * bs * h * e + bs * e * (6 * din + R + 2 * N);
  p.act_w = bs * h * e + bs * din * e + bs * R * e + bs * din * e;
  p.norm_act = bs * h * e;
  p.cast_f = bs * (h + din + R + din);  // in_proj, x_proj, dt_proj, out_proj inputs
  p.cast_b = bs * (2 * din + R + 2 * N + din + h);
  // in_proj, conv1d (+bias), x_proj, dt_proj (+bias), A_log, D, out_proj, pre-norm.
  p.params = h * 2 * din + din * (kConvKernel + 1) + din * (R + 2 * N) + R * din + din +
             din * N + din + din * h + h;
  return p;
}

// DeepSeek multi-head latent attention. n heads, qr = q_lora_rank (0: direct q projection),
// kr = kv_lora_rank, dn/dr = qk nope/rope head dims, dv = v head dim.
// Linear: q down h->qr and q up qr->n·(dn+dr) (or h->n·(dn+dr)), kv down h->kr+dr (latent and
// shared rope key), kv up kr->n·(dn+dv), output n·dv->h. Core (causal): QKᵀ with head dim
// dn+dr and AV with dv, 2·b·s²·n·(dn+dr)/2 + 2·b·s²·n·dv/2 — as Megatron's MLA term.
// Stored: x, x̂; the q latent and its normed copy (q-up input); the kv latent + rope key and the
// normed latent (kv-up input); Q, K, V for the core; O (output-projection input); log-sum-exp.
Part MlaPart(const LayerDims& d, double b, double s, double e, bool materialized) {
  const double h = d.hidden, n = d.heads, qr = d.q_lora_rank, kr = d.kv_lora_rank,
               dn = d.qk_nope_head_dim, dr = d.qk_rope_head_dim, dv = d.v_head_dim;
  const double qd = n * (dn + dr);
  const double bs = b * s;
  const double q_gemm = qr > 0 ? h * qr + qr * qd : h * qd;
  Part p;
  p.linear = 2 * bs * (q_gemm + h * (kr + dr) + kr * n * (dn + dv) + n * dv * h);
  p.nonlinear = b * s * s * n * (dn + dr + dv);
  p.core = p.nonlinear;
  p.act = 2 * bs * h * e + (qr > 0 ? 2 * bs * qr * e : 0) + bs * (kr + dr) * e + bs * kr * e +
          bs * (2 * qd + n * dv) * e + bs * n * dv * e + bs * n * kLseBytes;
  p.act_w = bs * h * e + (qr > 0 ? bs * qr * e : 0) + bs * kr * e + bs * n * dv * e;
  p.act_core = bs * n * dv * e + bs * n * kLseBytes;
  // The pre-norm's and the two latent norms' outputs; Q (from the q latent; a direct
  // projection without one stays kept), K and V from the kv latent.
  p.norm_act = bs * h * e + (qr > 0 ? bs * qr * e : 0) + bs * kr * e;
  p.up_act = bs * ((qr > 0 ? qd : 0) + qd + n * dv) * e;
  p.up_linear = 2 * bs * ((qr > 0 ? qr * qd : 0) + kr * n * (dn + dv));
  // x̂ (the fused q and kv down input), the normed latents (up inputs), O; in B the down, up
  // and output projections' output gradients.
  p.cast_f = bs * (h + (qr > 0 ? qr : 0) + kr + n * dv);
  p.cast_b = bs * ((qr > 0 ? qr : 0) + qd + (kr + dr) + n * (dn + dv) + h);
  // Projections plus the pre-norm and the q / kv latent norms.
  p.params = q_gemm + (qr > 0 ? qr : 0) + h * (kr + dr) + kr + kr * n * (dn + dv) + n * dv * h +
             h;
  if (materialized) MaterializeScores(p, b, s, n, e, bs * n * kLseBytes, /*causal=*/true);
  return p;
}

Part Analyze(const Layer& layer, const TrainingOptions& t, Precision precision) {
  const LayerDims& d = layer.dims;
  const double b = static_cast<double>(t.micro_batch_size);
  const double s = TokensPerSample(layer, t);
  const double h = static_cast<double>(d.hidden);
  const double e = ElementBytes(precision);
  const bool materialized = t.attention_kernel == AttentionKernel::kMaterialized;
  switch (layer.kind) {
    case LayerKind::kEmbedding: {
      // No matmul FLOPs: a row gather. Its time is bytes moved / HBM bandwidth (see Cost):
      // F reads b·s rows of h and writes the output; W scatter-adds the output gradient into
      // the gradient rows (read gradient, read + write rows). It stores only the token ids.
      Part p;
      p.fwd_bytes_moved = 2 * b * s * h * e;
      p.wgrad_bytes_moved = 3 * b * s * h * e;
      p.act = b * s * kTokenIdBytes;
      p.act_w = p.act;
      p.params = static_cast<double>(d.vocab) * h;
      return p;
    }
    case LayerKind::kHead: {
      // Final norm (nonlinear), logits 2·b·s·h·V (linear), cross-entropy (nonlinear).
      // Stored: x, x̂ (logits GEMM input) and the fp32 softmax of the logits.
      const double v = static_cast<double>(d.vocab);
      Part p;
      p.linear = 2 * b * s * h * v;
      p.nonlinear = kNormFlopsPerElement * b * s * h + kCrossEntropyFlopsPerLogit * b * s * v;
      p.act = 2 * b * s * h * e + b * s * v * kLogitBytes;
      p.act_w = b * s * h * e;
      p.norm_act = b * s * h * e;
      p.params = v * h + h;
      return p;
    }
    case LayerKind::kAttention:
      return AttentionPart(b, s, h, d.heads, d.kv_heads, AttentionHeadDim(d), e,
                           /*causal=*/true, materialized);
    case LayerKind::kMlaAttention:
      return MlaPart(d, b, s, e, materialized);
    case LayerKind::kMamba:
      return MambaPart(d, b, s, e);
    case LayerKind::kMamba2:
      return Mamba2Part(d, b, s, e);
    case LayerKind::kMoe:
      return MoePart(d, b, s, e);
    case LayerKind::kMlp:
      return MlpPart(b, s, h, d.ffn, d.out_hidden > 0 ? d.out_hidden : h, d.gated, e);
    case LayerKind::kVisionBlock: {
      // A pre-norm ViT block: multi-head attention (kv_heads = heads) over the image tokens,
      // bidirectional (no causal mask, so the core is the full square), then a plain GeLU MLP.
      Part p = AttentionPart(b, s, h, d.heads, d.heads, AttentionHeadDim(d), e,
                             /*causal=*/false, materialized);
      p += MlpPart(b, s, h, d.ffn, h, /*gated=*/false, e);
      return p;
    }
  }
  return Part{};
}

// Seconds for `work` units at `rate` units/s; +inf when work is positive and rate is not.
double Seconds(double work, double rate) {
  if (work <= 0) return 0;
  if (!(rate > 0)) return std::numeric_limits<double>::infinity();
  return work / rate;
}

}  // namespace

CostModel::CostModel(CostModelOptions options) : options_(options) {}

CostModel::Flops CostModel::ForwardFlops(const Layer& layer, const TrainingOptions& training) {
  const Part p = Analyze(layer, training, training.precision);
  return Flops{p.linear, p.nonlinear};
}

double CostModel::ParamCount(const Layer& layer) {
  return Analyze(layer, TrainingOptions{}, Precision::kBf16).params;
}

LayerCost CostModel::Cost(const Layer& layer, const TrainingOptions& training,
                          const HardwareSpec& hardware) const {
  const Part p = Analyze(layer, training, training.precision);
  const double tp = static_cast<double>(training.tp_degree > 0 ? training.tp_degree : 1);
  const double eff = options_.efficiency[static_cast<int>(layer.kind)];
  const double flop_rate = hardware.peak_flops * eff;
  // FP8 training runs the weight GEMMs at the FP8 peak (the kind's achieved fraction of it
  // times CostModelOptions::fp8_gemm_efficiency, fp8_expert_gemm_efficiency for a MoE layer's
  // routed experts); without an FP8 peak (the problem builder refuses such a plan) at the
  // BF16 one. The output head and the MoE router stay in BF16 (DeepSeek-V3's report,
  // Section 3.3: "the embedding module, the output head, MoE gating modules, normalization
  // operators, and attention operators"; Megatron-LM's output layer is not a Transformer
  // Engine layer), and every FP8 GEMM's input and output gradient is cast
  // (kFp8CastBytesPerElement, at the HBM rate).
  const bool fp8 = training.precision == Precision::kFp8;
  const bool fp8_gemms = fp8 && layer.kind != LayerKind::kHead;
  const double linear_rate = fp8_gemms && hardware.peak_flops_fp8 > 0
                                 ? hardware.peak_flops_fp8 * eff * options_.fp8_gemm_efficiency
                                 : flop_rate;
  const double mem_rate = hardware.memory_bandwidth * options_.memory_efficiency;
  const double e = ElementBytes(training.precision);
  const bool selective = training.recompute == RecomputePolicy::kSelective;
  const RecomputeModules& modules = training.recompute_modules;
  const bool re_core = selective && modules.core_attn;
  const double norm_dropped = selective && modules.layernorm ? p.norm_act : 0;
  const double up_dropped = selective && modules.mla_up_proj ? p.up_act : 0;
  const double swiglu_dropped = selective && modules.moe_act ? p.swiglu_act : 0;

  const double ep = static_cast<double>(training.ep_degree > 0 ? training.ep_degree : 1);
  LayerCost c;
  c.forward_flops = (p.linear + p.nonlinear) / tp;
  if (layer.kind == LayerKind::kEmbedding) {
    // Memory-bound: bytes moved / (HBM bandwidth × efficiency). No input gradient (the input
    // is token ids).
    const double byte_rate = hardware.memory_bandwidth * eff;
    c.forward_s = Seconds(p.fwd_bytes_moved / tp, byte_rate);
    c.backward_input_s = 0;
    c.weight_grad_s = Seconds(p.wgrad_bytes_moved / tp, byte_rate);
  } else {
    if (linear_rate == flop_rate) {  // every precision but FP8: one rate for all the math
      c.forward_s = Seconds((p.linear + p.nonlinear) / tp, flop_rate);
      c.backward_input_s = Seconds((p.linear + 2 * p.nonlinear) / tp, flop_rate);
      c.weight_grad_s = Seconds(p.linear / tp, linear_rate);
    } else {
      // The router in BF16; the routed experts' grouped GEMMs at their own FP8 rate.
      const double lin8 = (p.linear - p.router_linear - p.expert_linear) / tp;
      const double lin16 = p.router_linear / tp;
      const double expert8 = p.expert_linear / tp;
      const double expert_rate =
          hardware.peak_flops_fp8 * eff * options_.fp8_expert_gemm_efficiency;
      const double gemms8 = Seconds(lin8, linear_rate) + Seconds(expert8, expert_rate);
      c.forward_s = gemms8 + Seconds(lin16 + p.nonlinear / tp, flop_rate) +
                    Seconds(kFp8CastBytesPerElement * p.cast_f / tp, mem_rate);
      c.backward_input_s = gemms8 + Seconds(lin16 + 2 * p.nonlinear / tp, flop_rate) +
                           Seconds(kFp8CastBytesPerElement * p.cast_b / tp, mem_rate);
      c.weight_grad_s = gemms8 + Seconds(lin16, flop_rate);
    }
    // Selective recompute re-runs the attention core at the start of B.
    if (re_core) c.backward_input_s += Seconds(p.core / tp, flop_rate);
    // The other modules' recomputation, also at the start of B.
    if (up_dropped > 0) c.backward_input_s += Seconds(p.up_linear / tp, linear_rate);
    // A materialized attention core's score traffic (0 for FlashAttention).
    c.forward_s += Seconds(p.core_bytes_f / tp, mem_rate);
    c.backward_input_s +=
        Seconds((p.core_bytes_b + (re_core ? p.core_bytes_f : 0) + 2 * norm_dropped +
                 3 * swiglu_dropped) / tp,
                mem_rate);
    // A MoE layer's token permutation (MoePart); the alltoall dispatcher's chunk sorts only
    // where a rank holds several of the experts spread over EP > 1 ranks.
    const bool sorts = training.moe_dispatcher == MoeDispatcher::kAllToAll && ep > 1 &&
                       static_cast<double>(layer.dims.experts) > ep;
    const double sort = sorts ? p.sort_bytes : 0;
    c.forward_s += Seconds((p.route_bytes_f + sort) / tp, mem_rate);
    c.backward_input_s += Seconds((p.route_bytes_b + sort) / tp, mem_rate);
  }

  const double s = TokensPerSample(layer, training);
  const double b = static_cast<double>(training.micro_batch_size);
  double act =
      p.act - (re_core ? p.act_core : 0) - norm_dropped - up_dropped - swiglu_dropped;
  double act_w = p.act_w;
  if (fp8_gemms && layer.kind != LayerKind::kEmbedding) {
    // The weight GEMMs' inputs, held until W, are kept in FP8: half their BF16 bytes (of
    // those F keeps: recomputed norm and SwiGLU outputs are not held until B).
    act -= (act_w - norm_dropped - swiglu_dropped) / 2;
    act_w /= 2;
  }
  c.activation_bytes = act / tp;
  c.activation_bytes_w = act_w / tp;
  c.input_bytes = layer.kind == LayerKind::kEmbedding
                      ? b * s * kTokenIdBytes / tp
                      : b * s * static_cast<double>(layer.dims.hidden) * e / tp;
  const double out_width = static_cast<double>(
      layer.dims.out_hidden > 0 ? layer.dims.out_hidden : layer.dims.hidden);
  c.output_bytes = layer.kind == LayerKind::kHead ? 0 : b * s * out_width * e / tp;
  const double expert_count = p.expert_params / ep / tp;
  c.param_count = (p.params - p.expert_params) / tp + expert_count;
  // The routed experts' share of the rank's weights by the formula: a measured size below keeps
  // it (its experts' optimizer state is sharded over the expert-data-parallel group too).
  const double expert_share = c.param_count > 0 ? expert_count / c.param_count : 0.0;

  // Measured overrides. Measured values are per tensor-parallel rank at m.tp_degree (whole
  // layers: 1) and taken as measured under the model's own training options (so no recompute
  // adjustment is applied to them). At another TP degree each rank does tp_degree / tp of the
  // measured work and holds that share of its activations and weights, as the formulas above
  // divide by tp (Megatron-style sharding of every kind, the executor's as well); the
  // all-reduces TP adds are Comm's.
  const MeasuredCosts& m = layer.measured;
  const double shard = static_cast<double>(std::max(1, m.tp_degree)) / tp;
  if (m.forward_s) c.forward_s = *m.forward_s * shard;
  if (m.backward_input_s) c.backward_input_s = *m.backward_input_s * shard;
  if (m.weight_grad_s) c.weight_grad_s = *m.weight_grad_s * shard;
  if (m.activation_bytes) {
    // Keep the formula's split between B-freed and W-held bytes; half each without dims.
    const double w_fraction =
        c.activation_bytes > 0 ? c.activation_bytes_w / c.activation_bytes : 0.5;
    c.activation_bytes = *m.activation_bytes * shard;
    c.activation_bytes_w = *m.activation_bytes * shard * w_fraction;
  }
  if (m.param_bytes) {
    // Measured whole (every expert): under EP a rank holds 1 / ep of the routed experts, so
    // the formula's expert parameters it does not hold come off (a layer that holds more than
    // its MoE part, as an imported profile's attention + MoE block, keeps the rest whole).
    c.param_count = std::max(
        0.0, *m.param_bytes * shard / e - p.expert_params / tp * (1 - 1 / ep));
  }
  if (m.output_bytes) c.output_bytes = *m.output_bytes * shard;
  if (m.activation_bytes_w) c.activation_bytes_w = *m.activation_bytes_w * shard;
  if (m.input_bytes) c.input_bytes = *m.input_bytes * shard;
  c.recompute_s = m.recompute_s ? *m.recompute_s * shard : c.forward_s;
  // Measured split as planned (the layer as the executor runs it at these TP and EP degrees,
  // their collectives included: Comm adds none): those times, unscaled.
  // Its per-rank bytes where it has them: a split keeps more than 1 / tp of the whole layer's
  // (the executor's TP ranks hold the whole input and their partial outputs; EP ranks the
  // tokens routed to their experts).
  const MeasuredSharded* at = m.Sharded(static_cast<int64_t>(tp), training.ep_degree,
                                        layer.kind == LayerKind::kMoe);
  if (at != nullptr) {
    c.forward_s = at->forward_s;
    c.backward_input_s = at->backward_input_s;
    c.weight_grad_s = at->weight_grad_s;
    c.recompute_s = at->recompute_s;
    // Measured when any is (`octopipe profile` writes all three; a split's F may keep
    // nothing, as the embedding's keeps no tensor).
    if (at->activation_bytes > 0 || at->activation_bytes_w > 0 || at->param_bytes > 0) {
      c.activation_bytes = at->activation_bytes;
      c.activation_bytes_w = at->activation_bytes_w;
    }
    if (at->param_bytes > 0) c.param_count = at->param_bytes / e;
  }

  // Weights, gradients and Adam state (fp32 master weights, momentum, variance; 12 bytes in
  // mixed precision, 8 beyond the fp32 weights in fp32), the optimizer part sharded by ZeRO.
  // Expert parameters are replicated over only zero_degree / ep_degree ranks (the
  // expert-data-parallel group; Megatron's distributed optimizer shards them over that).
  const double zero = static_cast<double>(training.zero_degree > 0 ? training.zero_degree : 1);
  const double expert_zero = std::max(1.0, zero / ep);
  auto per_param = [&](double z) {
    return training.precision == Precision::kFp32 ? 4 + 4 + 8 / z : 2 + 2 + 12 / z;
  };
  // A measured parameter size replaces the formula's; its expert share keeps the formula's.
  c.param_bytes = c.param_count * e;
  c.static_bytes = c.param_count * (1 - expert_share) * per_param(zero) +
                   c.param_count * expert_share * per_param(expert_zero);
  return c;
}

double RingAllReduceSeconds(double bytes, int group, const LinkSpec& link) {
  if (group <= 1 || bytes <= 0) return 0;
  const double n = group;
  const double bus = link.allreduce_bandwidth > 0 ? link.allreduce_bandwidth : link.bandwidth;
  const double step = link.allreduce_latency_s > 0 ? link.allreduce_latency_s : link.latency_s;
  return 2 * (n - 1) * step + Seconds(2 * (n - 1) / n * bytes, bus);
}

double OverlappedRingAllReduceSeconds(double bytes, int group, const LinkSpec& link, double start,
                                      double busy_until) {
  const double idle = RingAllReduceSeconds(bytes, group, link);
  if (idle <= 0 || start >= busy_until) return idle;
  LinkSpec busy = link;
  if (link.allreduce_overlapped_bandwidth > 0) {
    busy.allreduce_bandwidth = link.allreduce_overlapped_bandwidth;
  }
  if (link.allreduce_overlapped_latency_s > 0) {
    busy.allreduce_latency_s = link.allreduce_overlapped_latency_s;
  }
  // Never faster than idle: a fit of noisy samples beside compute may come out above the idle
  // one, and compute does not speed a collective up.
  const double overlapped = std::max(idle, RingAllReduceSeconds(bytes, group, busy));
  const double window = busy_until - start;
  if (overlapped <= window) return overlapped;
  return window + (1 - window / overlapped) * idle;
}

double AllToAllSeconds(double bytes, int group, int ranks_in_node, const LinkSpec& intra,
                       const LinkSpec& inter) {
  if (group <= 1 || bytes <= 0) return 0;
  const int local = std::clamp(ranks_in_node, 1, group);
  const double chunk = bytes / group;
  const double intra_peers = local - 1, inter_peers = group - local;
  const double t_intra = intra_peers * intra.latency_s + Seconds(intra_peers * chunk, intra.bandwidth);
  const double t_inter = inter_peers * inter.latency_s + Seconds(inter_peers * chunk, inter.bandwidth);
  return std::max(t_intra, t_inter);
}

// The node-deduplicating exchange's network time is costed from its kernels' published
// throughput, not from the bytes that cross the network. DeepEP's and HybridEP's benchmarks
// count a token once per destination node *including the sender's own*, whose chunk never
// touches the NIC, and divide by the kernel's time:
//   DeepEP normal kernels (README, v1.2.1; H800, CX7 400 Gb/s NIC of ~50 GB/s, 4096 tokens,
//   hidden 7168, top-8 experts within the top-4 node groups, FP8 dispatch, BF16 combine):
//   EP 16 / 32 / 64 dispatch 43 / 58 / 51 GB/s,
//   combine 43 / 57 / 50 GB/s;
//   HybridEP (docs/README_Hybrid-EP.md of DeepEP's hybrid-ep branch; H100, the same shape,
//   8 SMs, through the Torch API, BF16): EP 16 / 32 / 64 dispatch 57.7 / 46.5 / 41.5 GB/s,
//   combine 57.0 / 50.7 / 47.7 GB/s.
// Both average the NIC's 50 GB/s (1.01x and 1.00x): the kernels move every destination
// node's copy, the own node's included, at about the NIC's rate, so at EP 16 over 2 nodes the
// bytes that do cross the network go at about half of it. The alltoall dispatcher (NCCL's
// all-to-all, every copy on its own) keeps AllToAllSeconds.
double ExpertAllToAllSeconds(double copy_bytes, int top_k, int max_nodes, int group,
                             int ranks_in_node, const LinkSpec& intra, const LinkSpec& inter) {
  if (group <= 1 || copy_bytes <= 0 || top_k <= 0) return 0;
  const int local = std::clamp(ranks_in_node, 1, group);
  if (max_nodes <= 0) return AllToAllSeconds(top_k * copy_bytes, group, local, intra, inter);
  const int nodes = (group + local - 1) / local;
  const double k = top_k;
  // Copies per token: to the sender's node's other GPUs, and over the network (one per
  // destination node). A token's k experts, spread uniformly over the m nodes its routing may
  // use, lie on m (1 - (1 - 1/m)^k) distinct nodes on average (1.99 of 2 at top-8; with few
  // experts per token fewer than min(m, k)).
  const double intra_copies = k * (local - 1) / group;
  const double m = static_cast<double>(std::min(max_nodes, nodes));
  const double dest_nodes = m * (1 - std::pow(1 - 1 / m, k));
  const double inter_copies = dest_nodes * (nodes - 1) / nodes;
  // What arrives over the network for this node's other GPUs is forwarded over NVLink.
  const double forwarded = inter_copies * (local - 1) / local;
  const double t_intra = (local - 1) * intra.latency_s +
                         Seconds((intra_copies + forwarded) * copy_bytes, intra.bandwidth);
  // The network side: every destination node's copy at the NIC's rate, the sender's own
  // node's included (see above: what these kernels are published to achieve), but never more
  // than sending each remote copy on its own (alltoall's k (nodes - 1) / nodes): the figures
  // are of top-8 routing, where deduplication saves 2-4x; with few experts per token nothing
  // published says these kernels lose to NCCL's all-to-all. In one node the cap is 0: the
  // intranode kernels use NVLink alone.
  const double timed_copies = std::min(dest_nodes, k * (nodes - 1) / nodes);
  const double t_inter =
      (nodes - 1) * inter.latency_s + Seconds(timed_copies * copy_bytes, inter.bandwidth);
  return std::max(t_intra, t_inter);
}

LayerComm CostModel::Comm(const Layer& layer, const TrainingOptions& training,
                          const CommLinks& links) const {
  LayerComm c;
  const double e = ElementBytes(training.precision);
  const double b = static_cast<double>(training.micro_batch_size);
  const double s = TokensPerSample(layer, training);
  const int tp = static_cast<int>(std::max<int64_t>(1, training.tp_degree));
  const int ep = static_cast<int>(std::max<int64_t>(1, training.ep_degree));
  // A layer measured split at these degrees has its collectives in its measured times (Cost).
  if (layer.measured.Sharded(tp, ep, layer.kind == LayerKind::kMoe) != nullptr) return c;
  if (tp > 1) {
    const double out_width = static_cast<double>(
        layer.dims.out_hidden > 0 ? layer.dims.out_hidden : layer.dims.hidden);
    const double in_width = static_cast<double>(layer.dims.hidden);
    const double fwd_count = layer.kind == LayerKind::kHead          ? 0
                             : layer.kind == LayerKind::kVisionBlock ? 2
                                                                     : 1;
    const double bwd_count = layer.kind == LayerKind::kEmbedding     ? 0
                             : layer.kind == LayerKind::kVisionBlock ? 2
                                                                     : 1;
    c.forward_s += fwd_count * RingAllReduceSeconds(b * s * out_width * e, tp, links.intra);
    c.backward_input_s += bwd_count * RingAllReduceSeconds(b * s * in_width * e, tp, links.intra);
  }
  if (ep > 1 && layer.kind == LayerKind::kMoe) {
    const int local = training.ep_ranks_per_node > 0
                          ? static_cast<int>(training.ep_ranks_per_node)
                          : std::min(ep, std::max(1, links.devices_per_node));
    // One copy of the micro-batch's tokens per TP rank, in elements; each all-to-all moves
    // top_k copies (ExpertAllToAllSeconds: node-limited routing crosses the network once per
    // node). FP8 training dispatches the expert GEMMs' FP8 inputs (1 byte); the combine and
    // both gradients travel in BF16.
    const double copy = b * s * static_cast<double>(layer.dims.hidden) / tp;
    const double dispatch_e = training.precision == Precision::kFp8 ? 1 : e;
    // The flex dispatcher's kernels (DeepEP's internode kernels, HybridEP) send a token once
    // to each node holding any of its experts, to the GPU of the sender's local index there,
    // which forwards it over NVLink; the combine sums within the node before the network.
    // That is node-limited routing's exchange with a limit of every node the group spans.
    // NCCL's all-to-all (the alltoall dispatcher) sends every copy on its own.
    int max_nodes = static_cast<int>(layer.dims.max_nodes_per_token);
    if (max_nodes <= 0 && training.moe_dispatcher == MoeDispatcher::kFlex) max_nodes = ep;
    auto a2a = [&](double element_bytes) {
      return ExpertAllToAllSeconds(copy * element_bytes, static_cast<int>(layer.dims.top_k),
                                   max_nodes, ep, local, links.intra, links.inter);
    };
    c.ep_forward_s = a2a(dispatch_e) + a2a(e);  // dispatch + combine
    c.ep_backward_input_s = 2 * a2a(e);         // their gradients
    c.forward_s += c.ep_forward_s;
    c.backward_input_s += c.ep_backward_input_s;
  }
  return c;
}

}  // namespace octopipe
