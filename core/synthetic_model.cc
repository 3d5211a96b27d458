#include "core/synthetic_model.h"

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/limits.h"
#include "core/status_macros.h"

namespace octopipe {
namespace {

absl::Status SpecError(absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("synthetic model spec: ", what, " (expected layers=L,f=F,b=B,w=W)"));
}

}  // namespace

absl::StatusOr<ModelGraph> ParseSyntheticModel(absl::string_view spec) {
  std::optional<int> layers;
  std::optional<double> f, b, w;
  for (absl::string_view item : absl::StrSplit(spec, ',')) {
    item = absl::StripAsciiWhitespace(item);
    const size_t eq = item.find('=');
    if (eq == absl::string_view::npos) {
      return SpecError(absl::StrCat("'", item, "' is not key=value"));
    }
    const absl::string_view key = absl::StripAsciiWhitespace(item.substr(0, eq));
    const absl::string_view value = absl::StripAsciiWhitespace(item.substr(eq + 1));
    if (key == "layers") {
      if (layers) return SpecError("key 'layers' given twice");
      int n = 0;
      if (!absl::SimpleAtoi(value, &n)) {
        return SpecError(absl::StrCat("layers=", value, ": not an integer"));
      }
      if (n < 1) return SpecError(absl::StrCat("layers=", value, ": must be >= 1"));
      // Before the layers are allocated (layers=2000000000 would exhaust memory).
      RETURN_IF_ERROR(CheckLimit("synthetic model spec: layers", n, SizeLimits().max_layers,
                                 "max_layers"));
      layers = n;
      continue;
    }
    std::optional<double>* slot = key == "f" ? &f : key == "b" ? &b : key == "w" ? &w : nullptr;
    if (slot == nullptr) {
      return SpecError(absl::StrCat("unknown key '", key, "' (valid: layers, f, b, w)"));
    }
    if (slot->has_value()) return SpecError(absl::StrCat("key '", key, "' given twice"));
    double x = 0;
    if (!absl::SimpleAtod(value, &x) || !std::isfinite(x)) {
      return SpecError(absl::StrCat(key, "=", value, ": not a finite number"));
    }
    if (x < 0) return SpecError(absl::StrCat(key, "=", value, ": must be >= 0"));
    *slot = x;
  }
  const std::pair<const char*, bool> required[] = {
      {"layers", layers.has_value()}, {"f", f.has_value()}, {"b", b.has_value()},
      {"w", w.has_value()}};
  for (const auto& [key, present] : required) {
    if (!present) return SpecError(absl::StrCat("missing key '", key, "'"));
  }

  ModelGraph m;
  m.name = "synthetic";
  m.source = absl::StrCat("synthetic: ", spec);
  m.layers.reserve(*layers);
  for (int i = 0; i < *layers; ++i) {
    Layer l;
    l.name = absl::StrCat("L", i, ".synthetic_mlp");
    l.kind = LayerKind::kMlp;
    l.measured.forward_s = *f;
    l.measured.backward_input_s = *b;
    l.measured.weight_grad_s = *w;
    l.measured.activation_bytes = 0;
    l.measured.param_bytes = 0;
    l.measured.output_bytes = 0;
    m.layers.push_back(std::move(l));
  }
  RETURN_IF_ERROR(Validate(m));
  return m;
}

}  // namespace octopipe
