#include "core/profile_importer.h"

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/cost_model.h"
#include "core/file_io.h"
#include "core/status_macros.h"

namespace octopipe {
namespace {

// What one profile letter is: the kind the layer gets and the parts it was timed as.
struct Letter {
  char letter;
  LayerKind kind;
  std::vector<LayerKind> parts;  // in compute order; a single part equals `kind`
};

// Published shape of a profiled model. None of these four models is in the zoo
// (core/model_zoo.h); `source` says where each number comes from.
struct ProfileArch {
  const char* model;  // the profile's "model" field
  const char* source;
  int64_t hidden = 0, vocab = 0;
  int64_t heads = 0, kv_heads = 0, head_dim = 0;  // attention
  int64_t ffn = 0;                                // dense MLP
  bool gated = false;
  int64_t experts = 0, top_k = 0, moe_ffn = 0, shared_experts = 0;    // MoE
  int64_t d_state = 0, expand = 0, ssm_heads = 0, ssm_groups = 0;     // Mamba-2
  std::vector<Letter> letters;
};

const std::vector<ProfileArch>& Archs() {
  static const auto* archs = [] {
    auto* v = new std::vector<ProfileArch>;

    ProfileArch nano;
    nano.model = "nemotron-nano-v2-9B";
    nano.source =
        "dims: NVIDIA-NeMo/Megatron-Bridge nemotron_h_provider.py NemotronNanoModelProvider9Bv2 "
        "(hidden 4480, ffn 15680 relu2, 40 heads, kv_channels 128, 8 query groups, 128 mamba "
        "heads of 80, state 128, 8 groups); assumptions: vocab 131072 as nemotron_h_8b; "
        "Mamba-2 expand 2 (d_inner 8960, not 128x80 = 10240: LayerDims sizes d_inner as "
        "expand x hidden, so Mamba-2 memory is about 12% low)";
    nano.hidden = 4480;
    nano.vocab = 131072;
    nano.heads = 40;
    nano.kv_heads = 8;
    nano.head_dim = 128;
    nano.ffn = 15680;
    nano.gated = false;
    nano.d_state = 128;
    nano.expand = 2;
    nano.ssm_heads = 128;
    nano.ssm_groups = 8;
    nano.letters = {{'M', LayerKind::kMamba2, {LayerKind::kMamba2}},
                    {'-', LayerKind::kMlp, {LayerKind::kMlp}},
                    {'*', LayerKind::kAttention, {LayerKind::kAttention}}};
    v->push_back(nano);

    ProfileArch gpt;
    gpt.model = "gpt-13B";
    gpt.source =
        "dims (assumption; the source names no configuration): GPT-3 13B of Brown et al. 2020 "
        "Table 2.1 - 40 layers as in the profile, 40 heads of 128 so hidden 5120 (the table's "
        "d_model 5140 is not 40 x 128; Megatron-LM uses 5120), 4 x hidden GeLU MLP, GPT-2 BPE "
        "vocab 50257";
    gpt.hidden = 5120;
    gpt.vocab = 50257;
    gpt.heads = 40;
    gpt.kv_heads = 40;
    gpt.ffn = 4 * 5120;
    gpt.gated = false;
    // A 'T' layer is a whole transformer block; its kind is its attention.
    gpt.letters = {{'T', LayerKind::kAttention, {LayerKind::kAttention, LayerKind::kMlp}}};
    v->push_back(gpt);

    ProfileArch oss;
    oss.model = "gpt-oss-20B";
    oss.source =
        "dims: openai/gpt-oss-20b config.json (hidden 2880, 64 heads of 64, 8 kv heads, 32 "
        "experts top-4 of size 2880, vocab 201088); F/S are its two alternating attention "
        "variants (sliding window not modelled)";
    oss.hidden = 2880;
    oss.vocab = 201088;
    oss.heads = 64;
    oss.kv_heads = 8;
    oss.head_dim = 64;
    oss.experts = 32;
    oss.top_k = 4;
    oss.moe_ffn = 2880;
    // 'F' and 'S' are whole attention + MoE blocks; their kind is the attention.
    oss.letters = {{'F', LayerKind::kAttention, {LayerKind::kAttention, LayerKind::kMoe}},
                   {'S', LayerKind::kAttention, {LayerKind::kAttention, LayerKind::kMoe}}};
    v->push_back(oss);

    ProfileArch ds;
    ds.model = "deepseek-16B";
    ds.source =
        "dims (assumption: the profile's deepseek-16B is deepseek-ai/deepseek-moe-16b-base, 28 "
        "layers as in the profile): its config.json (hidden 2048, 16 heads MHA, dense SwiGLU "
        "10944, 64 routed + 2 shared experts of 1408, top-6, vocab 102400); the profile marks "
        "2 dense layers where that config has first_k_dense_replace 1 - the letters are followed";
    ds.hidden = 2048;
    ds.vocab = 102400;
    ds.heads = 16;
    ds.kv_heads = 16;
    ds.ffn = 10944;
    ds.gated = true;
    ds.experts = 64;
    ds.top_k = 6;
    ds.moe_ffn = 1408;
    ds.shared_experts = 2;
    // 'D' and 'M' are whole blocks told apart by their FFN; the kind is the FFN.
    ds.letters = {{'D', LayerKind::kMlp, {LayerKind::kAttention, LayerKind::kMlp}},
                  {'M', LayerKind::kMoe, {LayerKind::kAttention, LayerKind::kMoe}}};
    v->push_back(ds);
    return v;
  }();
  return *archs;
}

Layer LayerOfKind(LayerKind kind, const ProfileArch& a) {
  Layer l;
  l.kind = kind;
  l.dims.gated = false;
  l.dims.hidden = a.hidden;
  switch (kind) {
    case LayerKind::kEmbedding:
    case LayerKind::kHead:
      l.dims.vocab = a.vocab;
      break;
    case LayerKind::kAttention:
      l.dims.heads = a.heads;
      l.dims.kv_heads = a.kv_heads;
      l.dims.head_dim = a.head_dim;
      break;
    case LayerKind::kMlp:
      l.dims.ffn = a.ffn;
      l.dims.gated = a.gated;
      break;
    case LayerKind::kMoe:
      l.dims.experts = a.experts;
      l.dims.top_k = a.top_k;
      l.dims.moe_ffn = a.moe_ffn;
      l.dims.shared_experts = a.shared_experts;
      break;
    case LayerKind::kMamba2:
      l.dims.d_state = a.d_state;
      l.dims.expand = a.expand;
      l.dims.ssm_heads = a.ssm_heads;
      l.dims.ssm_groups = a.ssm_groups;
      break;
    default:
      break;
  }
  return l;
}

absl::Status FieldError(absl::string_view path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("profile: ", path, " ", what));
}

using nlohmann::json;

// The member `key` of `obj` (at JSON path `path`), which must exist and have type `type`.
absl::StatusOr<const json*> Field(const json& obj, absl::string_view path, absl::string_view key,
                                  json::value_t type) {
  const std::string full = path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
  const auto it = obj.find(std::string(key));
  if (it == obj.end()) return FieldError(full, "is missing");
  // Integers and floating-point numbers are both "number".
  const bool is_number_type = type == json::value_t::number_float;
  if (is_number_type ? !it->is_number() : it->type() != type) {
    return FieldError(full, absl::StrCat("must be a ", json(type).type_name(), ", got a ",
                                         it->type_name()));
  }
  return &*it;
}

// The string member `key`, or "" when it is absent or not a string (optional fields).
std::string OptionalString(const json& obj, absl::string_view key) {
  const auto it = obj.find(std::string(key));
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

struct RawLayer {
  char letter = 0;
  bool embedding = false, head = false;
  std::string token;
  double forward_ms = 0, backward_ms = 0;
};

// Step 1: the document as a JSON object. A key repeated within one object is an error (JSON
// leaves its meaning open; nlohmann-json would silently keep the last).
absl::StatusOr<json> ParseDocument(absl::string_view text) {
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  const json::parser_callback_t check_keys = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) open_objects.emplace_back();
    if (event == json::parse_event_t::object_end) open_objects.pop_back();
    if (event == json::parse_event_t::key && duplicate.empty() &&
        !open_objects.back().insert(parsed.get<std::string>()).second) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  json doc;
  try {
    doc = json::parse(text.begin(), text.end(), check_keys);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e999
    return absl::InvalidArgumentError(absl::StrCat("profile: JSON parse error: ", e.what()));
  }
  if (!duplicate.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("profile: JSON parse error: duplicate key '", duplicate, "'"));
  }
  if (!doc.is_object()) return FieldError("(document)", "must be a JSON object");
  return doc;
}

