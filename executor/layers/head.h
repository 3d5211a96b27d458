// Output head: logits = RMSNorm(x) W_out (gain [1, hidden] starts at 1, W_out [hidden, vocab]
// uniform in +-1/sqrt(hidden)), and the mean cross-entropy of the micro-batch's tokens against
// mb.targets, computed with a max-shifted log-softmax. Forward returns that loss as a 1x1
// tensor; B takes the 1x1 gradient of the loss (1/M from the executor) and returns dx; W
// accumulates dW_out and dgain. The last layer of every model; no residual.
#ifndef OCTOPIPE_EXECUTOR_LAYERS_HEAD_H_
#define OCTOPIPE_EXECUTOR_LAYERS_HEAD_H_

#include <vector>

#include "absl/strings/string_view.h"
#include "executor/layer.h"
#include "executor/tensor.h"

namespace octopipe::executor {

class HeadLayer final : public Layer {
 public:
  HeadLayer(const ModelDims& dims, int layer_index);

  absl::string_view kind() const override { return "head"; }
  Tensor Forward(const Tensor& x, const MicroBatch& mb, LayerContext* ctx) const override;
  Tensor BackwardInput(const Tensor& dy, const MicroBatch& mb, LayerContext* ctx) const override;
  void BackwardWeight(const MicroBatch& mb, LayerContext* ctx) override;
  std::vector<Tensor*> params() override { return {&gain_, &w_out_}; }
  std::vector<Tensor*> grads() override { return {&dgain_, &dw_out_}; }

 private:
  Tensor gain_, w_out_;
  Tensor dgain_, dw_out_;
};

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_LAYERS_HEAD_H_
