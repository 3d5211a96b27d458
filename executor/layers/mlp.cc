#include "executor/layers/mlp.h"

#include <cmath>

#include "executor/layers/common.h"
#include "executor/layers/init.h"
#include "executor/layers/rmsnorm.h"
#include "executor/layers/swiglu.h"

namespace octopipe::executor {
namespace {
enum Slot {
  kXhat,
  kInvRms,
  kNorm,
  kA,
  kC,
  kH,
  kForwardSlots,
  kDy = kForwardSlots,
  kDa,
  kDc,
  kDn,
  kSlots
};
}  // namespace

MlpLayer::MlpLayer(const ModelDims& dims, int layer_index)
    : gain_(Tensor::Ones(1, dims.hidden)),
      w1_(dims.hidden, dims.ffn),
      w3_(dims.hidden, dims.ffn),
      w2_(dims.ffn, dims.hidden),
      dgain_(Tensor::Zero(1, dims.hidden)),
      dw1_(Tensor::Zero(dims.hidden, dims.ffn)),
      dw3_(Tensor::Zero(dims.hidden, dims.ffn)),
      dw2_(Tensor::Zero(dims.ffn, dims.hidden)) {
  const float a_in = 1.0f / std::sqrt(static_cast<float>(dims.hidden));
  const float a_out = 1.0f / std::sqrt(static_cast<float>(dims.ffn));
  InitUniform(dims.seed, layer_index, /*param_index=*/1, a_in, &w1_);
  InitUniform(dims.seed, layer_index, /*param_index=*/2, a_in, &w3_);
  InitUniform(dims.seed, layer_index, /*param_index=*/3, a_out, &w2_);
}

Tensor MlpLayer::Forward(const Tensor& x, const MicroBatch& /*mb*/, LayerContext* ctx) const {
  ctx->Clear();
  ctx->saved.resize(kForwardSlots);
  std::vector<Tensor>& sv = ctx->saved;
  sv[kNorm] = RmsNormForward(x, gain_, &sv[kXhat], &sv[kInvRms]);
  return x + SwiGluForward(sv[kNorm], {w1_, w3_, w2_}, &sv[kA], &sv[kC], &sv[kH]);
}

Tensor MlpLayer::BackwardInput(const Tensor& dy, const MicroBatch& /*mb*/,
                               LayerContext* ctx) const {
  CheckContext(*ctx, kForwardSlots, kind(), "BackwardInput");
  ctx->saved.resize(kSlots);
  std::vector<Tensor>& sv = ctx->saved;
  sv[kDy] = dy;
  sv[kDn] = SwiGluBackwardInput(dy, {w1_, w3_, w2_}, sv[kA], sv[kC], &sv[kDa], &sv[kDc]);
  Tensor dx = dy + RmsNormBackwardInput(sv[kDn], gain_, sv[kXhat], sv[kInvRms]);
  for (int slot : {kInvRms, kA, kC}) sv[slot] = Tensor();
  return dx;
}

void MlpLayer::BackwardWeight(const MicroBatch& /*mb*/, LayerContext* ctx) {
  CheckContext(*ctx, kSlots, kind(), "BackwardWeight");
  const std::vector<Tensor>& sv = ctx->saved;
  SwiGluBackwardWeight(sv[kNorm], sv[kH], sv[kDy], sv[kDa], sv[kDc], &dw1_, &dw3_, &dw2_);
  RmsNormBackwardWeight(sv[kDn], sv[kXhat], &dgain_);
}

}  // namespace octopipe::executor
