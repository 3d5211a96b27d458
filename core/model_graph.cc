#include "core/model_graph.h"

#include <array>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"

namespace octopipe {
namespace {

constexpr std::array<std::pair<LayerKind, absl::string_view>, kNumLayerKinds> kKindNames = {{
    {LayerKind::kEmbedding, "embedding"},
    {LayerKind::kAttention, "attention"},
    {LayerKind::kMlaAttention, "mla_attention"},
    {LayerKind::kMamba, "mamba"},
    {LayerKind::kMamba2, "mamba2"},
    {LayerKind::kMoe, "moe"},
    {LayerKind::kMlp, "mlp"},
    {LayerKind::kVisionBlock, "vision_block"},
    {LayerKind::kHead, "head"},
}};

absl::Status Positive(const std::string& path, int64_t value) {
  if (value > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(path, " must be > 0, got ", value));
}

// Measured costs must be finite and physical: a per-layer time of zero (free) or between a
// picosecond and a million seconds, a byte count up to a petabyte. Values outside overflow
// the simulator's sums (1e308) or its throughput (1e-300 s per layer) to inf/NaN.
constexpr double kMinSeconds = 1e-12;
constexpr double kMaxSeconds = 1e6;
constexpr double kMaxBytes = 1e15;
// Dimensions beyond 2^31 make no model today and overflow the FLOP/byte products.
constexpr int64_t kMaxDim = int64_t{1} << 31;

absl::Status MeasuredInRange(const std::string& path, double value, bool is_time) {
  const double max = is_time ? kMaxSeconds : kMaxBytes;
  if (!std::isfinite(value) || value < 0 || value > max ||
      (is_time && value > 0 && value < kMinSeconds)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " must be finite and ", is_time ? "0 or in [1e-12, 1e6] s" : "in [0, 1e15] bytes",
        ", got ", value));
  }
  return absl::OkStatus();
}

// The dimension fields each kind needs to be positive.
absl::Status ValidateDims(const std::string& p, LayerKind kind, const LayerDims& d) {
  std::vector<std::pair<const char*, int64_t>> need = {{"hidden", d.hidden}};
  switch (kind) {
    case LayerKind::kEmbedding:
    case LayerKind::kHead:
      need.push_back({"vocab", d.vocab});
      break;
    case LayerKind::kAttention:
      need.push_back({"heads", d.heads});
      need.push_back({"kv_heads", d.kv_heads});
      break;
    case LayerKind::kMlaAttention:
      need.push_back({"heads", d.heads});
      need.push_back({"kv_lora_rank", d.kv_lora_rank});
      need.push_back({"qk_nope_head_dim", d.qk_nope_head_dim});
      need.push_back({"qk_rope_head_dim", d.qk_rope_head_dim});
      need.push_back({"v_head_dim", d.v_head_dim});
      break;
    case LayerKind::kMamba:
      need.push_back({"d_state", d.d_state});
      need.push_back({"expand", d.expand});
      break;
    case LayerKind::kMamba2:
      need.push_back({"d_state", d.d_state});
      need.push_back({"expand", d.expand});
      need.push_back({"ssm_heads", d.ssm_heads});
      need.push_back({"ssm_groups", d.ssm_groups});
      break;
    case LayerKind::kMoe:
      need.push_back({"experts", d.experts});
      need.push_back({"top_k", d.top_k});
      need.push_back({"moe_ffn", d.moe_ffn});
      break;
    case LayerKind::kMlp:
      need.push_back({"ffn", d.ffn});
      break;
    case LayerKind::kVisionBlock:
      need.push_back({"heads", d.heads});
      need.push_back({"ffn", d.ffn});
      break;
  }
  for (const auto& [name, value] : need) {
    absl::Status s = Positive(absl::StrCat(p, ".dims.", name), value);
    if (!s.ok()) return s;
  }
  const std::pair<const char*, int64_t> non_negative[] = {
      {"ffn", d.ffn},         {"heads", d.heads},       {"kv_heads", d.kv_heads},
      {"head_dim", d.head_dim}, {"vocab", d.vocab},     {"experts", d.experts},
      {"top_k", d.top_k},     {"moe_ffn", d.moe_ffn},   {"shared_experts", d.shared_experts},
      {"d_state", d.d_state}, {"expand", d.expand},     {"ssm_heads", d.ssm_heads},
      {"ssm_groups", d.ssm_groups}, {"dt_rank", d.dt_rank}, {"tokens", d.tokens},
      {"out_hidden", d.out_hidden}, {"q_lora_rank", d.q_lora_rank},
      {"max_nodes_per_token", d.max_nodes_per_token},
  };
  for (const auto& [name, value] : non_negative) {
    if (value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(p, ".dims.", name, " must be >= 0, got ", value));
    }
  }
  if (d.hidden > kMaxDim) {
    return absl::InvalidArgumentError(
        absl::StrCat(p, ".dims.hidden must be <= ", kMaxDim, ", got ", d.hidden));
  }
  for (const auto& [name, value] : non_negative) {
    if (value > kMaxDim) {
      return absl::InvalidArgumentError(
          absl::StrCat(p, ".dims.", name, " must be <= ", kMaxDim, ", got ", value));
    }
  }
  if (kind == LayerKind::kMoe && d.top_k > d.experts) {
    return absl::InvalidArgumentError(absl::StrCat(p, ".dims.top_k (", d.top_k,
                                                   ") must be <= experts (", d.experts, ")"));
  }
  if (kind == LayerKind::kAttention && d.heads % d.kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(p, ".dims.kv_heads (", d.kv_heads,
                                                   ") must divide heads (", d.heads, ")"));
  }
  return absl::OkStatus();
}

