#include "executor/model_spec.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace octopipe::executor {

absl::StatusOr<ModelSpec> ParseModelSpec(absl::string_view text) {
  if (absl::StartsWith(text, "ref:")) text.remove_prefix(4);
  ModelSpec spec;
  ModelDims& d = spec.dims;
  struct IntKey {
    const char* name;
    int* value;
    int min;
  };
  int seed = 1;
  const IntKey keys[] = {
      {"hidden", &d.hidden, 1},   {"heads", &d.heads, 1},       {"ffn", &d.ffn, 1},
      {"experts", &d.experts, 1}, {"top_k", &d.top_k, 1},       {"moe_ffn", &d.moe_ffn, 1},
      {"state", &d.state, 1},     {"expand", &d.expand, 1},     {"seq", &d.seq_len, 1},
      {"batch", &d.batch, 1},     {"vocab", &d.vocab, 2},       {"seed", &seed, 0},
      {"microbatches", &spec.microbatches, 1},
  };
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    const size_t eq = part.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("model spec: expected key=value, got '", part, "'"));
    }
    const absl::string_view key = part.substr(0, eq), value = part.substr(eq + 1);
    if (key == "pattern") {
      spec.pattern = std::string(value);
      continue;
    }
    bool known = false;
    for (const IntKey& k : keys) {
      if (key != k.name) continue;
      known = true;
      if (!absl::SimpleAtoi(value, k.value) || *k.value < k.min) {
        return absl::InvalidArgumentError(absl::StrCat("model spec: ", key, " must be an integer >= ",
                                                       k.min, ", got '", value, "'"));
      }
    }
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat("model spec: unknown key '", key, "'"));
    }
  }
  d.seed = static_cast<uint64_t>(seed);
  if (spec.pattern.empty()) {
    return absl::InvalidArgumentError("model spec: pattern is required (e.g. pattern=M*-E)");
  }
  if (d.hidden % d.heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("model spec: heads (", d.heads,
                                                   ") must divide hidden (", d.hidden, ")"));
  }
  if (d.top_k > d.experts) {
    return absl::InvalidArgumentError(absl::StrCat("model spec: top_k (", d.top_k,
                                                   ") must be <= experts (", d.experts, ")"));
  }
  absl::StatusOr<std::vector<std::string>> kinds = LayerKindsFromPattern(spec.pattern);
  if (!kinds.ok()) return kinds.status();
  spec.kinds = std::move(*kinds);
  return spec;
}

ModelGraph ToModelGraph(const ModelSpec& spec) {
  const ModelDims& d = spec.dims;
  ModelGraph g;
  g.name = absl::StrCat("ref-", spec.pattern);
  g.source = "executor reference model";
  g.training.seq_len = d.seq_len;
  g.training.micro_batch_size = d.batch;
  g.training.num_microbatches = spec.microbatches;
  g.training.precision = Precision::kFp32;
  for (size_t i = 0; i < spec.kinds.size(); ++i) {
    const std::string& k = spec.kinds[i];
    octopipe::Layer l;
    l.name = absl::StrCat("L", i, ".", k);
    l.dims.hidden = d.hidden;
    if (k == "embedding" || k == "head") {
      l.kind = k == "embedding" ? LayerKind::kEmbedding : LayerKind::kHead;
      l.dims.vocab = d.vocab;
    } else if (k == "attention") {
      l.kind = LayerKind::kAttention;
      l.dims.heads = d.heads;
      l.dims.kv_heads = d.heads;
    } else if (k == "mlp") {
      l.kind = LayerKind::kMlp;
      l.dims.ffn = d.ffn;
      l.dims.gated = true;
    } else if (k == "moe") {
      l.kind = LayerKind::kMoe;
      l.dims.experts = d.experts;
      l.dims.top_k = d.top_k;
      l.dims.moe_ffn = d.moe_ffn;
    } else {
      l.kind = LayerKind::kMamba;
      l.dims.d_state = d.state;
      l.dims.expand = d.expand;
    }
    g.layers.push_back(l);
  }
  return g;
}

}  // namespace octopipe::executor
