// Small pieces shared by the reference model's layer kernels: scalar activations and the check
// that an op finds in its LayerContext what the previous op of the same micro-batch left.
//
// Calling B before F, or W before B, on a context is a bug in the caller's schedule, not a
// condition to recover from at run time (the Layer methods return tensors, not statuses), so
// CheckContext aborts with a message naming the layer kind and the op.
#ifndef OCTOPIPE_EXECUTOR_LAYERS_COMMON_H_
#define OCTOPIPE_EXECUTOR_LAYERS_COMMON_H_

#include <cmath>
#include <cstddef>

#include "absl/strings/string_view.h"
#include "executor/layer.h"

namespace octopipe::executor {

inline float Sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }
inline float Silu(float v) { return v * Sigmoid(v); }
// d silu(v) / dv = s + v s (1 - s), s = sigmoid(v).
inline float SiluGrad(float v) {
  const float s = Sigmoid(v);
  return s * (1.0f + v * (1.0f - s));
}
// log(1 + e^v) without overflow; its derivative is Sigmoid(v).
inline float Softplus(float v) { return v > 20.0f ? v : std::log1p(std::exp(v)); }

// Aborts unless ctx->saved has exactly `expected` tensors (the layer's slot count after the
// previous op). `op` is "BackwardInput" or "BackwardWeight".
void CheckContext(const LayerContext& ctx, size_t expected, absl::string_view kind,
                  absl::string_view op);

// Aborts with `message` (naming the layer and what is wrong) unless `ok`.
void CheckOrDie(bool ok, absl::string_view message);

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_LAYERS_COMMON_H_