// The training options: every count positive and small enough for an int, and the EP ranks
// per node within the EP degree.
absl::Status ValidateTraining(const TrainingOptions& t) {
  const std::pair<const char*, int64_t> training_fields[] = {
      {"training.seq_len", t.seq_len},
      {"training.micro_batch_size", t.micro_batch_size},
      {"training.num_microbatches", t.num_microbatches},
      {"training.tp_degree", t.tp_degree},
      {"training.zero_degree", t.zero_degree},
      {"training.ep_degree", t.ep_degree},
  };
  for (const auto& [path, value] : training_fields) {
    absl::Status s = Positive(path, value);
    if (!s.ok()) return s;
    if (value > kMaxDim) {
      // Refused, never truncated: callers keep some of these in an int.
      return absl::InvalidArgumentError(
          absl::StrCat(path, " must be <= ", kMaxDim, ", got ", value));
    }
  }
  if (t.ep_ranks_per_node < 0 || t.ep_ranks_per_node > t.ep_degree) {
    return absl::InvalidArgumentError(
        absl::StrCat("training.ep_ranks_per_node must be in [0, training.ep_degree = ", t.ep_degree,
                     "], got ", t.ep_ranks_per_node));
  }
  if (t.ep_comm_sms < 0 || t.ep_comm_sms > kMaxDim) {
    return absl::InvalidArgumentError(absl::StrCat("training.ep_comm_sms must be in [0, ",
                                                   kMaxDim, "], got ", t.ep_comm_sms));
  }
  return absl::OkStatus();
}

