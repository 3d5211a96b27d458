// The output head split by vocabulary (vocabulary parallelism, Yeung et al. 2024; the
// simulator's model of it is simulator/vocab_parallel.h): one VocabShardHead per rank holds the
// columns [begin, end) of the head's W_out; the rank that runs the last stage also holds the
// head's RMSNorm gain. Same parameters as HeadLayer (executor/layers/head.h) of the same
// (seed, layer index), cut by columns, so the shards together are the single-process head.
//
// Per micro-batch, with n = RMSNorm(x) the last stage's output broadcast to every shard:
//  - S pass, every shard d (ShardForward): logits y_d = n W_d, the local softmax max m_d and
//    sum s_d = sum exp(y_d - m_d) per token, the target's logit (0 where the target is in
//    another shard), and the partial input gradients A_d = softmax_local(y_d) W_d^T and
//    B_d = the target's column of W_d (0 elsewhere). Needs no other shard (one barrier).
//  - Combine, on the norm holder (CombineInputGradient): with the global max m and sum s
//    (CombineNormaliser), c_d = s_d exp(m_d - m) / s rescales each shard's local softmax to the
//    global one, so dn = dloss / T * sum_d (c_d A_d - B_d) is the gradient of the mean
//    cross-entropy w.r.t. n; and the loss is mean(log s + m - y_target).
//  - T pass, every shard (ShardBackwardWeight): dW_d += n^T (softmax(y_d; m, s) - onehot) *
//    dloss / T.
//  - The norm holder's Layer interface is the norm alone: Forward(x) -> n, BackwardInput(dn) ->
//    dx, BackwardWeight -> dgain. On another rank these abort (a bug in the caller).
// Shards are combined in shard order, so every rank computes bit-identical normalisers.
// Not thread-safe, like every Layer.
#ifndef OCTOPIPE_EXECUTOR_LAYERS_VOCAB_HEAD_H_
#define OCTOPIPE_EXECUTOR_LAYERS_VOCAB_HEAD_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "executor/layer.h"
#include "executor/tensor.h"

namespace octopipe::executor {

// The vocabulary columns [begin, end) of shard `shard` when shard d holds columns[d] columns
// (in shard order): the plan's split (PlanVocabShardColumns, core/plan.h — the simulator's
// speed-sized shards, or equal ones). Requires 0 <= shard < columns.size().
struct VocabRange {
  int begin = 0;
  int end = 0;
};
VocabRange VocabShardRange(const std::vector<int64_t>& columns, int shard);

// What an S pass sends: per token [max, sum, target logit] ([T, 3], to every shard) and the
// partial input gradients [A_d; B_d] ([2T, hidden], to the norm holder).
struct VocabPartial {
  Tensor stats;
  Tensor grad;
};

class VocabShardHead final : public Layer {
 public:
  VocabShardHead(const ModelDims& dims, int layer_index, VocabRange range, bool holds_norm);

  absl::string_view kind() const override { return "head"; }
  bool holds_norm() const { return holds_norm_; }
  VocabRange range() const { return range_; }

  // The norm (norm holder only; see the top comment).
  Tensor Forward(const Tensor& x, const MicroBatch& mb, LayerContext* ctx) const override;
  Tensor BackwardInput(const Tensor& dn, const MicroBatch& mb, LayerContext* ctx) const override;
  void BackwardWeight(const MicroBatch& mb, LayerContext* ctx) override;

  // S pass on the broadcast n [T, hidden]; keeps n and the shard's logits in `ctx` for T.
  VocabPartial ShardForward(const Tensor& n, const MicroBatch& mb, LayerContext* ctx) const;
  // T pass: accumulates the shard's dW_out from the global normaliser ([T, 2], from
  // CombineNormaliser) and the loss gradient dloss (1/M); then `ctx` may be dropped.
  void ShardBackwardWeight(const Tensor& normaliser, float dloss, const MicroBatch& mb,
                           LayerContext* ctx);

  // Norm holder: {gain, W_out columns}; other ranks: {W_out columns}.
  std::vector<Tensor*> params() override;
  std::vector<Tensor*> grads() override;

  // This shard's part of a whole head's tensors (HeadLayer::params() order: gain, W_out), e.g.
  // a checkpoint's parameters or moments, in this layer's params() order.
  std::vector<Tensor> SliceOfWhole(const std::vector<Tensor>& whole) const;

 private:
  VocabRange range_;
  bool holds_norm_;
  Tensor gain_, w_out_;  // gain_ is empty unless holds_norm_
  Tensor dgain_, dw_out_;
};

// The inverse of SliceOfWhole over all shards: the whole head's tensors (gain, W_out) from
// every shard's tensors in its params() order (parameters, gradients or moments), shards in
// order. kInvalidArgument unless exactly one shard has the gain and the W_out parts agree in
// rows.
absl::StatusOr<std::vector<Tensor>> WholeHeadOf(const std::vector<std::vector<Tensor>>& shards);

// Per token [global max, global sum of exp(logit - max)] ([T, 2]) from every shard's stats, in
// shard order.
Tensor CombineNormaliser(const std::vector<const Tensor*>& stats);

// The gradient of the micro-batch's mean cross-entropy (times dloss) w.r.t. n, from every
// shard's stats and partial gradient in shard order; *loss gets the mean cross-entropy.
Tensor CombineInputGradient(const std::vector<const Tensor*>& stats,
                            const std::vector<const Tensor*>& grads, float dloss, float* loss);

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_LAYERS_VOCAB_HEAD_H_
