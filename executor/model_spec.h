// The reference model's textual spec, shared by `octopipe train`, `octopipe plan` and tests:
//
//   ref:pattern=M*-E,hidden=32,heads=4,ffn=64,experts=4,top_k=2,moe_ffn=32,state=8,expand=2,
//       seq=16,batch=1,vocab=64,seed=1,microbatches=8
//
// Every key is optional except pattern (letters as in layer.h: M selective scan, * attention,
// - SwiGLU MLP, E MoE); the model is embedding + one layer per letter + head. Also converts
// the spec into the planner's ModelGraph (same layers, same order) so plans made by
// `octopipe plan --model=ref:...` run on it.
#ifndef OCTOPIPE_EXECUTOR_MODEL_SPEC_H_
#define OCTOPIPE_EXECUTOR_MODEL_SPEC_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/model_graph.h"
#include "executor/layer.h"

namespace octopipe::executor {

struct ModelSpec {
  std::string pattern;
  ModelDims dims;
  int microbatches = 8;
  std::vector<std::string> kinds;  // embedding, ..., head
};

// Accepts the text with or without the "ref:" prefix. Errors name the key and value.
absl::StatusOr<ModelSpec> ParseModelSpec(absl::string_view text);

// The planner's view of the same model (kinds mapped to mamba, attention, mlp, moe; dims set
// so the analytic cost model applies; fp32).
ModelGraph ToModelGraph(const ModelSpec& spec);

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_MODEL_SPEC_H_
