// Synthetic models: chains of identical layers with given F/B/W times and no memory, for
// schedule experiments and closed-form tests (e.g. the 1F1B bubble (p-1)/(m+p-1)).
//
// Spec: "layers=L,f=F,b=B,w=W" — all four keys, each once, in any order; L an integer >= 1,
// F, B, W seconds >= 0. Every layer is kind `mlp` with measured forward_s = F,
// backward_input_s = B, weight_grad_s = W and activation_bytes = param_bytes = output_bytes = 0,
// so it needs no dimensions. Training options are the defaults of TrainingOptions.
// Pure function; thread-safe.
#ifndef OCTOPIPE_CORE_SYNTHETIC_MODEL_H_
#define OCTOPIPE_CORE_SYNTHETIC_MODEL_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/model_graph.h"

namespace octopipe {

// kInvalidArgument naming the key and value for a malformed, unknown, repeated, missing or
// out-of-range entry, e.g. "synthetic model spec: f=-1: must be >= 0".
absl::StatusOr<ModelGraph> ParseSyntheticModel(absl::string_view spec);

}  // namespace octopipe

#endif  // OCTOPIPE_CORE_SYNTHETIC_MODEL_H_
