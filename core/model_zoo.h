// Model zoo: ModelGraphs of published heterogeneous and reference LLMs, built from the
// architecture numbers of their published configurations (hard-coded in model_zoo.cc, each with
// a comment naming the source field).
//
// Contract: every zoo model passes Validate(); its first layer is an `embedding` and its last a
// `head`; each transformer block is split into its mixer layer and its FFN layer where the model
// has both ("L7.attention" then "L7.mlp"); layer names say what the layer is. Multimodal models
// put the text embedding first, then the vision tower ("V3.vision_block"), the projector and
// the LLM (see model_zoo.cc for why). Where the published configuration leaves a field null,
// the builder documents the assumption it makes in a comment and in the model's `source`.
//
// Pure functions of their arguments; thread-safe.
#ifndef OCTOPIPE_CORE_MODEL_ZOO_H_
#define OCTOPIPE_CORE_MODEL_ZOO_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/model_graph.h"

namespace octopipe {

struct ZooModelInfo {
  std::string name;         // the name ZooModel accepts, e.g. "llama3-8b"
  std::string description;  // one line: what the model is and how it is laid out
  std::string source;       // where the numbers come from, and any assumption made
};

// The zoo, in a stable order.
const std::vector<ZooModelInfo>& ZooCatalog();

// Names ZooModel accepts, in ZooCatalog order.
std::vector<std::string> ZooModelNames();

// Builds the named model with the given training options (copied into the graph unchanged).
// kInvalidArgument naming the value and listing the valid names for an unknown name, or the
// Validate() error if the training options are out of range.
absl::StatusOr<ModelGraph> ZooModel(absl::string_view name, const TrainingOptions& training);

}  // namespace octopipe

#endif  // OCTOPIPE_CORE_MODEL_ZOO_H_
