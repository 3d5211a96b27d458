// The tensor-parallel shards of the reference model's layers, one class per kind: what
// MakeTensorParallelLayer (executor/layers/tensor_parallel.h) builds. That header states the
// split and the collectives of each kind; each class's maths is its unsharded layer's
// (executor/layers/<kind>.h) restricted to the member's heads, FFN columns, channels or
// vocabulary, plus those collectives.
//
// A shard is built from its parameters (`shard`, in the unsharded layer's params() order, split
// tensors already cut: TensorParallelShard) and the group `tp` (not owned; must outlive it).
// Every class returns its unsharded layer's kind(), so an engine treats a shard as the layer.
// Contract of the ops: executor/layer.h. Not thread-safe.
#ifndef OCTOPIPE_EXECUTOR_LAYERS_TP_LAYERS_H_
#define OCTOPIPE_EXECUTOR_LAYERS_TP_LAYERS_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "executor/collective.h"
#include "executor/layer.h"
#include "executor/layers/tp_comm.h"
#include "executor/layers/vocab_embedding.h"
#include "executor/layers/vocab_head.h"
#include "executor/tensor.h"

namespace octopipe::executor {

// Heads [rank * heads / tp, (rank + 1) * heads / tp). shard: {gain [1, h], W_q, W_k, W_v
// [h, h / tp], W_o [h / tp, h]}.
class TpAttentionLayer final : public Layer {
 public:
  TpAttentionLayer(const ModelDims& dims, std::vector<Tensor> shard, Collective* tp);

  absl::string_view kind() const override { return "attention"; }
  Tensor Forward(const Tensor& x, const MicroBatch& mb, LayerContext* ctx) const override;
  Tensor BackwardInput(const Tensor& dy, const MicroBatch& mb, LayerContext* ctx) const override;
  void BackwardWeight(const MicroBatch& mb, LayerContext* ctx) override;
  std::vector<Tensor*> params() override { return {&gain_, &wq_, &wk_, &wv_, &wo_}; }
  std::vector<Tensor*> grads() override { return {&dgain_, &dwq_, &dwk_, &dwv_, &dwo_}; }
  absl::Status comm_status() const override { return comm_.status(); }

 private:
  int heads_;  // this member's (each of width hidden / all heads, as in the unsharded layer)
  mutable TpComm comm_;
  Tensor gain_, wq_, wk_, wv_, wo_;
  Tensor dgain_, dwq_, dwk_, dwv_, dwo_;
};

// FFN columns [rank * ffn / tp, ...). shard: {gain [1, h], W_1, W_3 [h, ffn / tp],
// W_2 [ffn / tp, h]}.
class TpMlpLayer final : public Layer {
 public:
  TpMlpLayer(const ModelDims& dims, std::vector<Tensor> shard, Collective* tp);

  absl::string_view kind() const override { return "mlp"; }
  Tensor Forward(const Tensor& x, const MicroBatch& mb, LayerContext* ctx) const override;
  Tensor BackwardInput(const Tensor& dy, const MicroBatch& mb, LayerContext* ctx) const override;
  void BackwardWeight(const MicroBatch& mb, LayerContext* ctx) override;
  std::vector<Tensor*> params() override { return {&gain_, &w1_, &w3_, &w2_}; }
  std::vector<Tensor*> grads() override { return {&dgain_, &dw1_, &dw3_, &dw2_}; }
  absl::Status comm_status() const override { return comm_.status(); }

 private:
  mutable TpComm comm_;
  Tensor gain_, w1_, w3_, w2_;
  Tensor dgain_, dw1_, dw3_, dw2_;
};

// Inner channels [rank * d / tp, ...) of d = expand * hidden (c = d / tp of them, N = state).
// shard: {gain [1, h], W_in [h, 2c] (u block, z block), W_dt [c, d], b_dt [1, c], W_B, W_C
// [c, N], A_log [c, N], D [1, c], W_out [c, h]}.
class TpMambaLayer final : public Layer {
 public:
  TpMambaLayer(const ModelDims& dims, std::vector<Tensor> shard, Collective* tp);

  absl::string_view kind() const override { return "mamba"; }
  Tensor Forward(const Tensor& x, const MicroBatch& mb, LayerContext* ctx) const override;
  Tensor BackwardInput(const Tensor& dy, const MicroBatch& mb, LayerContext* ctx) const override;
  void BackwardWeight(const MicroBatch& mb, LayerContext* ctx) override;
  std::vector<Tensor*> params() override {
    return {&gain_, &w_in_, &w_dt_, &b_dt_, &w_b_, &w_c_, &a_log_, &d_skip_, &w_out_};
  }
  std::vector<Tensor*> grads() override {
    return {&dgain_, &dw_in_, &dw_dt_, &db_dt_, &dw_b_, &dw_c_, &da_log_, &dd_skip_, &dw_out_};
  }
  absl::Status comm_status() const override { return comm_.status(); }

 private:
  int inner_;     // d, all channels
  int channels_;  // c, this member's
  int first_;     // this member's first channel
  int state_;     // N
  mutable TpComm comm_;
  Tensor gain_, w_in_, w_dt_, b_dt_, w_b_, w_c_, a_log_, d_skip_, w_out_;
  Tensor dgain_, dw_in_, dw_dt_, db_dt_, dw_b_, dw_c_, da_log_, dd_skip_, dw_out_;
};

// Table rows [rank * vocab / tp, ...): a VocabShardEmbedding of that range whose partial lookups
// are summed by an all-reduce. shard: {table rows [vocab / tp, h]}.
class TpEmbeddingLayer final : public Layer {
 public:
  TpEmbeddingLayer(const ModelDims& dims, int layer_index, std::vector<Tensor> shard,
                   Collective* tp);

  absl::string_view kind() const override { return "embedding"; }
  Tensor Forward(const Tensor& x, const MicroBatch& mb, LayerContext* ctx) const override;
  Tensor BackwardInput(const Tensor& dy, const MicroBatch& mb, LayerContext* ctx) const override;
  void BackwardWeight(const MicroBatch& mb, LayerContext* ctx) override;
  std::vector<Tensor*> params() override { return shard_.params(); }
  std::vector<Tensor*> grads() override { return shard_.grads(); }
  absl::Status comm_status() const override { return comm_.status(); }

 private:
  mutable TpComm comm_;
  VocabShardEmbedding shard_;
};

// W_out columns [rank * vocab / tp, ...): a VocabShardHead of that range holding the norm (every
// member runs the replicated norm), its S pass in F with an all-gather of the statistics, the
// input gradient from its partial gradients in B (all-reduced), its T pass in W.
// shard: {gain [1, h], W_out columns [h, vocab / tp]}.
class TpHeadLayer final : public Layer {
 public:
  TpHeadLayer(const ModelDims& dims, int layer_index, std::vector<Tensor> shard, Collective* tp);

  absl::string_view kind() const override { return "head"; }
  Tensor Forward(const Tensor& x, const MicroBatch& mb, LayerContext* ctx) const override;
  Tensor BackwardInput(const Tensor& dy, const MicroBatch& mb, LayerContext* ctx) const override;
  void BackwardWeight(const MicroBatch& mb, LayerContext* ctx) override;
  std::vector<Tensor*> params() override { return shard_.params(); }
  std::vector<Tensor*> grads() override { return shard_.grads(); }
  absl::Status comm_status() const override { return comm_.status(); }

 private:
  mutable TpComm comm_;
  VocabShardHead shard_;
  Tensor* gain_;   // shard_'s
  Tensor* dgain_;  // shard_'s
};

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_LAYERS_TP_LAYERS_H_
