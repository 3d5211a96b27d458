// Single-process training of the whole reference model: the ground truth that a pipelined run
// of any plan is compared with (same loss, same gradients).
//
// Layer indices: layer i of the model (0 = embedding, 1.. = the pattern's letters, last = head)
// is built with layer_index i, so parameters match those of a layer built on any rank.
// Accumulation order: every layer's W for micro-batch m runs after that for m - 1, so a
// schedule that also runs each layer's W ops in micro-batch order gets bit-identical gradients;
// any other order agrees to float rounding.
// Not thread-safe; the layers are borrowed, not owned.
#ifndef OCTOPIPE_EXECUTOR_REFERENCE_TRAINER_H_
#define OCTOPIPE_EXECUTOR_REFERENCE_TRAINER_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "executor/layer.h"
#include "executor/optimizer.h"
#include "executor/tensor.h"

namespace octopipe::executor {

// Embedding, one layer per letter of `pattern` (see LayerKindsFromPattern), head; layer i
// built with MakeLayer(kind, dims, i). Errors as LayerKindsFromPattern and MakeLayer.
absl::StatusOr<std::vector<std::unique_ptr<Layer>>> BuildModel(absl::string_view pattern,
                                                               const ModelDims& dims);

struct ReferenceResult {
  double loss = 0;  // mean over the micro-batches of each one's mean cross-entropy
  // grads_per_layer[i][j]: copy of layers[i]->grads()[j] after the iteration.
  std::vector<std::vector<Tensor>> grads_per_layer;
};

// One iteration: zeroes every gradient, then for each micro-batch in order runs F through all
// layers, and B from dloss = 1/M back to the embedding with each layer's W right after its B.
// `layers` must start with an embedding and end with a head (as BuildModel makes them).
// Parameters are not changed; call ApplyAdamW for that.
ReferenceResult RunReferenceIteration(std::vector<std::unique_ptr<Layer>>& layers,
                                      const std::vector<MicroBatch>& mbs);

// One optimizer step over all parameters of `layers` in layer order, params()[j] with
// grads()[j]; null layers are skipped (so a rank can pass the model's layer vector holding
// only its own stages). Use the same AdamW with the same layers on every call.
absl::Status ApplyAdamW(std::vector<std::unique_ptr<Layer>>& layers, AdamW* optimizer);

// AdamW::Reserve for the parameters ApplyAdamW steps, in its order.
void ReserveAdamW(std::vector<std::unique_ptr<Layer>>& layers, AdamW* optimizer);

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_REFERENCE_TRAINER_H_
