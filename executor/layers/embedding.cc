#include "executor/layers/embedding.h"

#include "absl/strings/str_cat.h"
#include "executor/layers/common.h"
#include "executor/layers/init.h"

namespace octopipe::executor {
namespace {
enum Slot { kDy, kSlots };  // F saves nothing (the tokens are in the micro-batch)
}  // namespace

EmbeddingLayer::EmbeddingLayer(const ModelDims& dims, int layer_index)
    : table_(dims.vocab, dims.hidden), dtable_(Tensor::Zero(dims.vocab, dims.hidden)) {
  InitUniform(dims.seed, layer_index, /*param_index=*/0, /*a=*/1.0f, &table_);
}

Tensor EmbeddingLayer::Forward(const Tensor& /*x*/, const MicroBatch& mb, LayerContext* ctx) const {
  const int vocab = static_cast<int>(table_.rows());
  Tensor y(static_cast<Eigen::Index>(mb.tokens.size()), table_.cols());
  for (size_t t = 0; t < mb.tokens.size(); ++t) {
    const int32_t token = mb.tokens[t];
    CheckOrDie(token >= 0 && token < vocab,
               absl::StrCat("embedding layer: token ", token, " at position ", t,
                            " is outside the vocabulary [0, ", vocab, ")"));
    y.row(static_cast<Eigen::Index>(t)) = table_.row(token);
  }
  ctx->Clear();
  return y;
}

Tensor EmbeddingLayer::BackwardInput(const Tensor& dy, const MicroBatch& /*mb*/,
                                     LayerContext* ctx) const {
  CheckContext(*ctx, 0, kind(), "BackwardInput");
  ctx->saved.resize(kSlots);
  ctx->saved[kDy] = dy;
  return Tensor();
}

void EmbeddingLayer::BackwardWeight(const MicroBatch& mb, LayerContext* ctx) {
  CheckContext(*ctx, kSlots, kind(), "BackwardWeight");
  const Tensor& dy = ctx->saved[kDy];
  for (size_t t = 0; t < mb.tokens.size(); ++t) {
    dtable_.row(mb.tokens[t]) += dy.row(static_cast<Eigen::Index>(t));
  }
}

}  // namespace octopipe::executor
