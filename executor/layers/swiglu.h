// SwiGLU feed-forward block, shared by the MLP layer and the MoE experts:
//   a = n W1, c = n W3, h = silu(a) * c, out = h W2     (W1, W3 [H, F], W2 [F, H])
// Split like the layers: the input gradient produces the output gradients of the three
// projections (da, dc, dout); the weight gradients are then the products of each projection's
// input with its output gradient, which is all W needs.
#ifndef OCTOPIPE_EXECUTOR_LAYERS_SWIGLU_H_
#define OCTOPIPE_EXECUTOR_LAYERS_SWIGLU_H_

#include "executor/tensor.h"

namespace octopipe::executor {

struct SwiGluWeights {
  const Tensor& w1;
  const Tensor& w3;
  const Tensor& w2;
};

// n [T, H] -> out [T, H]; writes a and c [T, F] for the backward and h [T, F] for W.
Tensor SwiGluForward(const Tensor& n, const SwiGluWeights& w, Tensor* a, Tensor* c, Tensor* h);

// dout [T, H] -> dn [T, H]; writes da and dc [T, F] (output gradients of W1 and W3).
Tensor SwiGluBackwardInput(const Tensor& dout, const SwiGluWeights& w, const Tensor& a,
                           const Tensor& c, Tensor* da, Tensor* dc);

// dW1 += n^T da, dW3 += n^T dc, dW2 += h^T dout.
void SwiGluBackwardWeight(const Tensor& n, const Tensor& h, const Tensor& dout, const Tensor& da,
                          const Tensor& dc, Tensor* dw1, Tensor* dw3, Tensor* dw2);

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_LAYERS_SWIGLU_H_
