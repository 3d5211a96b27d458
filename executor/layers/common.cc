#include "executor/layers/common.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"

namespace octopipe::executor {

void CheckOrDie(bool ok, absl::string_view message) {
  if (ok) return;
  std::fprintf(stderr, "octopipe executor: %s\n", std::string(message).c_str());
  std::abort();
}

void CheckContext(const LayerContext& ctx, size_t expected, absl::string_view kind,
                  absl::string_view op) {
  if (ctx.saved.size() == expected) return;
  CheckOrDie(false, absl::StrCat(kind, " layer: ", op, " found ", ctx.saved.size(),
                                 " saved tensors, expected ", expected,
                                 " (F must precede B, and B must precede W, on one context)"));
}

}  // namespace octopipe::executor
