#include "executor/layers/vocab_embedding.h"

#include "absl/strings/str_cat.h"
#include "executor/layers/common.h"
#include "executor/layers/init.h"

namespace octopipe::executor {
namespace {
enum Slot { kDy, kSlots };  // F saves nothing (the tokens are in the micro-batch)
}  // namespace

VocabShardEmbedding::VocabShardEmbedding(const ModelDims& dims, int layer_index, VocabRange range)
    : range_(range), vocab_(dims.vocab) {
  // The whole table, exactly as EmbeddingLayer draws it, cut to this shard's rows.
  Tensor whole(dims.vocab, dims.hidden);
  InitUniform(dims.seed, layer_index, /*param_index=*/0, /*a=*/1.0f, &whole);
  table_ = whole.middleRows(range.begin, range.end - range.begin);
  dtable_ = Tensor::Zero(table_.rows(), table_.cols());
}

void VocabShardEmbedding::CheckTokens(const MicroBatch& mb) const {
  for (size_t t = 0; t < mb.tokens.size(); ++t) {
    const int32_t token = mb.tokens[t];
    CheckOrDie(token >= 0 && token < vocab_,
               absl::StrCat("embedding layer: token ", token, " at position ", t,
                            " is outside the vocabulary [0, ", vocab_, ")"));
  }
}

Tensor VocabShardEmbedding::Partial(const MicroBatch& mb) const {
  CheckTokens(mb);
  Tensor y = Tensor::Zero(static_cast<Eigen::Index>(mb.tokens.size()), table_.cols());
  for (size_t t = 0; t < mb.tokens.size(); ++t) {
    const int32_t token = mb.tokens[t];
    if (token >= range_.begin && token < range_.end) {
      y.row(static_cast<Eigen::Index>(t)) = table_.row(token - range_.begin);
    }
  }
  return y;
}

Tensor VocabShardEmbedding::Forward(const Tensor& x, const MicroBatch& mb,
                                    LayerContext* ctx) const {
  const Eigen::Index T = static_cast<Eigen::Index>(mb.tokens.size());
  CheckOrDie(x.size() == 0 || (x.rows() == T && x.cols() == table_.cols()),
             absl::StrCat("embedding shard: the other shards' sum is ", x.rows(), "x", x.cols(),
                          ", expected ", T, "x", table_.cols()));
  Tensor y = x.size() == 0 ? Partial(mb) : x;
  if (x.size() != 0) {
    CheckTokens(mb);
    for (Eigen::Index t = 0; t < T; ++t) {
      const int32_t token = mb.tokens[static_cast<size_t>(t)];
      if (token >= range_.begin && token < range_.end) {
        y.row(t) = table_.row(token - range_.begin);  // the other shards are zero here
      }
    }
  }
  ctx->Clear();
  return y;
}

Tensor VocabShardEmbedding::BackwardInput(const Tensor& dy, const MicroBatch& /*mb*/,
                                          LayerContext* ctx) const {
  CheckContext(*ctx, 0, kind(), "BackwardInput");
  ctx->saved.resize(kSlots);
  ctx->saved[kDy] = dy;
  return Tensor();
}

void VocabShardEmbedding::BackwardWeight(const MicroBatch& mb, LayerContext* ctx) {
  CheckContext(*ctx, kSlots, kind(), "BackwardWeight");
  AccumulateGradient(ctx->saved[kDy], mb);
}

void VocabShardEmbedding::AccumulateGradient(const Tensor& dy, const MicroBatch& mb) {
  CheckOrDie(dy.rows() == static_cast<Eigen::Index>(mb.tokens.size()) &&
                 dy.cols() == dtable_.cols(),
             absl::StrCat("embedding shard: a gradient of ", dy.rows(), "x", dy.cols(), " for ",
                          mb.tokens.size(), " tokens"));
  for (size_t t = 0; t < mb.tokens.size(); ++t) {
    const int32_t token = mb.tokens[t];
    if (token >= range_.begin && token < range_.end) {
      dtable_.row(token - range_.begin) += dy.row(static_cast<Eigen::Index>(t));
    }
  }
}

std::vector<Tensor> VocabShardEmbedding::SliceOfWhole(const std::vector<Tensor>& whole) const {
  return {whole[0].middleRows(range_.begin, range_.end - range_.begin)};
}

absl::StatusOr<std::vector<Tensor>> WholeEmbeddingOf(
    const std::vector<std::vector<Tensor>>& shards) {
  if (shards.empty()) return absl::InvalidArgumentError("embedding shards: none");
  Eigen::Index rows = 0;
  for (const std::vector<Tensor>& shard : shards) {
    if (shard.size() != 1 || shard[0].cols() != shards[0][0].cols()) {
      return absl::InvalidArgumentError(
          "embedding shards: each holds one table of rows with the same columns");
    }
    rows += shard[0].rows();
  }
  std::vector<Tensor> out(1, Tensor(rows, shards[0][0].cols()));
  Eigen::Index at = 0;
  for (const std::vector<Tensor>& shard : shards) {
    out[0].middleRows(at, shard[0].rows()) = shard[0];
    at += shard[0].rows();
  }
  return out;
}

}  // namespace octopipe::executor