// measured.sharded[k] of `layer` (`q` names it): its degrees, that it is neither the whole
// layer nor a repeat of an earlier entry, and its times.
absl::Status ValidateShardedEntry(const std::string& q, const Layer& layer, size_t k) {
  const MeasuredCosts& m = layer.measured;
  const MeasuredSharded& a = m.sharded[k];
  for (const auto& [name, degree] :
       {std::pair{"tp_degree", a.tp_degree}, std::pair{"ep_degree", a.ep_degree}}) {
    if (degree < 1 || degree > 4096) {
      return absl::InvalidArgumentError(
          absl::StrCat(q, ".", name, " must be in [1, 4096], got ", degree));
    }
  }
  if (a.tp_degree == 1 && a.ep_degree == 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        q, ": tp_degree and ep_degree are both 1 (the whole layer's times are measured.*)"));
  }
  if (a.ep_degree > 1 && layer.kind != LayerKind::kMoe) {
    return absl::InvalidArgumentError(
        absl::StrCat(q, ".ep_degree is ", a.ep_degree, " but the layer is not a MoE layer"));
  }
  for (size_t j = 0; j < k; ++j) {
    if (m.sharded[j].tp_degree == a.tp_degree && m.sharded[j].ep_degree == a.ep_degree) {
      return absl::InvalidArgumentError(absl::StrCat(q, ": TP ", a.tp_degree, " x EP ", a.ep_degree,
                                                     " repeats sharded[", j, "]"));
    }
  }
  const std::pair<const char*, double> times[] = {{"forward_s", a.forward_s},
                                                  {"backward_input_s", a.backward_input_s},
                                                  {"weight_grad_s", a.weight_grad_s},
                                                  {"recompute_s", a.recompute_s}};
  for (const auto& [name, value] : times) {
    if (!(value > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(q, ".", name, " must be > 0, got ", value));
    }
    RETURN_IF_ERROR(MeasuredInRange(absl::StrCat(q, ".", name), value, /*is_time=*/true));
  }
  // The bytes are optional (0: not measured) and, where given, in the measured bytes' range.
  const std::pair<const char*, double> bytes[] = {{"activation_bytes", a.activation_bytes},
                                                  {"activation_bytes_w", a.activation_bytes_w},
                                                  {"param_bytes", a.param_bytes}};
  for (const auto& [name, value] : bytes) {
    if (value == 0) continue;
    RETURN_IF_ERROR(MeasuredInRange(absl::StrCat(q, ".", name), value, /*is_time=*/false));
  }
  return absl::OkStatus();
}

// layers[i]: its measured costs (TP degree, sharded entries, ranges), then its dimensions
// unless it is fully measured.
absl::Status ValidateLayer(const ModelGraph& model, int i) {
  const Layer& layer = model.layers[i];
  const std::string p = absl::StrCat("layers[", i, "]");
  const MeasuredCosts& m = layer.measured;
  struct Field {
    const char* name;
    std::optional<double> value;
    bool is_time;
  };
  const Field measured[] = {
      {"forward_s", m.forward_s, true},         {"backward_input_s", m.backward_input_s, true},
      {"weight_grad_s", m.weight_grad_s, true}, {"activation_bytes", m.activation_bytes, false},
      {"param_bytes", m.param_bytes, false},    {"output_bytes", m.output_bytes, false},
      {"recompute_s", m.recompute_s, true},     {"activation_bytes_w", m.activation_bytes_w, false},
      {"input_bytes", m.input_bytes, false},
  };
  if (m.tp_degree < 1 || m.tp_degree > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat(p, ".measured.tp_degree must be in [1, 4096], got ", m.tp_degree));
  }
  for (size_t k = 0; k < m.sharded.size(); ++k) {
    RETURN_IF_ERROR(ValidateShardedEntry(absl::StrCat(p, ".measured.sharded[", k, "]"), layer, k));
  }
  bool all_time_measured = m.forward_s && m.backward_input_s && m.weight_grad_s;
  for (const Field& f : measured) {
    if (f.value) {
      absl::Status s = MeasuredInRange(absl::StrCat(p, ".measured.", f.name), *f.value, f.is_time);
      if (!s.ok()) return s;
    }
  }
  // A fully measured layer needs no dimensions (profiles and synthetic models carry none).
  if (all_time_measured && m.activation_bytes && m.param_bytes && m.output_bytes) {
    return absl::OkStatus();
  }
  return ValidateDims(p, layer.kind, layer.dims);
}

}  // namespace

absl::string_view LayerKindName(LayerKind kind) {
  return kKindNames[static_cast<int>(kind)].second;
}

absl::StatusOr<LayerKind> ParseLayerKind(absl::string_view name) {
  std::vector<absl::string_view> valid;
  for (const auto& [kind, kind_name] : kKindNames) {
    if (kind_name == name) return kind;
    valid.push_back(kind_name);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown layer kind '", name,
                                                 "' (valid: ", absl::StrJoin(valid, ", "), ")"));
}

absl::string_view PrecisionName(Precision p) {
  switch (p) {
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
    case Precision::kFp32: return "fp32";
    case Precision::kFp8: return "fp8";
  }
  return "?";
}

