// ModelGraph: the ordered chain of layers of a model plus its training options.
//
// Contract: a ModelGraph that passed Validate() has at least one layer, every layer has a known
// kind and positive dimensions for the fields its kind needs, and the training options are in
// range. Multimodal encoders are linearised in front of the LLM. Plain value type; not
// thread-safe for concurrent mutation, safe to share const.
#ifndef OCTOPIPE_CORE_MODEL_GRAPH_H_
#define OCTOPIPE_CORE_MODEL_GRAPH_H_

#include <cstdint>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace octopipe {

enum class LayerKind {
  kEmbedding,
  kAttention,     // GQA self-attention block (norm + QKV + core + output projection)
  kMlaAttention,  // DeepSeek multi-head latent attention
  kMamba,         // Mamba-1 selective-scan mixer
  kMamba2,        // Mamba-2 (SSD) mixer
  kMoe,           // mixture-of-experts FFN (SwiGLU experts, optional shared experts)
  kMlp,           // dense FFN, SwiGLU (gated) or plain
  kVisionBlock,   // ViT encoder block (attention + MLP) over image tokens
  kHead,          // final norm + logits + cross-entropy loss
};

inline constexpr int kNumLayerKinds = 9;

absl::string_view LayerKindName(LayerKind kind);
// Parses "attention", "mla_attention", ...; error names the value and lists the valid ones.
absl::StatusOr<LayerKind> ParseLayerKind(absl::string_view name);

// Dimensions; fields a kind does not use stay 0. See proto/model.proto for meanings.
struct LayerDims {
  int64_t hidden = 0;
  int64_t ffn = 0;
  bool gated = true;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;  // 0: hidden / heads
  int64_t vocab = 0;
  int64_t experts = 0;
  int64_t top_k = 0;
  int64_t moe_ffn = 0;
  int64_t shared_experts = 0;
  int64_t d_state = 0;
  int64_t expand = 0;
  int64_t ssm_heads = 0;
  int64_t ssm_groups = 0;
  int64_t dt_rank = 0;
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  int64_t tokens = 0;      // tokens per sample this layer sees; 0: the sequence length
  int64_t out_hidden = 0;  // output width if different from hidden; 0: hidden
  // MoE node-limited routing: a token's experts lie on at most this many nodes and it crosses
  // the network once per node (then NVLink inside it). 0: no limit, one crossing per copy
  // (per node under the flex dispatcher, whose kernels send one copy per node anyway).
  int64_t max_nodes_per_token = 0;
};

// One layer's per-rank times for one micro-batch measured with the layer split as the executor
// runs it: over a tensor-parallel group of `tp_degree` ranks and, for a MoE layer, its experts
// over an expert-parallel group of `ep_degree` ranks. The communication the split adds inside
// F, B and R (TP all-reduces, EP dispatch and combine all-to-alls) is part of these times, so
// CostModel::Comm adds none for a layer planned at these degrees. `octopipe profile --tp/--ep`
// measures them: a split layer rarely takes 1 / tp of the whole layer's time (its small GEMMs
// run less efficiently, norms and the MoE router are replicated, and every collective waits for
// the slower rank), and an all-to-all costs more than its bytes over the link.
struct MeasuredSharded {
  int tp_degree = 1;
  int ep_degree = 1;  // > 1 only for MoE layers
  double forward_s = 0;
  double backward_input_s = 0;
  double weight_grad_s = 0;
  double recompute_s = 0;
  // Per rank, as the split holds them (all 0: not measured; the whole layer's, scaled by TP,
  // then apply): what F keeps for B, what B keeps for W, and the weights.
  double activation_bytes = 0;
  double activation_bytes_w = 0;
  double param_bytes = 0;
};

