// Token embedding: y[t] = table[tokens[t]], table [vocab, hidden] initialised uniform in
// [-1, 1) from (seed, layer index). The first layer of every model: it ignores its input `x`
// and reads the micro-batch's tokens; its B returns an empty tensor (nothing upstream) and
// keeps dy, which W scatter-adds into the table's gradient rows.
#ifndef OCTOPIPE_EXECUTOR_LAYERS_EMBEDDING_H_
#define OCTOPIPE_EXECUTOR_LAYERS_EMBEDDING_H_

#include <vector>

#include "absl/strings/string_view.h"
#include "executor/layer.h"
#include "executor/tensor.h"

namespace octopipe::executor {

class EmbeddingLayer final : public Layer {
 public:
  // dims must be valid (MakeLayer checks them).
  EmbeddingLayer(const ModelDims& dims, int layer_index);

  absl::string_view kind() const override { return "embedding"; }
  Tensor Forward(const Tensor& x, const MicroBatch& mb, LayerContext* ctx) const override;
  Tensor BackwardInput(const Tensor& dy, const MicroBatch& mb, LayerContext* ctx) const override;
  void BackwardWeight(const MicroBatch& mb, LayerContext* ctx) override;
  std::vector<Tensor*> params() override { return {&table_}; }
  std::vector<Tensor*> grads() override { return {&dtable_}; }

 private:
  Tensor table_;  // [vocab, hidden]
  Tensor dtable_;
};

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_LAYERS_EMBEDDING_H_