// Step 2: the known architecture named by "model".
absl::StatusOr<const ProfileArch*> FindArch(const json& doc) {
  ASSIGN_OR_RETURN(const json* model_v, Field(doc, "", "model", json::value_t::string));
  const std::string& model = model_v->get_ref<const std::string&>();
  for (const ProfileArch& a : Archs()) {
    if (model == a.model) return &a;
  }
  return FieldError("model", absl::StrCat("'", model, "' has no known architecture (known: ",
                                          absl::StrJoin(KnownProfileModels(), ", "), ")"));
}

// Step 3: "units" (must be ms) and "seq_len" (a positive integer).
absl::StatusOr<int64_t> ReadSeqLen(const json& doc) {
  ASSIGN_OR_RETURN(const json* units, Field(doc, "", "units", json::value_t::string));
  if (units->get_ref<const std::string&>() != "ms") {
    return FieldError("units", absl::StrCat("must be \"ms\", got \"",
                                            units->get_ref<const std::string&>(), "\""));
  }
  ASSIGN_OR_RETURN(const json* seq_v, Field(doc, "", "seq_len", json::value_t::number_float));
  const double seq = seq_v->get<double>();
  if (!(seq >= 1) || seq != std::floor(seq) || seq > 1e12) {
    return FieldError("seq_len", absl::StrCat("must be a positive integer, got ", seq));
  }
  return static_cast<int64_t>(seq);
}

