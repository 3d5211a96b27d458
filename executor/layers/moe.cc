#include "executor/layers/moe.h"

#include <algorithm>
#include <cmath>

#include "executor/layers/common.h"
#include "executor/layers/init.h"
#include "executor/layers/rmsnorm.h"
#include "executor/layers/swiglu.h"

namespace octopipe::executor {
namespace {
// F: norm state, gate weights [T, k], then per expert e four tensors from kExperts + 4e: the
// SwiGLU's a, c, h and the expert's output rows (needed for the gate gradient).
// B then appends the router's output gradient, dn, and per expert three tensors: the output
// gradient of W2 (dout) and of W1, W3 (da, dc).
enum Slot { kXhat, kInvRms, kNorm, kGates, kExperts };
enum ExpertForward { kA, kC, kH, kOut, kExpertForwardSlots };
enum ExpertBackward { kDout, kDa, kDc, kExpertBackwardSlots };

size_t ForwardSlots(int experts) { return kExperts + size_t{kExpertForwardSlots} * experts; }
size_t DlogitsSlot(int experts) { return ForwardSlots(experts); }
size_t DnSlot(int experts) { return ForwardSlots(experts) + 1; }
size_t ExpertForwardSlot(int e, ExpertForward which) {
  return kExperts + size_t{kExpertForwardSlots} * e + which;
}
size_t ExpertBackwardSlot(int experts, int e, ExpertBackward which) {
  return ForwardSlots(experts) + 2 + size_t{kExpertBackwardSlots} * e + which;
}
size_t AllSlots(int experts) { return ExpertBackwardSlot(experts, experts, kDout); }

// Rows of `src` at the tokens of `positions` (t * k + slot).
Tensor GatherTokens(const Tensor& src, const std::vector<int32_t>& positions, int k) {
  Tensor out(static_cast<Eigen::Index>(positions.size()), src.cols());
  for (size_t i = 0; i < positions.size(); ++i) {
    out.row(static_cast<Eigen::Index>(i)) = src.row(positions[i] / k);
  }
  return out;
}
}  // namespace

void MoeRoute(const Tensor& logits, int top_k, std::vector<int32_t>* choice, Tensor* gates) {
  const Eigen::Index tokens = logits.rows();
  const int experts = static_cast<int>(logits.cols());
  const int k = top_k;
  choice->resize(static_cast<size_t>(tokens) * k);
  gates->resize(tokens, k);
  // Top-k by repeated arg-max over the logits not yet taken; strict '>' keeps the lower index
  // on ties. Gate weights: softmax over the chosen logits (the first chosen is the maximum).
  std::vector<char> taken(experts);
  for (Eigen::Index t = 0; t < tokens; ++t) {
    std::fill(taken.begin(), taken.end(), 0);
    for (int slot = 0; slot < k; ++slot) {
      int best = -1;
      for (int e = 0; e < experts; ++e) {
        if (!taken[e] && (best < 0 || logits(t, e) > logits(t, best))) best = e;
      }
      taken[best] = 1;
      (*choice)[t * k + slot] = best;
    }
    const float max_logit = logits(t, (*choice)[t * k]);
    float sum = 0;
    for (int slot = 0; slot < k; ++slot) {
      (*gates)(t, slot) = std::exp(logits(t, (*choice)[t * k + slot]) - max_logit);
      sum += (*gates)(t, slot);
    }
    gates->row(t) /= sum;
  }
}

Tensor MoeLogitGradient(const Tensor& gates, const Tensor& dgates,
                        const std::vector<int32_t>& choice, int experts) {
  const Eigen::Index tokens = gates.rows();
  const int k = static_cast<int>(gates.cols());
  Tensor dlogits = Tensor::Zero(tokens, experts);
  for (Eigen::Index t = 0; t < tokens; ++t) {
    const float dot = gates.row(t).dot(dgates.row(t));
    for (int slot = 0; slot < k; ++slot) {
      dlogits(t, choice[t * k + slot]) = gates(t, slot) * (dgates(t, slot) - dot);
    }
  }
  return dlogits;
}

Tensor InitialMoeRouter(const ModelDims& dims, int layer_index) {
  Tensor router(dims.hidden, dims.experts);
  const float a_in = 1.0f / std::sqrt(static_cast<float>(dims.hidden));
  InitUniform(dims.seed, layer_index, /*param_index=*/1, a_in, &router);
  return router;
}

void InitMoeExpert(const ModelDims& dims, int layer_index, int expert, Tensor* w1, Tensor* w3,
                   Tensor* w2) {
  const float a_in = 1.0f / std::sqrt(static_cast<float>(dims.hidden));
  const float a_out = 1.0f / std::sqrt(static_cast<float>(dims.moe_ffn));
  w1->resize(dims.hidden, dims.moe_ffn);
  w3->resize(dims.hidden, dims.moe_ffn);
  w2->resize(dims.moe_ffn, dims.hidden);
  InitUniform(dims.seed, layer_index, 2 + 3 * expert, a_in, w1);
  InitUniform(dims.seed, layer_index, 3 + 3 * expert, a_in, w3);
  InitUniform(dims.seed, layer_index, 4 + 3 * expert, a_out, w2);
}

MoeLayer::MoeLayer(const ModelDims& dims, int layer_index)
    : experts_(dims.experts),
      top_k_(dims.top_k),
      gain_(Tensor::Ones(1, dims.hidden)),
      router_(InitialMoeRouter(dims, layer_index)),
      dgain_(Tensor::Zero(1, dims.hidden)),
      drouter_(Tensor::Zero(dims.hidden, dims.experts)) {
  w1_.resize(experts_);
  w3_.resize(experts_);
  w2_.resize(experts_);
  for (int e = 0; e < experts_; ++e) {
    InitMoeExpert(dims, layer_index, e, &w1_[e], &w3_[e], &w2_[e]);
    dw1_.push_back(Tensor::Zero(dims.hidden, dims.moe_ffn));
    dw3_.push_back(Tensor::Zero(dims.hidden, dims.moe_ffn));
    dw2_.push_back(Tensor::Zero(dims.moe_ffn, dims.hidden));
  }
}

std::vector<Tensor*> MoeLayer::params() {
  std::vector<Tensor*> out = {&gain_, &router_};
  for (int e = 0; e < experts_; ++e) {
    out.insert(out.end(), {&w1_[e], &w3_[e], &w2_[e]});
  }
  return out;
}

std::vector<Tensor*> MoeLayer::grads() {
  std::vector<Tensor*> out = {&dgain_, &drouter_};
  for (int e = 0; e < experts_; ++e) {
    out.insert(out.end(), {&dw1_[e], &dw3_[e], &dw2_[e]});
  }
  return out;
}

Tensor MoeLayer::Forward(const Tensor& x, const MicroBatch& /*mb*/, LayerContext* ctx) const {
  const int k = top_k_;
  ctx->Clear();
  ctx->saved.resize(ForwardSlots(experts_));
  std::vector<Tensor>& sv = ctx->saved;
  sv[kNorm] = RmsNormForward(x, gain_, &sv[kXhat], &sv[kInvRms]);
  const Tensor& n = sv[kNorm];
  const Tensor logits = n * router_;

  ctx->saved_index.assign(1 + experts_, {});
  std::vector<int32_t>& choice = ctx->saved_index[0];
  MoeRoute(logits, k, &choice, &sv[kGates]);
  const Tensor& gates = sv[kGates];
  for (size_t p = 0; p < choice.size(); ++p) {
    ctx->saved_index[1 + choice[p]].push_back(static_cast<int32_t>(p));
  }

  Tensor y = x;
  for (int e = 0; e < experts_; ++e) {
    const std::vector<int32_t>& positions = ctx->saved_index[1 + e];
    Tensor& out = sv[ExpertForwardSlot(e, kOut)];
    out = SwiGluForward(GatherTokens(n, positions, k), {w1_[e], w3_[e], w2_[e]},
                        &sv[ExpertForwardSlot(e, kA)], &sv[ExpertForwardSlot(e, kC)],
                        &sv[ExpertForwardSlot(e, kH)]);
    for (size_t i = 0; i < positions.size(); ++i) {
      const int p = positions[i];
      y.row(p / k) += gates(p / k, p % k) * out.row(static_cast<Eigen::Index>(i));
    }
  }
  return y;
}

Tensor MoeLayer::BackwardInput(const Tensor& dy, const MicroBatch& /*mb*/,
                               LayerContext* ctx) const {
  CheckContext(*ctx, ForwardSlots(experts_), kind(), "BackwardInput");
  const int k = top_k_;
  const Eigen::Index tokens = dy.rows();
  ctx->saved.resize(AllSlots(experts_));
  std::vector<Tensor>& sv = ctx->saved;
  const Tensor& gates = sv[kGates];
  Tensor dgates(tokens, k);
  Tensor& dn = sv[DnSlot(experts_)];
  dn = Tensor::Zero(tokens, dy.cols());
  for (int e = 0; e < experts_; ++e) {
    const std::vector<int32_t>& positions = ctx->saved_index[1 + e];
    const Tensor& out = sv[ExpertForwardSlot(e, kOut)];
    Tensor& dout = sv[ExpertBackwardSlot(experts_, e, kDout)];
    dout.resize(out.rows(), out.cols());
    for (size_t i = 0; i < positions.size(); ++i) {
      const int p = positions[i];
      const Eigen::Index row = static_cast<Eigen::Index>(i);
      dgates(p / k, p % k) = dy.row(p / k).dot(out.row(row));
      dout.row(row) = gates(p / k, p % k) * dy.row(p / k);
    }
    const Tensor dn_e = SwiGluBackwardInput(
        dout, {w1_[e], w3_[e], w2_[e]}, sv[ExpertForwardSlot(e, kA)], sv[ExpertForwardSlot(e, kC)],
        &sv[ExpertBackwardSlot(experts_, e, kDa)], &sv[ExpertBackwardSlot(experts_, e, kDc)]);
    for (size_t i = 0; i < positions.size(); ++i) {
      dn.row(positions[i] / k) += dn_e.row(static_cast<Eigen::Index>(i));
    }
  }
  Tensor& dlogits = sv[DlogitsSlot(experts_)];
  dlogits = MoeLogitGradient(gates, dgates, ctx->saved_index[0], experts_);
  dn.noalias() += dlogits * router_.transpose();
  Tensor dx = dy + RmsNormBackwardInput(dn, gain_, sv[kXhat], sv[kInvRms]);
  sv[kInvRms] = Tensor();
  sv[kGates] = Tensor();
  for (int e = 0; e < experts_; ++e) {
    for (ExpertForward which : {kA, kC, kOut}) sv[ExpertForwardSlot(e, which)] = Tensor();
  }
  return dx;
}

void MoeLayer::BackwardWeight(const MicroBatch& /*mb*/, LayerContext* ctx) {
  CheckContext(*ctx, AllSlots(experts_), kind(), "BackwardWeight");
  const std::vector<Tensor>& sv = ctx->saved;
  const Tensor& n = sv[kNorm];
  drouter_.noalias() += n.transpose() * sv[DlogitsSlot(experts_)];
  for (int e = 0; e < experts_; ++e) {
    SwiGluBackwardWeight(GatherTokens(n, ctx->saved_index[1 + e], top_k_),
                         sv[ExpertForwardSlot(e, kH)], sv[ExpertBackwardSlot(experts_, e, kDout)],
                         sv[ExpertBackwardSlot(experts_, e, kDa)],
                         sv[ExpertBackwardSlot(experts_, e, kDc)], &dw1_[e], &dw3_[e], &dw2_[e]);
  }
  RmsNormBackwardWeight(sv[DnSlot(experts_)], sv[kXhat], &dgain_);
}

}  // namespace octopipe::executor
