#include "executor/layers/head.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "executor/layers/common.h"
#include "executor/layers/init.h"
#include "executor/layers/rmsnorm.h"

namespace octopipe::executor {
namespace {
// F: the norm's state, its output (input of W_out) and the softmax probabilities.
// B adds the output gradients of W_out and of the norm; probabilities and 1/rms are dropped.
enum Slot { kXhat, kInvRms, kNorm, kProbs, kForwardSlots, kDlogits = kForwardSlots, kDn, kSlots };
}  // namespace

HeadLayer::HeadLayer(const ModelDims& dims, int layer_index)
    : gain_(Tensor::Ones(1, dims.hidden)),
      w_out_(dims.hidden, dims.vocab),
      dgain_(Tensor::Zero(1, dims.hidden)),
      dw_out_(Tensor::Zero(dims.hidden, dims.vocab)) {
  InitUniform(dims.seed, layer_index, /*param_index=*/1,
              1.0f / std::sqrt(static_cast<float>(dims.hidden)), &w_out_);
}

Tensor HeadLayer::Forward(const Tensor& x, const MicroBatch& mb, LayerContext* ctx) const {
  const int vocab = static_cast<int>(w_out_.cols());
  CheckOrDie(
      mb.targets.size() == static_cast<size_t>(x.rows()),
      absl::StrCat("head layer: ", mb.targets.size(), " targets for ", x.rows(), " token rows"));
  ctx->Clear();
  ctx->saved.resize(kForwardSlots);
  Tensor& n = ctx->saved[kNorm];
  n = RmsNormForward(x, gain_, &ctx->saved[kXhat], &ctx->saved[kInvRms]);
  Tensor& probs = ctx->saved[kProbs];
  probs.noalias() = n * w_out_;  // logits, turned into probabilities in place
  double loss_sum = 0;
  for (Eigen::Index t = 0; t < probs.rows(); ++t) {
    const int32_t target = mb.targets[static_cast<size_t>(t)];
    CheckOrDie(target >= 0 && target < vocab,
               absl::StrCat("head layer: target ", target, " at position ", t,
                            " is outside the vocabulary [0, ", vocab, ")"));
    const float max_logit = probs.row(t).maxCoeff();
    probs.row(t).array() -= max_logit;
    const float target_logit = probs(t, target);
    probs.row(t) = probs.row(t).array().exp().matrix();
    const float sum = probs.row(t).sum();
    probs.row(t) /= sum;
    loss_sum += static_cast<double>(std::log(sum) - target_logit);
  }
  Tensor loss(1, 1);
  loss(0, 0) = static_cast<float>(loss_sum / static_cast<double>(probs.rows()));
  return loss;
}

Tensor HeadLayer::BackwardInput(const Tensor& dy, const MicroBatch& mb, LayerContext* ctx) const {
  CheckContext(*ctx, kForwardSlots, kind(), "BackwardInput");
  ctx->saved.resize(kSlots);
  std::vector<Tensor>& s = ctx->saved;
  // d mean CE / d logits = (p - onehot(target)) / T.
  const float scale = dy(0, 0) / static_cast<float>(s[kProbs].rows());
  Tensor& dlogits = s[kDlogits];
  dlogits = s[kProbs];
  for (Eigen::Index t = 0; t < dlogits.rows(); ++t) {
    dlogits(t, mb.targets[static_cast<size_t>(t)]) -= 1.0f;
  }
  dlogits *= scale;
  s[kDn].noalias() = dlogits * w_out_.transpose();
  Tensor dx = RmsNormBackwardInput(s[kDn], gain_, s[kXhat], s[kInvRms]);
  s[kProbs] = Tensor();
  s[kInvRms] = Tensor();
  return dx;
}

void HeadLayer::BackwardWeight(const MicroBatch& /*mb*/, LayerContext* ctx) {
  CheckContext(*ctx, kSlots, kind(), "BackwardWeight");
  const std::vector<Tensor>& s = ctx->saved;
  dw_out_.noalias() += s[kNorm].transpose() * s[kDlogits];
  RmsNormBackwardWeight(s[kDn], s[kXhat], &dgain_);
}

}  // namespace octopipe::executor
