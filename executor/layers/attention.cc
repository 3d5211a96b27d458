#include "executor/layers/attention.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "executor/layers/common.h"
#include "executor/layers/init.h"
#include "executor/layers/rmsnorm.h"

namespace octopipe::executor {
namespace {
// F: norm state, projections, probabilities (rows (seq * heads + head) * s .. + s, [s, s] each)
// and the attention output (input of W_o). B adds the projections' output gradients, keeps
// dy (output gradient of W_o) and dn, and drops what W does not need.
enum Slot {
  kXhat,
  kInvRms,
  kNorm,
  kQ,
  kK,
  kV,
  kProbs,
  kAttnOut,
  kForwardSlots,
  kDq = kForwardSlots,
  kDk,
  kDv,
  kDy,
  kDn,
  kSlots
};

int SeqLen(const MicroBatch& mb, Eigen::Index rows) {
  CheckOrDie(mb.seq_len > 0 && mb.batch > 0 && rows == Eigen::Index{mb.batch} * mb.seq_len,
             absl::StrCat("attention layer: micro-batch of ", mb.batch, " x ", mb.seq_len,
                          " tokens does not match ", rows, " input rows"));
  return mb.seq_len;
}
}  // namespace

void CausalAttentionForward(const Tensor& q, const Tensor& k, const Tensor& v, int heads, int batch,
                            int s, Tensor* probs, Tensor* out) {
  const int dh = static_cast<int>(q.cols()) / heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  probs->resize(Eigen::Index{batch} * heads * s, s);
  out->resize(q.rows(), q.cols());
  for (int b = 0; b < batch; ++b) {
    for (int hd = 0; hd < heads; ++hd) {
      const Eigen::Index r0 = Eigen::Index{b} * s, c0 = Eigen::Index{hd} * dh;
      auto p = probs->middleRows((Eigen::Index{b} * heads + hd) * s, s);
      p.noalias() = q.block(r0, c0, s, dh) * k.block(r0, c0, s, dh).transpose();
      for (int i = 0; i < s; ++i) {
        const float max_score = p.row(i).head(i + 1).maxCoeff();
        float sum = 0;
        for (int j = 0; j <= i; ++j) {
          p(i, j) = std::exp((p(i, j) - max_score) * scale);
          sum += p(i, j);
        }
        p.row(i).head(i + 1) /= sum;
        p.row(i).tail(s - i - 1).setZero();  // causal mask
      }
      out->block(r0, c0, s, dh).noalias() = p * v.block(r0, c0, s, dh);
    }
  }
}

void CausalAttentionBackward(const Tensor& d_out, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& probs, int heads, int batch, int s, Tensor* dq,
                             Tensor* dk, Tensor* dv) {
  const int dh = static_cast<int>(q.cols()) / heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  for (Tensor* t : {dq, dk, dv}) t->resize(q.rows(), q.cols());
  Tensor dp(s, s);
  for (int b = 0; b < batch; ++b) {
    for (int hd = 0; hd < heads; ++hd) {
      const Eigen::Index r0 = Eigen::Index{b} * s, c0 = Eigen::Index{hd} * dh;
      const auto p = probs.middleRows((Eigen::Index{b} * heads + hd) * s, s);
      const auto d_out_h = d_out.block(r0, c0, s, dh);
      dv->block(r0, c0, s, dh).noalias() = p.transpose() * d_out_h;
      dp.noalias() = d_out_h * v.block(r0, c0, s, dh).transpose();
      // Softmax backward, row by row: dS = P * (dP - sum_j P dP), then the score scale.
      for (int i = 0; i < s; ++i) {
        const float dot = p.row(i).dot(dp.row(i));
        dp.row(i) = (p.row(i).array() * (dp.row(i).array() - dot) * scale).matrix();
      }
      dq->block(r0, c0, s, dh).noalias() = dp * k.block(r0, c0, s, dh);
      dk->block(r0, c0, s, dh).noalias() = dp.transpose() * q.block(r0, c0, s, dh);
    }
  }
}

AttentionLayer::AttentionLayer(const ModelDims& dims, int layer_index) : heads_(dims.heads) {
  const int h = dims.hidden;
  const float a = 1.0f / std::sqrt(static_cast<float>(h));
  gain_ = Tensor::Ones(1, h);
  Tensor* projections[] = {&wq_, &wk_, &wv_, &wo_};
  for (int p = 0; p < 4; ++p) {
    projections[p]->resize(h, h);
    InitUniform(dims.seed, layer_index, /*param_index=*/p + 1, a, projections[p]);
  }
  for (Tensor* g : grads()) *g = Tensor::Zero(g == &dgain_ ? 1 : h, h);
}

Tensor AttentionLayer::Forward(const Tensor& x, const MicroBatch& mb, LayerContext* ctx) const {
  const int s = SeqLen(mb, x.rows());
  ctx->Clear();
  ctx->saved.resize(kForwardSlots);
  std::vector<Tensor>& sv = ctx->saved;
  const Tensor& n = sv[kNorm] = RmsNormForward(x, gain_, &sv[kXhat], &sv[kInvRms]);
  sv[kQ].noalias() = n * wq_;
  sv[kK].noalias() = n * wk_;
  sv[kV].noalias() = n * wv_;
  CausalAttentionForward(sv[kQ], sv[kK], sv[kV], heads_, mb.batch, s, &sv[kProbs], &sv[kAttnOut]);
  Tensor y = x;
  y.noalias() += sv[kAttnOut] * wo_;
  return y;
}

Tensor AttentionLayer::BackwardInput(const Tensor& dy, const MicroBatch& mb,
                                     LayerContext* ctx) const {
  CheckContext(*ctx, kForwardSlots, kind(), "BackwardInput");
  const int s = SeqLen(mb, dy.rows());
  ctx->saved.resize(kSlots);
  std::vector<Tensor>& sv = ctx->saved;
  sv[kDy] = dy;
  Tensor d_out;
  d_out.noalias() = dy * wo_.transpose();
  CausalAttentionBackward(d_out, sv[kQ], sv[kK], sv[kV], sv[kProbs], heads_, mb.batch, s, &sv[kDq],
                          &sv[kDk], &sv[kDv]);
  Tensor& dn = sv[kDn];
  dn.noalias() = sv[kDq] * wq_.transpose();
  dn.noalias() += sv[kDk] * wk_.transpose();
  dn.noalias() += sv[kDv] * wv_.transpose();
  Tensor dx = dy + RmsNormBackwardInput(dn, gain_, sv[kXhat], sv[kInvRms]);
  for (int slot : {kInvRms, kQ, kK, kV, kProbs}) sv[slot] = Tensor();
  return dx;
}

void AttentionLayer::BackwardWeight(const MicroBatch& /*mb*/, LayerContext* ctx) {
  CheckContext(*ctx, kSlots, kind(), "BackwardWeight");
  const std::vector<Tensor>& sv = ctx->saved;
  const auto n_t = sv[kNorm].transpose();
  dwq_.noalias() += n_t * sv[kDq];
  dwk_.noalias() += n_t * sv[kDk];
  dwv_.noalias() += n_t * sv[kDv];
  dwo_.noalias() += sv[kAttnOut].transpose() * sv[kDy];
  RmsNormBackwardWeight(sv[kDn], sv[kXhat], &dgain_);
}

}  // namespace octopipe::executor
