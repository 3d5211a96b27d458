#include "executor/layers/vocab_head.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "executor/layers/common.h"
#include "executor/layers/init.h"
#include "executor/layers/rmsnorm.h"

namespace octopipe::executor {
namespace {
// Norm holder's context: F saves the norm's state, B adds dn for W.
enum NormSlot { kXhat, kInvRms, kNormForwardSlots, kDn = kNormForwardSlots, kNormSlots };
// A shard's context: S saves the broadcast n and the shard's logits for T.
enum ShardSlot { kInput, kLogits, kShardSlots };
// Columns of VocabPartial::stats and of the normaliser.
enum StatColumn { kMax, kSum, kTargetLogit };

int TargetColumn(const MicroBatch& mb, Eigen::Index t, VocabRange r) {
  const int32_t target = mb.targets[static_cast<size_t>(t)];
  return target >= r.begin && target < r.end ? target - r.begin : -1;
}

}  // namespace

VocabRange VocabShardRange(const std::vector<int64_t>& columns, int shard) {
  int64_t begin = 0;
  for (int d = 0; d < shard; ++d) begin += columns[static_cast<size_t>(d)];
  VocabRange r;
  r.begin = static_cast<int>(begin);
  r.end = static_cast<int>(begin + columns[static_cast<size_t>(shard)]);
  return r;
}

VocabShardHead::VocabShardHead(const ModelDims& dims, int layer_index, VocabRange range,
                               bool holds_norm)
    : range_(range), holds_norm_(holds_norm) {
  // The whole head's W_out, exactly as HeadLayer draws it, cut to this shard's columns.
  Tensor whole(dims.hidden, dims.vocab);
  InitUniform(dims.seed, layer_index, /*param_index=*/1,
              1.0f / std::sqrt(static_cast<float>(dims.hidden)), &whole);
  w_out_ = whole.middleCols(range.begin, range.end - range.begin);
  dw_out_ = Tensor::Zero(w_out_.rows(), w_out_.cols());
  if (holds_norm_) {
    gain_ = Tensor::Ones(1, dims.hidden);
    dgain_ = Tensor::Zero(1, dims.hidden);
  }
}

Tensor VocabShardHead::Forward(const Tensor& x, const MicroBatch& /*mb*/,
                               LayerContext* ctx) const {
  CheckOrDie(holds_norm_, "head shard: Forward (the norm) on a rank without the norm");
  ctx->Clear();
  ctx->saved.resize(kNormForwardSlots);
  return RmsNormForward(x, gain_, &ctx->saved[kXhat], &ctx->saved[kInvRms]);
}

Tensor VocabShardHead::BackwardInput(const Tensor& dn, const MicroBatch& /*mb*/,
                                     LayerContext* ctx) const {
  CheckOrDie(holds_norm_, "head shard: BackwardInput (the norm) on a rank without the norm");
  CheckContext(*ctx, kNormForwardSlots, kind(), "BackwardInput");
  std::vector<Tensor>& s = ctx->saved;
  s.push_back(dn);
  Tensor dx = RmsNormBackwardInput(s[kDn], gain_, s[kXhat], s[kInvRms]);
  s[kInvRms] = Tensor();
  return dx;
}

void VocabShardHead::BackwardWeight(const MicroBatch& /*mb*/, LayerContext* ctx) {
  CheckOrDie(holds_norm_, "head shard: BackwardWeight (the norm) on a rank without the norm");
  CheckContext(*ctx, kNormSlots, kind(), "BackwardWeight");
  RmsNormBackwardWeight(ctx->saved[kDn], ctx->saved[kXhat], &dgain_);
}

VocabPartial VocabShardHead::ShardForward(const Tensor& n, const MicroBatch& mb,
                                          LayerContext* ctx) const {
  const Eigen::Index T = n.rows();
  CheckOrDie(mb.targets.size() == static_cast<size_t>(T),
             absl::StrCat("head shard: ", mb.targets.size(), " targets for ", T, " token rows"));
  ctx->Clear();
  ctx->saved.resize(kShardSlots);
  ctx->saved[kInput] = n;
  Tensor& logits = ctx->saved[kLogits];
  logits.noalias() = n * w_out_;
  VocabPartial out;
  out.stats = Tensor::Zero(T, 3);
  out.grad = Tensor::Zero(2 * T, n.cols());
  Tensor probs(T, logits.cols());  // the shard's local softmax
  for (Eigen::Index t = 0; t < T; ++t) {
    const float max_logit = logits.row(t).maxCoeff();
    probs.row(t) = (logits.row(t).array() - max_logit).exp().matrix();
    const float sum = probs.row(t).sum();
    probs.row(t) /= sum;
    out.stats(t, kMax) = max_logit;
    out.stats(t, kSum) = sum;
    if (const int c = TargetColumn(mb, t, range_); c >= 0) {
      out.stats(t, kTargetLogit) = logits(t, c);
      out.grad.row(T + t) = w_out_.col(c).transpose();
    }
  }
  out.grad.topRows(T).noalias() = probs * w_out_.transpose();
  return out;
}

void VocabShardHead::ShardBackwardWeight(const Tensor& normaliser, float dloss,
                                         const MicroBatch& mb, LayerContext* ctx) {
  CheckContext(*ctx, kShardSlots, kind(), "ShardBackwardWeight");
  const Tensor& logits = ctx->saved[kLogits];
  const Eigen::Index T = logits.rows();
  Tensor dlogits(T, logits.cols());
  for (Eigen::Index t = 0; t < T; ++t) {
    dlogits.row(t) = (logits.row(t).array() - normaliser(t, kMax)).exp().matrix();
    dlogits.row(t) /= normaliser(t, kSum);
    if (const int c = TargetColumn(mb, t, range_); c >= 0) dlogits(t, c) -= 1.0f;
  }
  dlogits *= dloss / static_cast<float>(T);
  dw_out_.noalias() += ctx->saved[kInput].transpose() * dlogits;
}

std::vector<Tensor*> VocabShardHead::params() {
  if (holds_norm_) return {&gain_, &w_out_};
  return {&w_out_};
}

std::vector<Tensor*> VocabShardHead::grads() {
  if (holds_norm_) return {&dgain_, &dw_out_};
  return {&dw_out_};
}

std::vector<Tensor> VocabShardHead::SliceOfWhole(const std::vector<Tensor>& whole) const {
  std::vector<Tensor> out;
  if (holds_norm_) out.push_back(whole[0]);
  out.push_back(whole[1].middleCols(range_.begin, range_.end - range_.begin));
  return out;
}

absl::StatusOr<std::vector<Tensor>> WholeHeadOf(const std::vector<std::vector<Tensor>>& shards) {
  if (shards.empty()) return absl::InvalidArgumentError("head shards: none");
  std::vector<Tensor> out(2);
  int holders = 0, columns = 0;
  for (const std::vector<Tensor>& shard : shards) {
    if (shard.size() == 2) {
      out[0] = shard[0];
      ++holders;
    }
    if (shard.empty() || shard.size() > 2 || shard.back().rows() != shards[0].back().rows()) {
      return absl::InvalidArgumentError(
          "head shards: each holds [gain,] W_out columns with the same rows");
    }
    columns += static_cast<int>(shard.back().cols());
  }
  if (holders != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("head shards: ", holders, " of ", shards.size(), " hold the norm's gain"));
  }
  out[1].resize(shards[0].back().rows(), columns);
  int at = 0;
  for (const std::vector<Tensor>& shard : shards) {
    out[1].middleCols(at, shard.back().cols()) = shard.back();
    at += static_cast<int>(shard.back().cols());
  }
  return out;
}