absl::StatusOr<Precision> ParsePrecision(absl::string_view name) {
  if (name.empty() || name == "bf16") return Precision::kBf16;
  if (name == "fp16") return Precision::kFp16;
  if (name == "fp32") return Precision::kFp32;
  if (name == "fp8") return Precision::kFp8;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown precision '", name, "' (valid: bf16, fp16, fp32, fp8)"));
}

absl::string_view RecomputePolicyName(RecomputePolicy r) {
  switch (r) {
    case RecomputePolicy::kNone: return "none";
    case RecomputePolicy::kSelective: return "selective";
    case RecomputePolicy::kFull: return "full";
  }
  return "?";
}

absl::StatusOr<RecomputePolicy> ParseRecomputePolicy(absl::string_view name) {
  if (name.empty() || name == "none") return RecomputePolicy::kNone;
  if (name == "selective") return RecomputePolicy::kSelective;
  if (name == "full") return RecomputePolicy::kFull;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown recompute policy '", name, "' (valid: none, selective, full)"));
}

absl::string_view AttentionKernelName(AttentionKernel k) {
  switch (k) {
    case AttentionKernel::kFlash: return "flash";
    case AttentionKernel::kMaterialized: return "materialized";
  }
  return "?";
}

absl::StatusOr<AttentionKernel> ParseAttentionKernel(absl::string_view name) {
  if (name.empty() || name == "flash") return AttentionKernel::kFlash;
  if (name == "materialized") return AttentionKernel::kMaterialized;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown attention kernel '", name, "' (valid: flash, materialized)"));
}

absl::string_view MoeDispatcherName(MoeDispatcher d) {
  switch (d) {
    case MoeDispatcher::kAllToAll: return "alltoall";
    case MoeDispatcher::kFlex: return "flex";
  }
  return "?";
}

absl::StatusOr<MoeDispatcher> ParseMoeDispatcher(absl::string_view name) {
  if (name.empty() || name == "alltoall") return MoeDispatcher::kAllToAll;
  if (name == "flex") return MoeDispatcher::kFlex;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown MoE dispatcher '", name, "' (valid: alltoall, flex)"));
}

namespace {
constexpr std::pair<const char*, bool RecomputeModules::*> kRecomputeModules[] = {
    {"core_attn", &RecomputeModules::core_attn},
    {"layernorm", &RecomputeModules::layernorm},
    {"mla_up_proj", &RecomputeModules::mla_up_proj},
    {"moe_act", &RecomputeModules::moe_act},
};
}  // namespace

std::vector<std::string> RecomputeModuleNames(const RecomputeModules& m) {
  std::vector<std::string> out;
  for (const auto& [name, field] : kRecomputeModules) {
    if (m.*field) out.push_back(name);
  }
  return out;
}

absl::StatusOr<RecomputeModules> ParseRecomputeModules(const std::vector<std::string>& names) {
  if (names.empty()) {
    return absl::InvalidArgumentError(
        "an empty list (name at least one of core_attn, layernorm, mla_up_proj, moe_act)");
  }
  RecomputeModules m;
  m.core_attn = false;
  for (const std::string& name : names) {
    bool known = false;
    for (const auto& [module, field] : kRecomputeModules) {
      if (name != module) continue;
      if (m.*field) {
        return absl::InvalidArgumentError(absl::StrCat("'", name, "' named twice"));
      }
      m.*field = known = true;
    }
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown module '", name, "' (valid: core_attn, layernorm, mla_up_proj, moe_act)"));
    }
  }
  return m;
}

absl::Status Validate(const ModelGraph& model) {
  if (model.layers.empty()) {
    return absl::InvalidArgumentError("layers: a model needs at least one layer, got 0");
  }
  if (!(model.host_probe_s >= 0) || !std::isfinite(model.host_probe_s)) {
    return absl::InvalidArgumentError(
        absl::StrCat("host_probe_s must be finite and >= 0, got ", model.host_probe_s));
  }
  RETURN_IF_ERROR(ValidateTraining(model.training));
  for (int i = 0; i < model.num_layers(); ++i) RETURN_IF_ERROR(ValidateLayer(model, i));
  return absl::OkStatus();
}

}  // namespace octopipe
