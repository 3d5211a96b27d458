// Pre-norm causal multi-head self-attention with a residual: y = x + Attn(RMSNorm(x)).
// Q, K, V, O projections [hidden, hidden] (uniform in +-1/sqrt(hidden)), gain starts at 1.
// Each of the micro-batch's `batch` sequences of `seq_len` rows attends only to itself,
// position i to positions <= i, with scores scaled by 1/sqrt(hidden / heads).
// B keeps for W the input of each projection and its output gradient (n with dQ, dK, dV; the
// attention output with dy) and the norm's (xhat, dn); the probabilities are dropped after B.
#ifndef OCTOPIPE_EXECUTOR_LAYERS_ATTENTION_H_
#define OCTOPIPE_EXECUTOR_LAYERS_ATTENTION_H_

#include <vector>

#include "absl/strings/string_view.h"
#include "executor/layer.h"
#include "executor/tensor.h"

namespace octopipe::executor {

// The attention core over the heads in q, k, v ([rows, heads * dh], rows = batch sequences of
// s): out [rows, heads * dh]; probs gets each (sequence, head)'s [s, s] causal softmax at rows
// (sequence * heads + head) * s. Shared by AttentionLayer and its tensor-parallel shard (which
// holds heads / tp of the heads).
void CausalAttentionForward(const Tensor& q, const Tensor& k, const Tensor& v, int heads, int batch,
                            int s, Tensor* probs, Tensor* out);
// d_out [rows, heads * dh] -> dq, dk, dv of the same shape.
void CausalAttentionBackward(const Tensor& d_out, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& probs, int heads, int batch, int s, Tensor* dq,
                             Tensor* dk, Tensor* dv);

class AttentionLayer final : public Layer {
 public:
  // dims must be valid (MakeLayer checks them: hidden % heads == 0).
  AttentionLayer(const ModelDims& dims, int layer_index);

  absl::string_view kind() const override { return "attention"; }
  Tensor Forward(const Tensor& x, const MicroBatch& mb, LayerContext* ctx) const override;
  Tensor BackwardInput(const Tensor& dy, const MicroBatch& mb, LayerContext* ctx) const override;
  void BackwardWeight(const MicroBatch& mb, LayerContext* ctx) override;
  std::vector<Tensor*> params() override { return {&gain_, &wq_, &wk_, &wv_, &wo_}; }
  std::vector<Tensor*> grads() override { return {&dgain_, &dwq_, &dwk_, &dwv_, &dwo_}; }

 private:
  int heads_;
  Tensor gain_, wq_, wk_, wv_, wo_;
  Tensor dgain_, dwq_, dwk_, dwv_, dwo_;
};

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_LAYERS_ATTENTION_H_