Tensor CombineNormaliser(const std::vector<const Tensor*>& stats) {
  const Eigen::Index T = stats[0]->rows();
  Tensor out(T, 2);
  for (Eigen::Index t = 0; t < T; ++t) {
    float max_logit = (*stats[0])(t, kMax);
    for (const Tensor* s : stats) max_logit = std::max(max_logit, (*s)(t, kMax));
    float sum = 0;
    for (const Tensor* s : stats) sum += (*s)(t, kSum) * std::exp((*s)(t, kMax) - max_logit);
    out(t, kMax) = max_logit;
    out(t, kSum) = sum;
  }
  return out;
}

Tensor CombineInputGradient(const std::vector<const Tensor*>& stats,
                            const std::vector<const Tensor*>& grads, float dloss, float* loss) {
  const Tensor norm = CombineNormaliser(stats);
  const Eigen::Index T = norm.rows();
  Tensor dn = Tensor::Zero(T, grads[0]->cols());
  double loss_sum = 0;
  for (Eigen::Index t = 0; t < T; ++t) {
    const float max_logit = norm(t, kMax), sum = norm(t, kSum);
    float target_logit = 0;
    for (size_t d = 0; d < stats.size(); ++d) {
      const Tensor& s = *stats[d];
      const float rescale = s(t, kSum) * std::exp(s(t, kMax) - max_logit) / sum;
      dn.row(t) += rescale * grads[d]->row(t) - grads[d]->row(T + t);
      target_logit += s(t, kTargetLogit);
    }
    loss_sum += static_cast<double>(std::log(sum) - (target_logit - max_logit));
  }
  dn *= dloss / static_cast<float>(T);
  *loss = static_cast<float>(loss_sum / static_cast<double>(T));
  return dn;
}

}  // namespace octopipe::executor
