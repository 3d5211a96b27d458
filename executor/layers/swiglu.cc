#include "executor/layers/swiglu.h"

#include "executor/layers/common.h"

namespace octopipe::executor {

Tensor SwiGluForward(const Tensor& n, const SwiGluWeights& w, Tensor* a, Tensor* c, Tensor* h) {
  a->noalias() = n * w.w1;
  c->noalias() = n * w.w3;
  *h = a->unaryExpr([](float v) { return Silu(v); }).array() * c->array();
  Tensor out;
  out.noalias() = *h * w.w2;
  return out;
}

Tensor SwiGluBackwardInput(const Tensor& dout, const SwiGluWeights& w, const Tensor& a,
                           const Tensor& c, Tensor* da, Tensor* dc) {
  Tensor dh;
  dh.noalias() = dout * w.w2.transpose();
  *da = dh.array() * c.array() * a.unaryExpr([](float v) { return SiluGrad(v); }).array();
  *dc = dh.array() * a.unaryExpr([](float v) { return Silu(v); }).array();
  Tensor dn;
  dn.noalias() = *da * w.w1.transpose();
  dn.noalias() += *dc * w.w3.transpose();
  return dn;
}

void SwiGluBackwardWeight(const Tensor& n, const Tensor& h, const Tensor& dout, const Tensor& da,
                          const Tensor& dc, Tensor* dw1, Tensor* dw3, Tensor* dw2) {
  dw1->noalias() += n.transpose() * da;
  dw3->noalias() += n.transpose() * dc;
  dw2->noalias() += h.transpose() * dout;
}

}  // namespace octopipe::executor