// The letter of `arch` named by a layer's "kind", or an error listing the valid ones.
absl::StatusOr<const Letter*> FindLetter(const ProfileArch& arch, const std::string& kind,
                                         absl::string_view path) {
  for (const Letter& l : arch.letters) {
    if (kind.size() == 1 && kind[0] == l.letter) return &l;
  }
  std::vector<std::string> valid;
  for (const Letter& l : arch.letters) valid.push_back(std::string(1, l.letter));
  return FieldError(absl::StrCat(path, ".kind"),
                    absl::StrCat("'", kind, "' is not a layer letter of ", arch.model,
                                 " (valid: ", absl::StrJoin(valid, ", "), ")"));
}

// Step 4a: one entry of "layers" (index i of n).
absl::StatusOr<RawLayer> ReadLayer(const json& item, size_t i, size_t n,
                                   const ProfileArch& arch) {
  const std::string p = absl::StrCat("layers[", i, "]");
  if (!item.is_object()) return FieldError(p, "must be an object");
  ASSIGN_OR_RETURN(const json* index, Field(item, p, "index", json::value_t::number_float));
  if (index->get<double>() != static_cast<double>(i)) {
    return FieldError(absl::StrCat(p, ".index"), absl::StrCat("must be ", i,
                                                              " (layers in order), got ",
                                                              index->get<double>()));
  }
  ASSIGN_OR_RETURN(const json* kind, Field(item, p, "kind", json::value_t::string));
  ASSIGN_OR_RETURN(const json* emb, Field(item, p, "embedding", json::value_t::boolean));
  ASSIGN_OR_RETURN(const json* head, Field(item, p, "head", json::value_t::boolean));
  ASSIGN_OR_RETURN(const json* fwd, Field(item, p, "forward_ms", json::value_t::number_float));
  ASSIGN_OR_RETURN(const json* bwd, Field(item, p, "backward_ms", json::value_t::number_float));
  const std::string& kind_text = kind->get_ref<const std::string&>();
  ASSIGN_OR_RETURN(const Letter* letter, FindLetter(arch, kind_text, p));
  RawLayer r;
  r.letter = letter->letter;
  r.embedding = emb->get<bool>();
  r.head = head->get<bool>();
  if (r.embedding && i != 0) {
    return FieldError(absl::StrCat(p, ".embedding"), "is true but only layers[0] can hold it");
  }
  if (r.head && i + 1 != n) {
    return FieldError(absl::StrCat(p, ".head"), "is true but only the last layer can hold it");
  }
  r.token = OptionalString(item, "arch_token");
  if (r.token.empty()) {
    r.token = absl::StrCat(kind_text, r.embedding ? "+E" : "", r.head ? "+H" : "");
  }
  r.forward_ms = fwd->get<double>();
  r.backward_ms = bwd->get<double>();
  if (r.forward_ms < 0) {
    return FieldError(absl::StrCat(p, ".forward_ms"),
                      absl::StrCat("must be >= 0, got ", r.forward_ms));
  }
  if (r.backward_ms < 0) {
    return FieldError(absl::StrCat(p, ".backward_ms"),
                      absl::StrCat("must be >= 0, got ", r.backward_ms));
  }
  return r;
}

// Step 4: "layers" (non-empty, matching "num_layers" when given), each read by ReadLayer.
absl::StatusOr<std::vector<RawLayer>> ReadLayers(const json& doc, const ProfileArch& arch) {
  ASSIGN_OR_RETURN(const json* layers_v, Field(doc, "", "layers", json::value_t::array));
  const size_t n = layers_v->size();
  if (n == 0) return FieldError("layers", "must not be empty");
  if (const auto it = doc.find("num_layers"); it != doc.end()) {
    if (!it->is_number() || it->get<double>() != static_cast<double>(n)) {
      return FieldError("num_layers",
                        absl::StrCat("must equal the length of layers (", n, ")"));
    }
  }
  std::vector<RawLayer> raw;
  raw.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    ASSIGN_OR_RETURN(RawLayer r, ReadLayer((*layers_v)[i], i, n, arch));
    raw.push_back(std::move(r));
  }
  return raw;
}

