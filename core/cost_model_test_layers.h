// Layers, training options, hardware and links that the cost model's tests share (numbers of
// published models: Llama 3 8B, DeepSeek-V3; the H100 preset's links). Test-only.
#ifndef OCTOPIPE_CORE_COST_MODEL_TEST_LAYERS_H_
#define OCTOPIPE_CORE_COST_MODEL_TEST_LAYERS_H_

#include <cstdint>

#include "core/cluster.h"
#include "core/cost_model.h"
#include "core/model_graph.h"

namespace octopipe {
namespace cost_model_test {

// b = 1, s = 4096 unless a test says otherwise.
inline TrainingOptions Training(int64_t seq_len = 4096) {
  TrainingOptions t;
  t.seq_len = seq_len;
  t.micro_batch_size = 1;
  return t;
}

inline HardwareSpec H100() { return HardwareSpec{"H100-SXM", 989e12, 80e9, 3.35e12}; }

inline Layer Llama8bAttention() {
  Layer l;
  l.kind = LayerKind::kAttention;
  l.dims.hidden = 4096;
  l.dims.heads = 32;
  l.dims.kv_heads = 8;
  return l;
}

inline Layer DeepSeekV3Mla() {
  Layer l;
  l.kind = LayerKind::kMlaAttention;
  l.dims.hidden = 7168;
  l.dims.heads = 128;
  l.dims.q_lora_rank = 1536;
  l.dims.kv_lora_rank = 512;
  l.dims.qk_nope_head_dim = 128;
  l.dims.qk_rope_head_dim = 64;
  l.dims.v_head_dim = 128;
  return l;
}

inline Layer Llama8bMlp() {
  Layer l;
  l.kind = LayerKind::kMlp;
  l.dims.hidden = 4096;
  l.dims.ffn = 14336;
  l.dims.gated = true;
  return l;
}

// A MoE layer of `experts` SwiGLU experts of width `moe_ffn`, top_k routed, no shared expert.
inline Layer Moe(int64_t hidden, int64_t moe_ffn, int64_t experts, int64_t top_k) {
  Layer l;
  l.kind = LayerKind::kMoe;
  l.dims.hidden = hidden;
  l.dims.moe_ffn = moe_ffn;
  l.dims.experts = experts;
  l.dims.top_k = top_k;
  return l;
}

// Mixtral 8x7B's: 8 experts of 14336, top-2.
inline Layer MixtralMoe() { return Moe(4096, 14336, 8, 2); }

inline Layer DeepSeekV3Moe() {
  Layer l;
  l.kind = LayerKind::kMoe;
  l.dims.hidden = 7168;
  l.dims.experts = 256;
  l.dims.top_k = 8;
  l.dims.moe_ffn = 2048;
  l.dims.shared_experts = 1;
  return l;
}

// The H100 preset's links: NVLink 450 GB/s per direction and 3 us, InfiniBand NDR 50 GB/s per
// direction and 5 us.
inline const LinkSpec kNvlink{450e9, 3e-6};
inline const LinkSpec kIb{50e9, 5e-6};

}  // namespace cost_model_test
}  // namespace octopipe

#endif  // OCTOPIPE_CORE_COST_MODEL_TEST_LAYERS_H_
