// Pre-norm SwiGLU MLP with a residual: y = x + W2(silu(W1 n) * (W3 n)), n = RMSNorm(x).
// W1, W3 [hidden, ffn] uniform in +-1/sqrt(hidden), W2 [ffn, hidden] in +-1/sqrt(ffn), gain 1.
// B keeps for W each projection's input and output gradient (n with da, dc; h with dy) and
// the norm's (xhat, dn).
#ifndef OCTOPIPE_EXECUTOR_LAYERS_MLP_H_
#define OCTOPIPE_EXECUTOR_LAYERS_MLP_H_

#include <vector>

#include "absl/strings/string_view.h"
#include "executor/layer.h"
#include "executor/tensor.h"

namespace octopipe::executor {

class MlpLayer final : public Layer {
 public:
  MlpLayer(const ModelDims& dims, int layer_index);

  absl::string_view kind() const override { return "mlp"; }
  Tensor Forward(const Tensor& x, const MicroBatch& mb, LayerContext* ctx) const override;
  Tensor BackwardInput(const Tensor& dy, const MicroBatch& mb, LayerContext* ctx) const override;
  void BackwardWeight(const MicroBatch& mb, LayerContext* ctx) override;
  std::vector<Tensor*> params() override { return {&gain_, &w1_, &w3_, &w2_}; }
  std::vector<Tensor*> grads() override { return {&dgain_, &dw1_, &dw3_, &dw2_}; }

 private:
  Tensor gain_, w1_, w3_, w2_;
  Tensor dgain_, dw1_, dw3_, dw2_;
};

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_LAYERS_MLP_H_
