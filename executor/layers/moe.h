// Pre-norm top-k mixture of SwiGLU experts with a residual:
//   y = x + sum over the k chosen experts e of g_e * Expert_e(n),   n = RMSNorm(x),
// router logits l = n W_r (W_r [hidden, experts]); per token the k largest logits are chosen
// (ties go to the lower expert index) and g = softmax over the chosen logits (the full softmax
// renormalised over the top k). The choice is a constant of the backward: gradients reach W_r
// through the gate weights only. Experts are SwiGLU blocks of width moe_ffn, each applied only
// to the tokens routed to it (gathered, in token order). Deterministic.
// Context: saved_index[0] holds the chosen experts, token-major [T * k]; saved_index[1 + e]
// the positions t * k + slot routed to expert e.
// The routing, the gate gradient and the initial weights are free functions too, so that the
// expert-parallel shards (expert_parallel.h) route and start exactly like this layer.
#ifndef OCTOPIPE_EXECUTOR_LAYERS_MOE_H_
#define OCTOPIPE_EXECUTOR_LAYERS_MOE_H_

#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "executor/layer.h"
#include "executor/tensor.h"

namespace octopipe::executor {

// Top-k routing of T tokens by their router logits [T, experts]: choice [T * k] token-major, the
// k largest logits of each token in decreasing order (ties to the lower expert index), and
// gates [T, k] the softmax over the chosen logits.
void MoeRoute(const Tensor& logits, int top_k, std::vector<int32_t>* choice, Tensor* gates);

// The router logits' gradient [T, experts] from the gates' gradient dgates [T, k]: for the
// chosen, dl_j = g_j (dg_j - sum_i g_i dg_i); 0 for the others (the choice is a constant).
Tensor MoeLogitGradient(const Tensor& gates, const Tensor& dgates,
                        const std::vector<int32_t>& choice, int experts);

// The deterministic initial router [hidden, experts] and expert `expert`'s W1, W3
// [hidden, moe_ffn] and W2 [moe_ffn, hidden] of MoE layer `layer_index`; the gain starts at 1.
Tensor InitialMoeRouter(const ModelDims& dims, int layer_index);
void InitMoeExpert(const ModelDims& dims, int layer_index, int expert, Tensor* w1, Tensor* w3,
                   Tensor* w2);

class MoeLayer final : public Layer {
 public:
  // dims must be valid (MakeLayer checks 1 <= top_k <= experts).
  MoeLayer(const ModelDims& dims, int layer_index);

  absl::string_view kind() const override { return "moe"; }
  Tensor Forward(const Tensor& x, const MicroBatch& mb, LayerContext* ctx) const override;
  Tensor BackwardInput(const Tensor& dy, const MicroBatch& mb, LayerContext* ctx) const override;
  void BackwardWeight(const MicroBatch& mb, LayerContext* ctx) override;
  // gain, router, then W1, W3, W2 of expert 0, of expert 1, ...
  std::vector<Tensor*> params() override;
  std::vector<Tensor*> grads() override;

 private:
  int experts_;
  int top_k_;
  Tensor gain_, router_;
  std::vector<Tensor> w1_, w3_, w2_;
  Tensor dgain_, drouter_;
  std::vector<Tensor> dw1_, dw3_, dw2_;
};

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_LAYERS_MOE_H_