// Measured per-layer costs for one micro-batch; each present field overrides the formula.
struct MeasuredCosts {
  std::optional<double> forward_s;
  std::optional<double> backward_input_s;
  std::optional<double> weight_grad_s;
  std::optional<double> activation_bytes;
  std::optional<double> param_bytes;
  std::optional<double> output_bytes;
  std::optional<double> recompute_s;         // R (default: forward_s)
  std::optional<double> activation_bytes_w;  // held from B until W
  std::optional<double> input_bytes;         // kept by full recompute
  // The tensor-parallel degree the values above were measured at, per TP rank (`octopipe
  // profile` measures whole layers: 1). Planned at another degree, times and per-rank bytes
  // scale by tp_degree / the planned degree (CostModel::Cost) — unless `sharded` holds the
  // planned degrees.
  int tp_degree = 1;
  // Times measured with the layer split (distinct (tp, ep) pairs, not both 1); planned at one of
  // them, the layer's F, B, W, R are that entry's.
  std::vector<MeasuredSharded> sharded;

  // The entry for a layer planned at (tp, ep) — EP counts only for MoE layers (`moe`); nullptr
  // when there is none or the layer is whole (1, 1).
  const MeasuredSharded* Sharded(int64_t tp, int64_t ep, bool moe) const {
    if (!moe) ep = 1;
    if (tp <= 1 && ep <= 1) return nullptr;
    for (const MeasuredSharded& a : sharded) {
      if (a.tp_degree == tp && a.ep_degree == ep) return &a;
    }
    return nullptr;
  }
};

struct Layer {
  std::string name;
  LayerKind kind = LayerKind::kMlp;
  LayerDims dims;
  MeasuredCosts measured;
};

// kFp8: weight GEMMs in FP8 at the hardware's FP8 peak (HardwareSpec::peak_flops_fp8), their
// inputs kept for the backward in FP8 (1 byte); everything else — the other math, activations,
// messages and weights — in BF16, with fp32 master weights and Adam state (Transformer
// Engine's recipe).
enum class Precision { kBf16, kFp16, kFp32, kFp8 };
enum class RecomputePolicy { kNone, kSelective, kFull };
// How the attention core runs. kFlash (FlashAttention, the default): scores stay on chip, the
// causal mask skips the upper triangle's FLOPs, the backward keeps only a log-sum-exp per head
// and token. kMaterialized (Megatron-LM before FlashAttention, 2022): the b x heads x s x s
// scores go through HBM — batched GEMM, fused scale-mask-softmax, dropout — the full square is
// computed, and softmax output, dropout mask and dropped-out probabilities are kept for the
// backward (core/cost_model.cc).
enum class AttentionKernel { kFlash, kMaterialized };
// How a MoE layer's tokens reach their experts and come back (Megatron-Core's
// moe_token_dispatcher_type), which sets the HBM traffic of the token permutation
// (core/cost_model.cc, MoePart). kAllToAll ("alltoall", Megatron-Core's default): the tokens are
// permuted into expert order before the all-to-all and, with expert parallelism and several
// experts per rank, the received chunks are sorted again by local expert after it (and back
// before the combine). kFlex ("flex": DeepEP / HybridEP): a fused dispatch sends the tokens as
// they are and one permutation follows it, so there are no chunk sorts; its kernels also send a
// token over the network once per destination node, not once per copy (CostModel::Comm).
enum class MoeDispatcher { kAllToAll, kFlex };

// What selective recompute re-runs in the backward instead of keeping from F (Megatron-Core's
// `recompute_modules`, whose names these are): each module's outputs are dropped after F and
// recomputed from what F kept when B needs them (core/cost_model.cc costs each).
//   core_attn    the attention core (Korthikanti et al.): its saved output and softmax
//                statistics (materialized: the score tensors too); re-runs the core.
//   layernorm    every norm's output (the pre-norms, MLA's latent norms, the final norm);
//                re-reads the input and rewrites the output.
//   mla_up_proj  MLA's query and key/value up-projection outputs (Q, K, V); re-runs those
//                GEMMs from the kept normed latents.
//   moe_act      the routed and shared experts' SwiGLU outputs; recomputed from the kept
//                gate/up outputs.
// The default, and what `selective` means without a list, is {core_attn}. DeepSeek-V3 ran
// {layernorm, mla_up_proj, moe_act}.
struct RecomputeModules {
  bool core_attn = true;
  bool layernorm = false;
  bool mla_up_proj = false;
  bool moe_act = false;
  bool operator==(const RecomputeModules& o) const {
    return core_attn == o.core_attn && layernorm == o.layernorm &&
           mla_up_proj == o.mla_up_proj && moe_act == o.moe_act;
  }
};
// The modules' names in the order above ("core_attn", ...), and their parse: every name
// known, none twice, at least one.
std::vector<std::string> RecomputeModuleNames(const RecomputeModules& m);
absl::StatusOr<RecomputeModules> ParseRecomputeModules(const std::vector<std::string>& names);

