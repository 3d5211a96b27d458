// Zoo builders. Every number below is read from the model's published configuration (its
// `source` below names it: a config.json, a provider, a paper); the comment next to it names the
// model and field ("llama3_8b.hidden_size"). Where the configuration has null or no field, the
// comment says "assumption" and why.
#include "core/model_zoo.h"

#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"

namespace octopipe {
namespace {

Layer MakeLayer(std::string name, LayerKind kind) {
  Layer l;
  l.name = std::move(name);
  l.kind = kind;
  l.dims.gated = false;  // only SwiGLU MLP layers set it
  return l;
}

Layer Embedding(int64_t hidden, int64_t vocab) {
  Layer l = MakeLayer("embedding", LayerKind::kEmbedding);
  l.dims.hidden = hidden;
  l.dims.vocab = vocab;
  return l;
}

Layer Head(int64_t hidden, int64_t vocab) {
  Layer l = MakeLayer("head", LayerKind::kHead);
  l.dims.hidden = hidden;
  l.dims.vocab = vocab;
  return l;
}

Layer Attention(std::string name, int64_t hidden, int64_t heads, int64_t kv_heads,
                int64_t head_dim = 0) {
  Layer l = MakeLayer(std::move(name), LayerKind::kAttention);
  l.dims.hidden = hidden;
  l.dims.heads = heads;
  l.dims.kv_heads = kv_heads;
  l.dims.head_dim = head_dim;
  return l;
}

Layer Mlp(std::string name, int64_t hidden, int64_t ffn, bool gated) {
  Layer l = MakeLayer(std::move(name), LayerKind::kMlp);
  l.dims.hidden = hidden;
  l.dims.ffn = ffn;
  l.dims.gated = gated;
  return l;
}

Layer Moe(std::string name, int64_t hidden, int64_t experts, int64_t top_k, int64_t moe_ffn,
          int64_t shared_experts) {
  Layer l = MakeLayer(std::move(name), LayerKind::kMoe);
  l.dims.hidden = hidden;
  l.dims.experts = experts;
  l.dims.top_k = top_k;
  l.dims.moe_ffn = moe_ffn;
  l.dims.shared_experts = shared_experts;
  return l;
}

Layer Mamba(std::string name, int64_t hidden, int64_t d_state, int64_t expand, int64_t dt_rank) {
  Layer l = MakeLayer(std::move(name), LayerKind::kMamba);
  l.dims.hidden = hidden;
  l.dims.d_state = d_state;
  l.dims.expand = expand;
  l.dims.dt_rank = dt_rank;
  return l;
}

Layer Mamba2(std::string name, int64_t hidden, int64_t d_state, int64_t expand,
             int64_t ssm_heads, int64_t ssm_groups) {
  Layer l = MakeLayer(std::move(name), LayerKind::kMamba2);
  l.dims.hidden = hidden;
  l.dims.d_state = d_state;
  l.dims.expand = expand;
  l.dims.ssm_heads = ssm_heads;
  l.dims.ssm_groups = ssm_groups;
  return l;
}

std::string Block(int i, absl::string_view what) { return absl::StrCat("L", i, ".", what); }

// ---------------------------------------------------------------------------------------------
// Dense transformers.

// `layers` blocks of GQA attention + SwiGLU MLP.
ModelGraph LlamaLike(int layers, int64_t hidden, int64_t ffn, int64_t heads, int64_t kv_heads,
                     int64_t vocab) {
  ModelGraph m;
  m.layers.push_back(Embedding(hidden, vocab));
  for (int i = 0; i < layers; ++i) {
    m.layers.push_back(Attention(Block(i, "attention"), hidden, heads, kv_heads));
    m.layers.push_back(Mlp(Block(i, "mlp"), hidden, ffn, /*gated=*/true));
  }
  m.layers.push_back(Head(hidden, vocab));
  return m;
}

ModelGraph Llama3_8b() {
  return LlamaLike(/*llama3_8b.num_hidden_layers=*/32, /*hidden_size=*/4096,
                   /*intermediate_size=*/14336, /*num_attention_heads=*/32,
                   /*num_key_value_heads=*/8, /*vocab_size=*/128256);
}

ModelGraph Llama3_70b() {
  return LlamaLike(/*llama3_70b.num_hidden_layers=*/80, /*hidden_size=*/8192,
                   /*intermediate_size=*/28672, /*num_attention_heads=*/64,
                   /*num_key_value_heads=*/8, /*vocab_size=*/128256);
}

// ---------------------------------------------------------------------------------------------
// Mixture of experts.

ModelGraph Mixtral8x7b() {
  const int layers = 32;       // mixtral_8x7b.num_hidden_layers
  const int64_t h = 4096;      // mixtral_8x7b.hidden_size
  const int64_t ffn = 14336;   // mixtral_8x7b.intermediate_size (size of each expert)
  const int64_t heads = 32;    // mixtral_8x7b.num_attention_heads
  const int64_t kv = 8;        // mixtral_8x7b.num_key_value_heads
  const int64_t experts = 8;   // mixtral_8x7b.num_local_experts
  const int64_t top_k = 2;     // mixtral_8x7b.num_experts_per_tok
  const int64_t vocab = 32000; // mixtral_8x7b.vocab_size
  ModelGraph m;
  m.layers.push_back(Embedding(h, vocab));
  for (int i = 0; i < layers; ++i) {
    m.layers.push_back(Attention(Block(i, "attention"), h, heads, kv));
    m.layers.push_back(Moe(Block(i, "moe"), h, experts, top_k, ffn, /*shared_experts=*/0));
  }
  m.layers.push_back(Head(h, vocab));
  return m;
}

ModelGraph DeepSeekV3() {
  const int layers = 61;            // deepseek_v3.num_hidden_layers
  const int64_t h = 7168;           // deepseek_v3.hidden_size
  const int64_t dense_ffn = 18432;  // deepseek_v3.intermediate_size
  const int first_dense = 3;        // deepseek_v3.first_k_dense_replace (moe_layer_freq 1)
  const int64_t experts = 256;      // deepseek_v3.n_routed_experts
  const int64_t shared = 1;         // deepseek_v3.n_shared_experts
  const int64_t top_k = 8;          // deepseek_v3.num_experts_per_tok
  const int64_t moe_ffn = 2048;     // deepseek_v3.moe_intermediate_size
  const int64_t vocab = 129280;     // deepseek_v3.vocab_size
  ModelGraph m;
  m.layers.push_back(Embedding(h, vocab));
  for (int i = 0; i < layers; ++i) {
    Layer mla = MakeLayer(Block(i, "mla_attention"), LayerKind::kMlaAttention);
    mla.dims.hidden = h;
    mla.dims.heads = 128;              // deepseek_v3.num_attention_heads
    mla.dims.q_lora_rank = 1536;       // deepseek_v3.q_lora_rank
    mla.dims.kv_lora_rank = 512;       // deepseek_v3.kv_lora_rank
    mla.dims.qk_nope_head_dim = 128;   // deepseek_v3.qk_nope_head_dim
    mla.dims.qk_rope_head_dim = 64;    // deepseek_v3.qk_rope_head_dim
    mla.dims.v_head_dim = 128;         // deepseek_v3.v_head_dim
    m.layers.push_back(mla);
    if (i < first_dense) {
      m.layers.push_back(Mlp(Block(i, "mlp"), h, dense_ffn, /*gated=*/true));
    } else {
      m.layers.push_back(Moe(Block(i, "moe"), h, experts, top_k, moe_ffn, shared));
      m.layers.back().dims.max_nodes_per_token = 4;  // node-limited routing (report, 2.1.2)
    }
  }
  // deepseek_v3.num_nextn_predict_layers = 1: the multi-token-prediction module is a training
  // add-on, not part of the 671B main model; it is left out.
  m.layers.push_back(Head(h, vocab));
  return m;
}

// ---------------------------------------------------------------------------------------------
// Hybrid SSM models.

struct JambaConfig {
  int layers;
  int64_t hidden, ffn, heads, kv_heads;
  int attn_period, attn_offset, expert_period, expert_offset;
  int64_t experts, top_k, d_state, expand, dt_rank, vocab;
};

// Layer i is attention if i % attn_period == attn_offset, else Mamba-1; its FFN is MoE if
// i % expert_period == expert_offset, else a dense SwiGLU MLP (jamba_v0_1.layer_rule).
ModelGraph Jamba(const JambaConfig& c) {
  ModelGraph m;
  m.layers.push_back(Embedding(c.hidden, c.vocab));
  for (int i = 0; i < c.layers; ++i) {
    if (i % c.attn_period == c.attn_offset) {
      m.layers.push_back(Attention(Block(i, "attention"), c.hidden, c.heads, c.kv_heads));
    } else {
      m.layers.push_back(Mamba(Block(i, "mamba"), c.hidden, c.d_state, c.expand, c.dt_rank));
    }
    if (i % c.expert_period == c.expert_offset) {
      // Jamba's experts are full-size SwiGLU MLPs (intermediate_size each), no shared expert.
      m.layers.push_back(Moe(Block(i, "moe"), c.hidden, c.experts, c.top_k, c.ffn, 0));
    } else {
      m.layers.push_back(Mlp(Block(i, "mlp"), c.hidden, c.ffn, /*gated=*/true));
    }
  }
  m.layers.push_back(Head(c.hidden, c.vocab));
  return m;
}

ModelGraph JambaV0_1() {
  JambaConfig c;
  c.layers = 32;          // jamba_v0_1.num_hidden_layers
  c.hidden = 4096;        // jamba_v0_1.hidden_size
  c.ffn = 14336;          // jamba_v0_1.intermediate_size
  c.heads = 32;           // jamba_v0_1.num_attention_heads
  c.kv_heads = 8;         // jamba_v0_1.num_key_value_heads
  c.attn_period = 8;      // jamba_v0_1.attn_layer_period
  c.attn_offset = 4;      // jamba_v0_1.attn_layer_offset
  c.expert_period = 2;    // jamba_v0_1.expert_layer_period
  c.expert_offset = 1;    // jamba_v0_1.expert_layer_offset
  c.experts = 16;         // jamba_v0_1.num_experts
  c.top_k = 2;            // jamba_v0_1.num_experts_per_tok
  c.d_state = 16;         // jamba_v0_1.mamba_d_state
  c.expand = 2;           // jamba_v0_1.mamba_expand
  c.dt_rank = 256;        // jamba_v0_1.mamba_dt_rank
  c.vocab = 65536;        // jamba_v0_1.vocab_size
  return Jamba(c);
}

ModelGraph Jamba1_5Large() {
  JambaConfig c;
  c.layers = 72;        // jamba_1_5_large.num_hidden_layers
  c.hidden = 8192;      // jamba_1_5_large.hidden_size
  c.heads = 64;         // jamba_1_5_large.num_attention_heads
  c.kv_heads = 8;       // jamba_1_5_large.num_key_value_heads
  // jamba_1_5_large.attn_to_mamba "1:7 (one attention layer per block of 8)": period 8. The
  // offset within the block is not published; assumption: 4, as jamba_v0_1.attn_layer_offset.
  c.attn_period = 8;
  c.attn_offset = 4;
  c.expert_period = 2;  // jamba_1_5_large.expert_layer_period
  c.expert_offset = 1;  // assumption: jamba_v0_1.expert_layer_offset (not published)
  c.experts = 16;       // jamba_1_5_large.num_experts
  c.top_k = 2;          // jamba_1_5_large.num_experts_per_tok
  // jamba_1_5_large.mamba_version 1; the Mamba sizes are not published. Assumption: those of
  // jamba_v0_1 (mamba_d_state 16, mamba_expand 2) and dt_rank = hidden/16 = 512, the rule that
  // jamba_v0_1's mamba_dt_rank 256 = 4096/16 follows.
  c.d_state = 16;
  c.expand = 2;
  c.dt_rank = 512;
  // jamba_1_5_large.intermediate_size is null. Assumption: 24576 (= 3·hidden), the value for
  // which this layout reproduces both published totals, total_params "398B" (398.7e9 here) and
  // active_params "94B" (94.3e9 with 2 of 16 experts active).
  c.ffn = 24576;
  // jamba_1_5_large.vocab_size is null. Assumption: jamba_v0_1.vocab_size 65536.
  c.vocab = 65536;
  return Jamba(c);
}

struct NemotronHConfig {
  const char* pattern;  // hybrid_override_pattern
  int64_t hidden, ffn, heads, kv_heads, head_dim;
  int64_t mamba_heads, mamba_head_dim, d_state, groups, vocab;
};

// One layer per pattern character: M -> Mamba-2, * -> attention, - -> MLP (relu², not gated).
// Layer names carry the pattern index ("L7.attention" is pattern[7], at layers[8] after the
// embedding).
ModelGraph NemotronH(const NemotronHConfig& c) {
  ModelGraph m;
  m.layers.push_back(Embedding(c.hidden, c.vocab));
  const std::string pattern = c.pattern;
  // d_inner = mamba_num_heads · mamba_head_dim = expand · hidden; expand = 2 for all three
  // (nemotron_h_8b.expand; 256·64 = 2·8192 for 47B and 56B).
  const int64_t expand = c.mamba_heads * c.mamba_head_dim / c.hidden;
  for (int i = 0; i < static_cast<int>(pattern.size()); ++i) {
    switch (pattern[i]) {
      case 'M':
        m.layers.push_back(
            Mamba2(Block(i, "mamba2"), c.hidden, c.d_state, expand, c.mamba_heads, c.groups));
        break;
      case '*':
        m.layers.push_back(
            Attention(Block(i, "attention"), c.hidden, c.heads, c.kv_heads, c.head_dim));
        break;
      default:  // '-'
        m.layers.push_back(Mlp(Block(i, "mlp"), c.hidden, c.ffn, /*gated=*/false));
        break;
    }
  }
  m.layers.push_back(Head(c.hidden, c.vocab));
  return m;
}

ModelGraph NemotronH8b() {
  NemotronHConfig c;
  c.pattern = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-";  // nemotron_h_8b
  c.hidden = 4096;        // nemotron_h_8b.hidden_size
  c.ffn = 21504;          // nemotron_h_8b.intermediate_size
  c.heads = 32;           // nemotron_h_8b.num_attention_heads
  c.kv_heads = 8;         // nemotron_h_8b.num_key_value_heads
  c.head_dim = 128;       // nemotron_h_8b.attention_head_dim
  c.mamba_heads = 128;    // nemotron_h_8b.mamba_num_heads
  c.mamba_head_dim = 64;  // nemotron_h_8b.mamba_head_dim
  c.d_state = 128;        // nemotron_h_8b.ssm_state_size
  c.groups = 8;           // nemotron_h_8b.n_groups
  c.vocab = 131072;       // nemotron_h_8b.vocab_size
  return NemotronH(c);
}

ModelGraph NemotronH47b() {
  NemotronHConfig c;
  c.pattern =  // nemotron_h_47b.hybrid_override_pattern
      "M-M-M-M-M-M-M-M-M*-M-M-M-M-M-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-M-M---MM---M-M*-"
      "M-M-M-M-M-";
  c.hidden = 8192;        // nemotron_h_47b.hidden_size
  c.ffn = 30720;          // nemotron_h_47b.intermediate_size
  c.heads = 64;           // nemotron_h_47b.num_attention_heads
  c.kv_heads = 8;         // nemotron_h_47b.num_key_value_heads
  c.head_dim = 128;       // nemotron_h_47b.attention_head_dim
  c.mamba_heads = 256;    // nemotron_h_47b.mamba_num_heads
  c.mamba_head_dim = 64;  // nemotron_h_47b.mamba_head_dim
  c.d_state = 256;        // nemotron_h_47b.ssm_state_size
  c.groups = 8;           // nemotron_h_47b.n_groups
  // nemotron_h_47b.vocab_size is null. Assumption: nemotron_h_8b.vocab_size 131072 (one
  // tokenizer across the Nemotron-H family).
  c.vocab = 131072;
  return NemotronH(c);
}

ModelGraph NemotronH56b() {
  NemotronHConfig c;
  c.pattern =  // nemotron_h_56b.hybrid_override_pattern
      "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-"
      "M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-";
  c.hidden = 8192;        // nemotron_h_56b.hidden_size
  c.ffn = 32768;          // nemotron_h_56b.intermediate_size
  c.heads = 64;           // nemotron_h_56b.num_attention_heads
  c.kv_heads = 8;         // nemotron_h_56b.num_key_value_heads
  c.head_dim = 128;       // nemotron_h_56b.attention_head_dim
  c.mamba_heads = 256;    // nemotron_h_56b.mamba_num_heads
  c.mamba_head_dim = 64;  // nemotron_h_56b.mamba_head_dim
  c.d_state = 256;        // nemotron_h_56b.ssm_state_size
  c.groups = 8;           // nemotron_h_56b.n_groups
  // nemotron_h_56b.vocab_size is null. Assumption: nemotron_h_8b.vocab_size 131072.
  c.vocab = 131072;
  return NemotronH(c);
}

ModelGraph Mamba2_2_7b() {
  const int layers = 64;        // mamba2_2_7b.n_layer
  const int64_t h = 2560;       // mamba2_2_7b.d_model
  const int64_t d_state = 128;  // mamba2_2_7b.d_state
  const int64_t expand = 2;     // mamba2_2_7b.expand
  const int64_t head_dim = 64;  // mamba2_2_7b.headdim
  const int64_t groups = 1;     // mamba2_2_7b.ngroups
  const int64_t vocab = 50277;  // mamba2_2_7b.vocab_size
  ModelGraph m;
  m.layers.push_back(Embedding(h, vocab));
  // A Mamba2 model is a stack of mixers only (no FFN); heads = expand·d_model / headdim = 80.
  for (int i = 0; i < layers; ++i) {
    m.layers.push_back(Mamba2(Block(i, "mamba2"), h, d_state, expand, expand * h / head_dim,
                              groups));
  }
  // The published model ties the head to the embedding; pipeline stages hold a copy at each
  // end (as Megatron-LM does), so the head keeps its own vocab·h parameters here.
  m.layers.push_back(Head(h, vocab));
  return m;
}

// ---------------------------------------------------------------------------------------------
// Vision-language models.
//
// Layout: text embedding, vision tower, projector, LLM blocks, head. The zoo contract puts an
// embedding first; the text-token lookup does not depend on the image, and Megatron-LM's LLaVA
// likewise keeps the language embedding with the vision tower on the first pipeline stage.
// The chain's transfers between vision layers count the image activations only; the text
// embeddings travelling alongside (b·s·h·2 bytes) are not modelled.

Layer VisionBlock(int i, int64_t hidden, int64_t heads, int64_t ffn, int64_t tokens) {
  Layer l = MakeLayer(absl::StrCat("V", i, ".vision_block"), LayerKind::kVisionBlock);
  l.dims.hidden = hidden;
  l.dims.heads = heads;
  l.dims.kv_heads = heads;
  l.dims.ffn = ffn;
  l.dims.tokens = tokens;
  return l;
}

Layer Projector(int64_t in, int64_t ffn, int64_t out, int64_t tokens) {
  Layer l = MakeLayer("projector.mlp", LayerKind::kMlp);
  l.dims.hidden = in;
  l.dims.ffn = ffn;
  l.dims.out_hidden = out;
  l.dims.gated = false;  // GeLU
  l.dims.tokens = tokens;
  return l;
}

ModelGraph Llava1_5_7b() {
  const int vision_layers = 24;    // llava_1_5_7b.vision.num_hidden_layers
  const int64_t vh = 1024;         // llava_1_5_7b.vision.hidden_size
  const int64_t vffn = 4096;       // llava_1_5_7b.vision.intermediate_size
  const int64_t vheads = 16;       // llava_1_5_7b.vision.num_attention_heads
  const int64_t image_tokens = 576;  // llava_1_5_7b.vision.image_tokens
  const int layers = 32;           // llava_1_5_7b.llm.num_hidden_layers
  const int64_t h = 4096;          // llava_1_5_7b.llm.hidden_size
  const int64_t ffn = 11008;       // llava_1_5_7b.llm.intermediate_size
  const int64_t heads = 32;        // llava_1_5_7b.llm.num_attention_heads
  const int64_t kv = 32;           // llava_1_5_7b.llm.num_key_value_heads
  const int64_t vocab = 32064;     // llava_1_5_7b.llm.vocab_size
  ModelGraph m;
  m.layers.push_back(Embedding(h, vocab));
  for (int i = 0; i < vision_layers; ++i) {
    m.layers.push_back(VisionBlock(i, vh, vheads, vffn, image_tokens));
  }
  // llava_1_5_7b.projector "2-layer MLP, gelu": vision width -> LLM width -> LLM width.
  m.layers.push_back(Projector(vh, h, h, image_tokens));
  for (int i = 0; i < layers; ++i) {
    m.layers.push_back(Attention(Block(i, "attention"), h, heads, kv));
    m.layers.push_back(Mlp(Block(i, "mlp"), h, ffn, /*gated=*/true));
  }
  m.layers.push_back(Head(h, vocab));
  return m;
}

ModelGraph Qwen2Vl7b() {
  const int depth = 32;          // qwen2_vl_7b.vision.depth
  const int64_t vh = 1280;       // qwen2_vl_7b.vision.embed_dim
  const int64_t vheads = 16;     // qwen2_vl_7b.vision.num_heads
  const int64_t vffn = 4 * vh;   // qwen2_vl_7b.vision.mlp_ratio 4
  const int64_t patch = 14;      // qwen2_vl_7b.vision.patch_size
  const int64_t merge = 2;       // qwen2_vl_7b.vision.spatial_merge_size
  const int64_t out = 3584;      // qwen2_vl_7b.vision.out_hidden_size
  // Qwen2-VL takes images at their own resolution. Assumption: one 336x336 image per sample,
  // the image size of llava_1_5_7b.vision.image_size, so the two VLMs see the same picture:
  // (336/14)² = 576 patches in the vision tower (one temporal patch for a still image).
  const int64_t image_side = 336;
  const int64_t image_tokens = (image_side / patch) * (image_side / patch);
  const int layers = 28;         // qwen2_vl_7b.llm.num_hidden_layers
  const int64_t h = 3584;        // qwen2_vl_7b.llm.hidden_size
  const int64_t ffn = 18944;     // qwen2_vl_7b.llm.intermediate_size
  const int64_t heads = 28;      // qwen2_vl_7b.llm.num_attention_heads
  const int64_t kv = 4;          // qwen2_vl_7b.llm.num_key_value_heads
  const int64_t vocab = 152064;  // qwen2_vl_7b.llm.vocab_size
  ModelGraph m;
  m.layers.push_back(Embedding(h, vocab));
  for (int i = 0; i < depth; ++i) {
    m.layers.push_back(VisionBlock(i, vh, vheads, vffn, image_tokens));
  }
  // The patch merger concatenates merge² neighbouring patches (width vh·merge²) and maps them
  // through a GeLU MLP of the same width to the LLM width: 576 / 4 = 144 tokens.
  const int64_t merged = vh * merge * merge;
  m.layers.push_back(Projector(merged, merged, out, image_tokens / (merge * merge)));
  for (int i = 0; i < layers; ++i) {
    m.layers.push_back(Attention(Block(i, "attention"), h, heads, kv));
    m.layers.push_back(Mlp(Block(i, "mlp"), h, ffn, /*gated=*/true));
  }
  m.layers.push_back(Head(h, vocab));
  return m;
}

// ---------------------------------------------------------------------------------------------

struct ZooEntry {
  ZooModelInfo info;
  std::function<ModelGraph()> build;
};

const std::vector<ZooEntry>& Entries() {
  static const auto* entries = new std::vector<ZooEntry>{
      {{"jamba-v0.1",
        "AI21 Jamba v0.1 (52B): 32 blocks, Mamba-1 mixers with attention every 8th block "
        "(i % 8 == 4), MoE FFN (16 experts, top-2) on odd blocks, dense SwiGLU MLP on even",
        "huggingface.co/ai21labs/Jamba-v0.1 config.json"},
       JambaV0_1},
      {{"jamba-1.5-large",
        "AI21 Jamba-1.5-Large (398B total, 94B active): 72 blocks, 1 attention : 7 Mamba-1, "
        "MoE (16 experts, top-2) every other block",
        "arXiv 2408.12570 section 2; assumptions: "
        "intermediate_size 24576 (reproduces 398B total and 94B active), vocab 65536, attention "
        "offset 4, expert offset 1 and Mamba d_state 16 / expand 2 as Jamba v0.1, dt_rank h/16"},
       Jamba1_5Large},
      {{"nemotron-h-8b",
        "NVIDIA Nemotron-H 8B: 52 layers from the hybrid pattern (24 Mamba-2, 4 attention, "
        "24 relu² MLP)",
        "NVIDIA-NeMo/Megatron-Bridge nemotronh provider and its HF-config test"},
       NemotronH8b},
      {{"nemotron-h-47b",
        "NVIDIA Nemotron-H 47B: 98 layers from the hybrid pattern (Mamba-2, attention, relu² "
        "MLP)",
        "NVIDIA-NeMo/Megatron-Bridge nemotronh provider; "
        "assumption: vocab 131072 as Nemotron-H 8B"},
       NemotronH47b},
      {{"nemotron-h-56b",
        "NVIDIA Nemotron-H 56B: 118 layers from the hybrid pattern (Mamba-2, attention, relu² "
        "MLP)",
        "NVIDIA-NeMo/Megatron-Bridge nemotronh provider; "
        "assumption: vocab 131072 as Nemotron-H 8B"},
       NemotronH56b},
      {{"deepseek-v3",
        "DeepSeek-V3 (671B): 61 MLA attention layers, dense SwiGLU MLP after layers 0-2, MoE "
        "(256 routed + 1 shared, top-8) after layers 3-60; the MTP module is left out",
        "vLLM DeepseekV3Config defaults; official inference/configs/config_671B.json"},
       DeepSeekV3},
      {{"mixtral-8x7b",
        "Mistral Mixtral 8x7B (46.7B): 32 blocks of GQA attention + MoE (8 experts, top-2)",
        "huggingface.co/mistralai/Mixtral-8x7B-Instruct-v0.1 config.json"},
       Mixtral8x7b},
      {{"llama3-8b", "Meta Llama-3 8B: 32 blocks of GQA attention + SwiGLU MLP",
        "copies of meta-llama/Meta-Llama-3-8B config.json"},
       Llama3_8b},
      {{"llama3-70b", "Meta Llama-3 70B: 80 blocks of GQA attention + SwiGLU MLP",
        "copies of meta-llama/Meta-Llama-3-70B config.json"},
       Llama3_70b},
      {{"llava-1.5-7b",
        "LLaVA-1.5 7B: CLIP ViT-L/14-336 (24 blocks over 576 image tokens), 2-layer GeLU "
        "projector, Vicuna-7B LLM (32 blocks); text embedding first",
        "llava-hf/llava-1.5-7b-hf config.json"},
       Llava1_5_7b},
      {{"qwen2-vl-7b",
        "Qwen2-VL 7B: ViT (32 blocks, width 1280) over 576 patches, 2x2 patch merger to 144 "
        "tokens, Qwen2-7B LLM (28 blocks); text embedding first",
        "Qwen/Qwen2-VL-7B-Instruct config.json snapshots; "
        "assumption: one 336x336 image per sample (LLaVA-1.5's image size)"},
       Qwen2Vl7b},
      {{"mamba2-2.7b", "state-spaces Mamba2 2.7B: 64 Mamba-2 mixers, no FFN",
        "state-spaces/mamba2-2.7b config.json + Mamba2 module defaults"},
       Mamba2_2_7b},
  };
  return *entries;
}

}  // namespace

const std::vector<ZooModelInfo>& ZooCatalog() {
  static const auto* catalog = [] {
    auto* v = new std::vector<ZooModelInfo>;
    for (const ZooEntry& e : Entries()) v->push_back(e.info);
    return v;
  }();
  return *catalog;
}

std::vector<std::string> ZooModelNames() {
  std::vector<std::string> names;
  for (const ZooEntry& e : Entries()) names.push_back(e.info.name);
  return names;
}

absl::StatusOr<ModelGraph> ZooModel(absl::string_view name, const TrainingOptions& training) {
  for (const ZooEntry& e : Entries()) {
    if (e.info.name != name) continue;
    ModelGraph m = e.build();
    m.name = e.info.name;
    m.source = e.info.source;
    m.training = training;
    RETURN_IF_ERROR(Validate(m));
    return m;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown zoo model '", name, "' (valid: ",
                                                 absl::StrJoin(ZooModelNames(), ", "), ")"));
}

}  // namespace octopipe