// Step 5 (optional): every plain layer's times become the mean over its letter.
void AveragePlainLayers(std::vector<RawLayer>& raw) {
  std::map<char, std::pair<double, double>> sums;
  std::map<char, int> counts;
  for (const RawLayer& r : raw) {
    if (r.embedding || r.head) continue;
    sums[r.letter].first += r.forward_ms;
    sums[r.letter].second += r.backward_ms;
    ++counts[r.letter];
  }
  for (RawLayer& r : raw) {
    if (r.embedding || r.head) continue;
    r.forward_ms = sums[r.letter].first / counts[r.letter];
    r.backward_ms = sums[r.letter].second / counts[r.letter];
  }
}

// Step 6: the model's provenance line (times source, averaging, split rule, dims source).
std::string Provenance(const json& doc, const ProfileArch& arch, bool averaged) {
  std::string provenance = OptionalString(doc, "source");
  if (const std::string revision = OptionalString(doc, "source_revision"); !revision.empty()) {
    absl::StrAppend(&provenance, " @ ", revision);
  }
  return absl::StrCat("times: ", provenance, averaged ? " (plain layers averaged per kind)" : "",
                      "; B = W = backward/2; ", arch.source);
}

// Step 7: the ModelGraph layer for raw layer i: dims of its kind, measured times, and for
// composite layers the analytic memory of all their parts (see the header).
Layer BuildLayer(const RawLayer& r, size_t i, const ProfileArch& arch,
                 const TrainingOptions& training) {
  const Letter* letter = nullptr;
  for (const Letter& l : arch.letters) {
    if (l.letter == r.letter) letter = &l;
  }
  std::vector<LayerKind> parts;
  if (r.embedding) parts.push_back(LayerKind::kEmbedding);
  parts.insert(parts.end(), letter->parts.begin(), letter->parts.end());
  if (r.head) parts.push_back(LayerKind::kHead);

  Layer layer = LayerOfKind(letter->kind, arch);
  std::vector<std::string> part_names;
  for (LayerKind k : parts) part_names.push_back(std::string(LayerKindName(k)));
  layer.name = absl::StrCat("L", i, ".", absl::StrJoin(part_names, "+"), " (", r.token, ")");
  layer.measured.forward_s = r.forward_ms / 1000.0;
  layer.measured.backward_input_s = r.backward_ms / 2000.0;
  layer.measured.weight_grad_s = r.backward_ms / 2000.0;
  if (parts.size() > 1) {
    const CostModel cost_model;
    const HardwareSpec any_device{"memory-only", 1, 1, 1};  // memory does not depend on it
    // Weights as measured weights are read: the whole layer, every expert (CostModel::Cost
    // takes the experts a rank does not hold off at the plan's EP degree).
    TrainingOptions whole = training;
    whole.ep_degree = 1;
    double activation = 0, params = 0, output = 0;
    for (LayerKind k : parts) {
      const LayerCost c = cost_model.Cost(LayerOfKind(k, arch), training, any_device);
      activation += c.activation_bytes;
      params += cost_model.Cost(LayerOfKind(k, arch), whole, any_device).param_bytes;
      output = c.output_bytes;  // what the last part sends on
    }
    layer.measured.activation_bytes = activation;
    layer.measured.param_bytes = params;
    layer.measured.output_bytes = output;
  }
  return layer;
}

}  // namespace

std::vector<std::string> KnownProfileModels() {
  std::vector<std::string> names;
  for (const ProfileArch& a : Archs()) names.push_back(a.model);
  return names;
}

absl::StatusOr<ModelGraph> ImportProfile(absl::string_view json_text,
                                         const ProfileImportOptions& options) {
  ASSIGN_OR_RETURN(const json doc, ParseDocument(json_text));
  ASSIGN_OR_RETURN(const ProfileArch* arch, FindArch(doc));
  ASSIGN_OR_RETURN(const int64_t seq_len, ReadSeqLen(doc));
  ASSIGN_OR_RETURN(std::vector<RawLayer> raw, ReadLayers(doc, *arch));
  if (options.average_plain_layers) AveragePlainLayers(raw);

  ModelGraph m;
  m.name = absl::StrCat("profile-", arch->model);
  m.source = Provenance(doc, *arch, options.average_plain_layers);
  m.training = options.training;
  m.training.seq_len = seq_len;
  m.training.micro_batch_size = 1;
  for (size_t i = 0; i < raw.size(); ++i) {
    m.layers.push_back(BuildLayer(raw[i], i, *arch, m.training));
  }
  RETURN_IF_ERROR(Validate(m));
  return m;
}

absl::StatusOr<ModelGraph> ImportProfileFile(const std::string& path,
                                             const ProfileImportOptions& options) {
  ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  absl::StatusOr<ModelGraph> m = ImportProfile(text, options);
  if (!m.ok()) {
    return absl::Status(m.status().code(),
                        absl::StrCat("file '", path, "': ", m.status().message()));
  }
  return m;
}

}  // namespace octopipe
