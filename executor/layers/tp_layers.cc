#include "executor/layers/tp_layers.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "executor/layers/attention.h"
#include "executor/layers/common.h"
#include "executor/layers/mamba.h"
#include "executor/layers/rmsnorm.h"
#include "executor/layers/swiglu.h"

namespace octopipe::executor {
namespace {

void CheckSequences(const MicroBatch& mb, Eigen::Index rows, absl::string_view kind) {
  CheckOrDie(mb.seq_len > 0 && mb.batch > 0 && rows == Eigen::Index{mb.batch} * mb.seq_len,
             absl::StrCat(kind, " layer shard: micro-batch of ", mb.batch, " x ", mb.seq_len,
                          " tokens does not match ", rows, " input rows"));
}

// Sets each gradient accumulator to zeros of its parameter's shape.
void ZerosLike(const std::vector<Tensor*>& params, const std::vector<Tensor*>& grads) {
  for (size_t i = 0; i < params.size(); ++i) {
    *grads[i] = Tensor::Zero(params[i]->rows(), params[i]->cols());
  }
}

// Moves `shard` into the layer's parameters (same count; shapes checked by the caller).
void Assign(std::vector<Tensor> shard, const std::vector<Tensor*>& params, absl::string_view kind) {
  CheckOrDie(shard.size() == params.size(),
             absl::StrCat(kind, " layer shard: built from ", shard.size(), " tensors, expected ",
                          params.size()));
  for (size_t i = 0; i < params.size(); ++i) *params[i] = std::move(shard[i]);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Attention.

namespace {
// F: norm state, this member's Q, K, V heads, probabilities and attention output (input of its
// W_o rows). B adds the projections' output gradients, dy (W_o's) and the all-reduced dn.
enum AttentionSlot {
  kAttXhat,
  kAttInvRms,
  kAttNorm,
  kAttQ,
  kAttK,
  kAttV,
  kAttProbs,
  kAttOut,
  kAttForwardSlots,
  kAttDq = kAttForwardSlots,
  kAttDk,
  kAttDv,
  kAttDy,
  kAttDn,
  kAttSlots
};
}  // namespace

TpAttentionLayer::TpAttentionLayer(const ModelDims& dims, std::vector<Tensor> shard, Collective* tp)
    : heads_(dims.heads / tp->size()), comm_(tp) {
  Assign(std::move(shard), params(), kind());
  ZerosLike(params(), grads());
}

Tensor TpAttentionLayer::Forward(const Tensor& x, const MicroBatch& mb, LayerContext* ctx) const {
  CheckSequences(mb, x.rows(), kind());
  ctx->Clear();
  ctx->saved.resize(kAttForwardSlots);
  std::vector<Tensor>& sv = ctx->saved;
  const Tensor& n = sv[kAttNorm] = RmsNormForward(x, gain_, &sv[kAttXhat], &sv[kAttInvRms]);
  sv[kAttQ].noalias() = n * wq_;
  sv[kAttK].noalias() = n * wk_;
  sv[kAttV].noalias() = n * wv_;
  CausalAttentionForward(sv[kAttQ], sv[kAttK], sv[kAttV], heads_, mb.batch, mb.seq_len,
                         &sv[kAttProbs], &sv[kAttOut]);
  Tensor partial;
  partial.noalias() = sv[kAttOut] * wo_;  // row-parallel: this member's heads' part
  comm_.AllReduceSum(&partial);
  return x + partial;
}

Tensor TpAttentionLayer::BackwardInput(const Tensor& dy, const MicroBatch& mb,
                                       LayerContext* ctx) const {
  CheckContext(*ctx, kAttForwardSlots, kind(), "BackwardInput");
  CheckSequences(mb, dy.rows(), kind());
  ctx->saved.resize(kAttSlots);
  std::vector<Tensor>& sv = ctx->saved;
  sv[kAttDy] = dy;
  Tensor d_out;
  d_out.noalias() = dy * wo_.transpose();
  CausalAttentionBackward(d_out, sv[kAttQ], sv[kAttK], sv[kAttV], sv[kAttProbs], heads_, mb.batch,
                          mb.seq_len, &sv[kAttDq], &sv[kAttDk], &sv[kAttDv]);
  Tensor& dn = sv[kAttDn];
  dn.noalias() = sv[kAttDq] * wq_.transpose();
  dn.noalias() += sv[kAttDk] * wk_.transpose();
  dn.noalias() += sv[kAttDv] * wv_.transpose();
  comm_.AllReduceSum(&dn);  // column-parallel input: sum the heads' parts before the norm
  Tensor dx = dy + RmsNormBackwardInput(dn, gain_, sv[kAttXhat], sv[kAttInvRms]);
  for (int slot : {kAttInvRms, kAttQ, kAttK, kAttV, kAttProbs}) sv[slot] = Tensor();
  return dx;
}

void TpAttentionLayer::BackwardWeight(const MicroBatch& /*mb*/, LayerContext* ctx) {
  CheckContext(*ctx, kAttSlots, kind(), "BackwardWeight");
  const std::vector<Tensor>& sv = ctx->saved;
  const auto n_t = sv[kAttNorm].transpose();
  dwq_.noalias() += n_t * sv[kAttDq];
  dwk_.noalias() += n_t * sv[kAttDk];
  dwv_.noalias() += n_t * sv[kAttDv];
  dwo_.noalias() += sv[kAttOut].transpose() * sv[kAttDy];
  RmsNormBackwardWeight(sv[kAttDn], sv[kAttXhat], &dgain_);
}

// ---------------------------------------------------------------------------------------------
// MLP.

namespace {
enum MlpSlot {
  kMlpXhat,
  kMlpInvRms,
  kMlpNorm,
  kMlpA,
  kMlpC,
  kMlpH,
  kMlpForwardSlots,
  kMlpDy = kMlpForwardSlots,
  kMlpDa,
  kMlpDc,
  kMlpDn,
  kMlpSlots
};
}  // namespace

TpMlpLayer::TpMlpLayer(const ModelDims& /*dims*/, std::vector<Tensor> shard, Collective* tp)
    : comm_(tp) {
  Assign(std::move(shard), params(), kind());
  ZerosLike(params(), grads());
}

Tensor TpMlpLayer::Forward(const Tensor& x, const MicroBatch& /*mb*/, LayerContext* ctx) const {
  ctx->Clear();
  ctx->saved.resize(kMlpForwardSlots);
  std::vector<Tensor>& sv = ctx->saved;
  sv[kMlpNorm] = RmsNormForward(x, gain_, &sv[kMlpXhat], &sv[kMlpInvRms]);
  Tensor partial = SwiGluForward(sv[kMlpNorm], {w1_, w3_, w2_}, &sv[kMlpA], &sv[kMlpC], &sv[kMlpH]);
  comm_.AllReduceSum(&partial);
  return x + partial;
}

Tensor TpMlpLayer::BackwardInput(const Tensor& dy, const MicroBatch& /*mb*/,
                                 LayerContext* ctx) const {
  CheckContext(*ctx, kMlpForwardSlots, kind(), "BackwardInput");
  ctx->saved.resize(kMlpSlots);
  std::vector<Tensor>& sv = ctx->saved;
  sv[kMlpDy] = dy;
  Tensor& dn = sv[kMlpDn] =
      SwiGluBackwardInput(dy, {w1_, w3_, w2_}, sv[kMlpA], sv[kMlpC], &sv[kMlpDa], &sv[kMlpDc]);
  comm_.AllReduceSum(&dn);
  Tensor dx = dy + RmsNormBackwardInput(dn, gain_, sv[kMlpXhat], sv[kMlpInvRms]);
  for (int slot : {kMlpInvRms, kMlpA, kMlpC}) sv[slot] = Tensor();
  return dx;
}

void TpMlpLayer::BackwardWeight(const MicroBatch& /*mb*/, LayerContext* ctx) {
  CheckContext(*ctx, kMlpSlots, kind(), "BackwardWeight");
  const std::vector<Tensor>& sv = ctx->saved;
  SwiGluBackwardWeight(sv[kMlpNorm], sv[kMlpH], sv[kMlpDy], sv[kMlpDa], sv[kMlpDc], &dw1_, &dw3_,
                       &dw2_);
  RmsNormBackwardWeight(sv[kMlpDn], sv[kMlpXhat], &dgain_);
}

// ---------------------------------------------------------------------------------------------
// Mamba.

namespace {
// F: norm state, this member's u and z channels, its step pre-activation and delta, the whole
// B_t and C_t, its states and scan output, and g = y * silu(z). B appends the output gradients
// W needs: dy, dys = dL/dy, the whole dpre [T, d] (W_dt's rows need every output channel), the
// whole dB and dC, dxz (W_in's), dA_log and the all-reduced dn.
enum MambaSlot {
  kMbXhat,
  kMbInvRms,
  kMbNorm,
  kMbU,
  kMbZ,
  kMbPre,
  kMbDelta,
  kMbBm,
  kMbCm,
  kMbStates,
  kMbY,
  kMbG,
  kMbForwardSlots,
  kMbDy = kMbForwardSlots,
  kMbDys,
  kMbDpre,
  kMbDbm,
  kMbDcm,
  kMbDxz,
  kMbDalog,
  kMbDn,
  kMbSlots
};
}  // namespace

TpMambaLayer::TpMambaLayer(const ModelDims& dims, std::vector<Tensor> shard, Collective* tp)
    : inner_(dims.expand * dims.hidden),
      channels_(inner_ / tp->size()),
      first_(tp->rank() * channels_),
      state_(dims.state),
      comm_(tp) {
  Assign(std::move(shard), params(), kind());
  ZerosLike(params(), grads());
}

Tensor TpMambaLayer::Forward(const Tensor& x, const MicroBatch& mb, LayerContext* ctx) const {
  CheckSequences(mb, x.rows(), kind());
  const int d = inner_, c = channels_, n = state_;
  ctx->Clear();
  ctx->saved.resize(kMbForwardSlots);
  std::vector<Tensor>& sv = ctx->saved;
  sv[kMbNorm] = RmsNormForward(x, gain_, &sv[kMbXhat], &sv[kMbInvRms]);
  const Tensor uz = sv[kMbNorm] * w_in_;
  const Tensor& u = sv[kMbU] = uz.leftCols(c);
  sv[kMbZ] = uz.rightCols(c);
  // The projections that mix channels, row-parallel: this member's channels' part of
  // [u W_dt | u W_B | u W_C], summed over the group in one all-reduce.
  Tensor mixed(x.rows(), d + 2 * n);
  mixed.leftCols(d).noalias() = u * w_dt_;
  mixed.middleCols(d, n).noalias() = u * w_b_;
  mixed.rightCols(n).noalias() = u * w_c_;
  comm_.AllReduceSum(&mixed);
  Tensor& pre = sv[kMbPre] = mixed.middleCols(first_, c);
  pre.rowwise() += b_dt_.row(0);
  sv[kMbDelta] = pre.unaryExpr([](float v) { return Softplus(v); });
  sv[kMbBm] = mixed.middleCols(d, n);
  sv[kMbCm] = mixed.rightCols(n);
  const Tensor a = -a_log_.array().exp().matrix();
  ScanForward({u, sv[kMbDelta], sv[kMbBm], sv[kMbCm], a, d_skip_}, mb.batch, mb.seq_len,
              &sv[kMbStates], &sv[kMbY]);
  sv[kMbG] = sv[kMbY].array() * sv[kMbZ].unaryExpr([](float v) { return Silu(v); }).array();
  Tensor partial;
  partial.noalias() = sv[kMbG] * w_out_;  // row-parallel
  comm_.AllReduceSum(&partial);
  return x + partial;
}

Tensor TpMambaLayer::BackwardInput(const Tensor& dy, const MicroBatch& mb,
                                   LayerContext* ctx) const {
  CheckContext(*ctx, kMbForwardSlots, kind(), "BackwardInput");
  CheckSequences(mb, dy.rows(), kind());
  const int d = inner_, c = channels_, n = state_;
  ctx->saved.resize(kMbSlots);
  std::vector<Tensor>& sv = ctx->saved;
  const Tensor &u = sv[kMbU], &z = sv[kMbZ];
  sv[kMbDy] = dy;
  Tensor dg;
  dg.noalias() = dy * w_out_.transpose();
  const Tensor& dys = sv[kMbDys] =
      dg.array() * z.unaryExpr([](float v) { return Silu(v); }).array();
  const Tensor dz =
      dg.array() * sv[kMbY].array() * z.unaryExpr([](float v) { return SiluGrad(v); }).array();
  const Tensor a = -a_log_.array().exp().matrix();
  Tensor du, ddelta, dbm, dcm;
  ScanBackward({u, sv[kMbDelta], sv[kMbBm], sv[kMbCm], a, d_skip_}, sv[kMbStates], dys, mb.batch,
               mb.seq_len, &du, &ddelta, &dbm, &dcm, &sv[kMbDalog]);
  // One all-reduce: dpre's channels (zero outside this member's: an exact all-gather) and the
  // partial sums of dB and dC over the members' channels.
  Tensor mixed = Tensor::Zero(dy.rows(), d + 2 * n);
  mixed.middleCols(first_, c) =
      ddelta.array() * sv[kMbPre].unaryExpr([](float v) { return Sigmoid(v); }).array();
  mixed.middleCols(d, n) = dbm;
  mixed.rightCols(n) = dcm;
  comm_.AllReduceSum(&mixed);
  const Tensor& dpre = sv[kMbDpre] = mixed.leftCols(d);
  const Tensor& dbm_all = sv[kMbDbm] = mixed.middleCols(d, n);
  const Tensor& dcm_all = sv[kMbDcm] = mixed.rightCols(n);
  du.noalias() += dpre * w_dt_.transpose();
  du.noalias() += dbm_all * w_b_.transpose();
  du.noalias() += dcm_all * w_c_.transpose();
  Tensor& dxz = sv[kMbDxz];
  dxz.resize(dy.rows(), 2 * c);
  dxz.leftCols(c) = du;
  dxz.rightCols(c) = dz;
  Tensor& dn = sv[kMbDn];
  dn.noalias() = dxz * w_in_.transpose();
  comm_.AllReduceSum(&dn);
  Tensor dx = dy + RmsNormBackwardInput(dn, gain_, sv[kMbXhat], sv[kMbInvRms]);
  for (int slot : {kMbInvRms, kMbZ, kMbPre, kMbDelta, kMbBm, kMbCm, kMbStates, kMbY}) {
    sv[slot] = Tensor();
  }
  return dx;
}

void TpMambaLayer::BackwardWeight(const MicroBatch& /*mb*/, LayerContext* ctx) {
  CheckContext(*ctx, kMbSlots, kind(), "BackwardWeight");
  const std::vector<Tensor>& sv = ctx->saved;
  const Tensor& u = sv[kMbU];
  dw_out_.noalias() += sv[kMbG].transpose() * sv[kMbDy];
  dd_skip_ += (sv[kMbDys].array() * u.array()).colwise().sum().matrix();
  dw_dt_.noalias() += u.transpose() * sv[kMbDpre];
  db_dt_ += sv[kMbDpre].middleCols(first_, channels_).colwise().sum();
  dw_b_.noalias() += u.transpose() * sv[kMbDbm];
  dw_c_.noalias() += u.transpose() * sv[kMbDcm];
  da_log_ += sv[kMbDalog];
  dw_in_.noalias() += sv[kMbNorm].transpose() * sv[kMbDxz];
  RmsNormBackwardWeight(sv[kMbDn], sv[kMbXhat], &dgain_);
}

// ---------------------------------------------------------------------------------------------
// Embedding.

namespace {
enum EmbeddingSlot { kEmbDy, kEmbSlots };  // F saves nothing (the tokens are in the micro-batch)

// Member `rank` of `size`'s equal vocabulary range.
VocabRange EqualRange(int vocab, int rank, int size) {
  const int per = vocab / size;
  return VocabRange{rank * per, (rank + 1) * per};
}
}  // namespace

TpEmbeddingLayer::TpEmbeddingLayer(const ModelDims& dims, int layer_index,
                                   std::vector<Tensor> shard, Collective* tp)
    : comm_(tp), shard_(dims, layer_index, EqualRange(dims.vocab, tp->rank(), tp->size())) {
  Assign(std::move(shard), shard_.params(), kind());
}

Tensor TpEmbeddingLayer::Forward(const Tensor& /*x*/, const MicroBatch& mb,
                                 LayerContext* ctx) const {
  Tensor y = shard_.Partial(mb);  // this member's rows, zero for the others' tokens
  comm_.AllReduceSum(&y);
  ctx->Clear();
  return y;
}

Tensor TpEmbeddingLayer::BackwardInput(const Tensor& dy, const MicroBatch& /*mb*/,
                                       LayerContext* ctx) const {
  CheckContext(*ctx, 0, kind(), "BackwardInput");
  ctx->saved.resize(kEmbSlots);
  ctx->saved[kEmbDy] = dy;
  return Tensor();
}

void TpEmbeddingLayer::BackwardWeight(const MicroBatch& mb, LayerContext* ctx) {
  CheckContext(*ctx, kEmbSlots, kind(), "BackwardWeight");
  shard_.AccumulateGradient(ctx->saved[kEmbDy], mb);
}

// ---------------------------------------------------------------------------------------------
// Head.

namespace {
// F: the norm's state, the global normaliser [T, 2] (vocab_head.h's CombineNormaliser), this
// member's statistics [T, 3] and partial input gradients [2T, h] (VocabPartial), two slots B
// fills (dn and the loss gradient, 1x1), then the VocabShardHead's own S-pass context, moved
// here whole (its T pass gets it back).
enum HeadSlot {
  kHdXhat,
  kHdInvRms,
  kHdNormaliser,
  kHdStats,
  kHdGrad,
  kHdDn,
  kHdDloss,
  kHdShardContext
};
// Columns of VocabPartial::stats and of the normaliser (vocab_head.h).
enum HeadStat { kStatMax, kStatSum, kStatTargetLogit };

// Aborts unless ctx holds what F left (`after_b` false) or what B left (true).
void CheckHeadContext(const LayerContext& ctx, bool after_b, absl::string_view op) {
  const bool ok =
      ctx.saved.size() > kHdShardContext && (ctx.saved[kHdDloss].size() != 0) == after_b;
  CheckOrDie(ok, absl::StrCat("head layer shard: ", op, " found a context of ", ctx.saved.size(),
                              " tensors not left by ", after_b ? "BackwardInput" : "Forward",
                              " (F must precede B, and B must precede W, on one context)"));
}
}  // namespace

TpHeadLayer::TpHeadLayer(const ModelDims& dims, int layer_index, std::vector<Tensor> shard,
                         Collective* tp)
    : comm_(tp),
      shard_(dims, layer_index, EqualRange(dims.vocab, tp->rank(), tp->size()),
             /*holds_norm=*/true),
      gain_(shard_.params()[0]),
      dgain_(shard_.grads()[0]) {
  Assign(std::move(shard), shard_.params(), kind());
}

Tensor TpHeadLayer::Forward(const Tensor& x, const MicroBatch& mb, LayerContext* ctx) const {
  const Eigen::Index T = x.rows();
  ctx->Clear();
  ctx->saved.resize(kHdShardContext);
  std::vector<Tensor>& sv = ctx->saved;
  const Tensor n = RmsNormForward(x, *gain_, &sv[kHdXhat], &sv[kHdInvRms]);
  LayerContext shard_ctx;
  VocabPartial partial = shard_.ShardForward(n, mb, &shard_ctx);
  // Every member combines every member's statistics in member order: the same bits everywhere.
  const Tensor all = comm_.AllGather(partial.stats);
  std::vector<Tensor> pieces;
  std::vector<const Tensor*> stats;
  for (int m = 0; m < comm_.size(); ++m) pieces.push_back(all.middleRows(m * T, T));
  for (const Tensor& p : pieces) stats.push_back(&p);
  const Tensor& norm = sv[kHdNormaliser] = CombineNormaliser(stats);
  double loss_sum = 0;
  for (Eigen::Index t = 0; t < T; ++t) {
    float target_logit = 0;  // non-zero on the one member whose range holds the target
    for (const Tensor* s : stats) target_logit += (*s)(t, kStatTargetLogit);
    loss_sum +=
        static_cast<double>(std::log(norm(t, kStatSum)) - (target_logit - norm(t, kStatMax)));
  }
  sv[kHdStats] = std::move(partial.stats);
  sv[kHdGrad] = std::move(partial.grad);
  std::move(shard_ctx.saved.begin(), shard_ctx.saved.end(), std::back_inserter(sv));
  Tensor loss(1, 1);
  loss(0, 0) = static_cast<float>(loss_sum / static_cast<double>(T));
  return loss;
}

Tensor TpHeadLayer::BackwardInput(const Tensor& dy, const MicroBatch& /*mb*/,
                                  LayerContext* ctx) const {
  CheckHeadContext(*ctx, /*after_b=*/false, "BackwardInput");
  std::vector<Tensor>& sv = ctx->saved;
  const Tensor &stats = sv[kHdStats], &norm = sv[kHdNormaliser], &grad = sv[kHdGrad];
  const Eigen::Index T = stats.rows();
  // This member's part of CombineInputGradient (vocab_head.h): its local softmax rescaled to
  // the global one times W^T, less its target columns, times dloss / T; summed over members.
  Tensor& dn = sv[kHdDn];
  dn.resize(T, grad.cols());
  for (Eigen::Index t = 0; t < T; ++t) {
    const float rescale =
        stats(t, kStatSum) * std::exp(stats(t, kStatMax) - norm(t, kStatMax)) / norm(t, kStatSum);
    dn.row(t) = rescale * grad.row(t) - grad.row(T + t);
  }
  dn *= dy(0, 0) / static_cast<float>(T);
  comm_.AllReduceSum(&dn);
  Tensor dx = RmsNormBackwardInput(dn, *gain_, sv[kHdXhat], sv[kHdInvRms]);
  sv[kHdDloss] = dy;
  for (int slot : {kHdInvRms, kHdStats, kHdGrad}) sv[slot] = Tensor();
  return dx;
}

void TpHeadLayer::BackwardWeight(const MicroBatch& mb, LayerContext* ctx) {
  CheckHeadContext(*ctx, /*after_b=*/true, "BackwardWeight");
  std::vector<Tensor>& sv = ctx->saved;
  RmsNormBackwardWeight(sv[kHdDn], sv[kHdXhat], dgain_);
  LayerContext shard_ctx;
  shard_ctx.saved.assign(std::make_move_iterator(sv.begin() + kHdShardContext),
                         std::make_move_iterator(sv.end()));
  sv.resize(kHdShardContext);
  shard_.ShardBackwardWeight(sv[kHdNormaliser], sv[kHdDloss](0, 0), mb, &shard_ctx);
}

}  // namespace octopipe::executor