absl::string_view PrecisionName(Precision p);
absl::StatusOr<Precision> ParsePrecision(absl::string_view name);
absl::string_view RecomputePolicyName(RecomputePolicy r);
absl::StatusOr<RecomputePolicy> ParseRecomputePolicy(absl::string_view name);
absl::string_view AttentionKernelName(AttentionKernel k);
absl::StatusOr<AttentionKernel> ParseAttentionKernel(absl::string_view name);
absl::string_view MoeDispatcherName(MoeDispatcher d);
absl::StatusOr<MoeDispatcher> ParseMoeDispatcher(absl::string_view name);

// SMs an overlapped all-to-all takes unless the model says (TrainingOptions::ep_comm_sms):
// DeepEP's default (Buffer.num_sms) and Megatron-Core's moe_deepep_num_sms, and the 20 of the
// H800's 132 that DeepSeek-V3's report gives its dispatch and combine kernels.
inline constexpr int64_t kDefaultEpCommSms = 20;

struct TrainingOptions {
  int64_t seq_len = 4096;
  int64_t micro_batch_size = 1;
  int64_t num_microbatches = 8;
  Precision precision = Precision::kBf16;
  int64_t tp_degree = 1;
  RecomputePolicy recompute = RecomputePolicy::kNone;
  int64_t zero_degree = 1;  // optimizer state sharded this many ways
  // Expert parallelism of MoE layers: each rank holds experts / ep_degree routed experts, and
  // tokens travel to their experts and back by all-to-all over the ep_degree ranks of its EP
  // group (data-parallel replicas of the same stage). `ep_ranks_per_node`: how many of those
  // ranks share a node (NVLink) with each rank, itself included; 0: as many as fit, i.e.
  // min(ep_degree, devices of the node).
  int64_t ep_degree = 1;
  int64_t ep_ranks_per_node = 0;
  // The runtime overlaps MoE all-to-alls with another micro-batch's compute (DualPipe,
  // Megatron-Core's combined 1F1B): a stage's EP communication runs on its device's
  // communication stream after the op's compute (PipelineProblem::forward_tail_s), beside the
  // device's next op when that is of the other kind (TailOverlapsNext). OctoPipe's executor
  // does not (false).
  bool ep_comm_overlap = false;
  // With ep_comm_overlap: the SMs the all-to-all kernels occupy while they run (DeepEP's and
  // Megatron-Core's default, kDefaultEpCommSms). The op beside them computes on the rest of the
  // device's HardwareSpec::sm_count, at 1 - ep_comm_sms / sm_count of its rate while they run
  // (PipelineProblem::tail_compute_share, ComputeBesideTail). Unused when the hardware's
  // sm_count is unknown (0).
  int64_t ep_comm_sms = kDefaultEpCommSms;
  AttentionKernel attention_kernel = AttentionKernel::kFlash;
  MoeDispatcher moe_dispatcher = MoeDispatcher::kAllToAll;
  // What `recompute = selective` recomputes (ignored under none and full).
  RecomputeModules recompute_modules;
};

struct ModelGraph {
  std::string name;
  std::string source;
  std::vector<Layer> layers;
  TrainingOptions training;
  // `octopipe profile`'s host-speed reference: the probe's seconds at the host speed the layers
  // were measured at (proto/model.proto Model.host_probe_s); 0:
  // none. Must be finite and >= 0.
  double host_probe_s = 0;

  int num_layers() const { return static_cast<int>(layers.size()); }
  // Tokens one micro-batch carries through the LLM (micro_batch_size * seq_len).
  double tokens_per_microbatch() const {
    return static_cast<double>(training.micro_batch_size) * training.seq_len;
  }
};

// Checks the whole graph; errors are kInvalidArgument naming the field path and the value,
// e.g. "layers[3].dims.hidden must be > 0, got 0".
absl::Status Validate(const ModelGraph& model);

}  // namespace octopipe

#endif  // OCTOPIPE_CORE_MODEL_GRAPH_H_
