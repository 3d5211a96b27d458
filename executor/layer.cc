// MakeLayer and LayerKindsFromPattern: the one place that maps kind names and pattern letters to
// the layer implementations in layers/.
#include "executor/layer.h"

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "executor/layers/attention.h"
#include "executor/layers/embedding.h"
#include "executor/layers/head.h"
#include "executor/layers/mamba.h"
#include "executor/layers/mlp.h"
#include "executor/layers/moe.h"

namespace octopipe::executor {
namespace {

absl::Status Positive(const char* field, int value, absl::string_view kind) {
  if (value > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(kind, " layer: dims.", field, " must be > 0, got ", value));
}

// The dims each kind reads, checked before a layer is built so its constructor can rely on them.
absl::Status CheckDims(absl::string_view kind, const ModelDims& d) {
  for (auto [field, value] : {std::pair<const char*, int>{"hidden", d.hidden},
                              {"seq_len", d.seq_len},
                              {"batch", d.batch}}) {
    if (absl::Status s = Positive(field, value, kind); !s.ok()) return s;
  }
  if (kind == "embedding" || kind == "head") return Positive("vocab", d.vocab, kind);
  if (kind == "attention") {
    if (absl::Status s = Positive("heads", d.heads, kind); !s.ok()) return s;
    if (d.hidden % d.heads != 0) {
      return absl::InvalidArgumentError(absl::StrCat("attention layer: dims.hidden (", d.hidden,
                                                     ") must be a multiple of dims.heads (",
                                                     d.heads, ")"));
    }
    return absl::OkStatus();
  }
  if (kind == "mlp") return Positive("ffn", d.ffn, kind);
  if (kind == "moe") {
    if (absl::Status s = Positive("experts", d.experts, kind); !s.ok()) return s;
    if (absl::Status s = Positive("moe_ffn", d.moe_ffn, kind); !s.ok()) return s;
    if (d.top_k < 1 || d.top_k > d.experts) {
      return absl::InvalidArgumentError(
          absl::StrCat("moe layer: dims.top_k must be in [1, ", d.experts, "], got ", d.top_k));
    }
    return absl::OkStatus();
  }
  if (kind == "mamba") {
    if (absl::Status s = Positive("state", d.state, kind); !s.ok()) return s;
    return Positive("expand", d.expand, kind);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Layer>> MakeLayer(absl::string_view kind, const ModelDims& dims,
                                                 int layer_index) {
  if (layer_index < 0) {
    return absl::InvalidArgumentError(absl::StrCat("layer_index must be >= 0, got ", layer_index));
  }
  if (kind != "embedding" && kind != "attention" && kind != "mlp" && kind != "moe" &&
      kind != "mamba" && kind != "head") {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown layer kind \"", kind, "\" (known: embedding, attention, mamba, mlp, moe, head)"));
  }
  if (absl::Status s = CheckDims(kind, dims); !s.ok()) return s;
  if (kind == "embedding") return std::make_unique<EmbeddingLayer>(dims, layer_index);
  if (kind == "attention") return std::make_unique<AttentionLayer>(dims, layer_index);
  if (kind == "mlp") return std::make_unique<MlpLayer>(dims, layer_index);
  if (kind == "moe") return std::make_unique<MoeLayer>(dims, layer_index);
  if (kind == "mamba") return std::make_unique<MambaLayer>(dims, layer_index);
  return std::make_unique<HeadLayer>(dims, layer_index);
}

absl::StatusOr<std::vector<std::string>> LayerKindsFromPattern(absl::string_view pattern) {
  std::vector<std::string> kinds = {"embedding"};
  for (size_t i = 0; i < pattern.size(); ++i) {
    switch (pattern[i]) {
      case 'M':
        kinds.push_back("mamba");
        break;
      case '*':
        kinds.push_back("attention");
        break;
      case '-':
        kinds.push_back("mlp");
        break;
      case 'E':
        kinds.push_back("moe");
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "pattern \"", pattern, "\": unknown letter '", pattern.substr(i, 1), "' at position ",
            i, " (known: M selective scan, * attention, - MLP, E MoE)"));
    }
  }
  kinds.push_back("head");
  return kinds;
}

}  // namespace octopipe::executor
