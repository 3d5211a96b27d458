// The input embedding split by vocabulary (vocabulary parallelism; the simulator's model of it,
// and why it is scheduled this way, is in simulator/vocab_parallel.h): one VocabShardEmbedding
// per rank holds the table rows [begin, end) — the same vocabulary range as its head shard
// (executor/layers/vocab_head.h) — cut from EmbeddingLayer's table of the same (seed, layer
// index), so the shards together are the single-process embedding.
//
// Per micro-batch:
//  - Partial (every rank but stage 0's): the micro-batch's embedding with its own rows where a
//    token is in its range and zero elsewhere, which the engine sends to stage 0's rank.
//  - Forward on stage 0's rank (the Layer interface): x is the sum of the other ranks'
//    partials (empty for none); the output is x with this shard's rows written in, so it is the
//    whole embedding, bit for bit (every other shard is zero at those tokens).
//  - BackwardInput keeps dy (the embedding output's gradient, which the engine also sends to
//    every other rank) and returns an empty tensor; BackwardWeight scatter-adds this shard's
//    rows of it into the table's gradient.
//  - AccumulateGradient (every rank but stage 0's): the same scatter-add from a received dy.
// Not thread-safe, like every Layer.
#ifndef OCTOPIPE_EXECUTOR_LAYERS_VOCAB_EMBEDDING_H_
#define OCTOPIPE_EXECUTOR_LAYERS_VOCAB_EMBEDDING_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "executor/layer.h"
#include "executor/layers/vocab_head.h"
#include "executor/tensor.h"

namespace octopipe::executor {

class VocabShardEmbedding final : public Layer {
 public:
  VocabShardEmbedding(const ModelDims& dims, int layer_index, VocabRange range);

  absl::string_view kind() const override { return "embedding"; }
  VocabRange range() const { return range_; }

  Tensor Forward(const Tensor& x, const MicroBatch& mb, LayerContext* ctx) const override;
  Tensor BackwardInput(const Tensor& dy, const MicroBatch& mb, LayerContext* ctx) const override;
  void BackwardWeight(const MicroBatch& mb, LayerContext* ctx) override;

  // [tokens, hidden]: this shard's rows for the tokens in its range, zero elsewhere.
  Tensor Partial(const MicroBatch& mb) const;
  // dtable[token - begin] += dy[t] for every token t in this shard's range.
  void AccumulateGradient(const Tensor& dy, const MicroBatch& mb);

  std::vector<Tensor*> params() override { return {&table_}; }
  std::vector<Tensor*> grads() override { return {&dtable_}; }

  // This shard's rows of a whole embedding's tensors (its table, a checkpoint's parameters or
  // moments).
  std::vector<Tensor> SliceOfWhole(const std::vector<Tensor>& whole) const;

 private:
  // Aborts naming the token and position unless every token is inside the whole vocabulary.
  void CheckTokens(const MicroBatch& mb) const;

  VocabRange range_;
  int vocab_;
  Tensor table_;  // [end - begin, hidden]
  Tensor dtable_;
};

// The inverse of SliceOfWhole over all shards: the whole table (one tensor) from every shard's
// tensors in shard order. kInvalidArgument unless each shard holds one tensor and they agree in
// columns.
absl::StatusOr<std::vector<Tensor>> WholeEmbeddingOf(const std::vector<std::vector<Tensor>>& shards);

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_LAYERS_VOCAB_EMBEDDING_H_
