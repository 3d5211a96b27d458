#include "executor/layers/tensor_parallel.h"

#include "executor/layers/expert_parallel.h"

#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "executor/layers/tp_layers.h"

namespace octopipe::executor {
namespace {

// How one of the unsharded layer's tensors is cut into tp equal, consecutive blocks.
enum class Split {
  kReplicated,
  kRows,
  kColumns,
  kColumnHalves,  // [left | right] halves, each cut by columns; a shard is [its left | its right]
};

struct ParamLayout {
  Eigen::Index rows = 0;  // of the whole tensor
  Eigen::Index cols = 0;
  Split split = Split::kReplicated;
};

// The unsharded layer's tensors (MakeLayer's params() order and shapes) and their splits; empty
// for a kind that is not split. Pinned against MakeLayer by tensor_parallel_test.
std::vector<ParamLayout> LayoutOf(absl::string_view kind, const ModelDims& dims) {
  const Eigen::Index h = dims.hidden;
  const ParamLayout gain{1, h, Split::kReplicated};
  if (kind == "embedding") return {{dims.vocab, h, Split::kRows}};
  if (kind == "attention") {
    return {gain,
            {h, h, Split::kColumns},  // W_q
            {h, h, Split::kColumns},  // W_k
            {h, h, Split::kColumns},  // W_v
            {h, h, Split::kRows}};    // W_o
  }
  if (kind == "mlp") {
    return {gain,
            {h, dims.ffn, Split::kColumns},  // W_1
            {h, dims.ffn, Split::kColumns},  // W_3
            {dims.ffn, h, Split::kRows}};    // W_2
  }
  if (kind == "mamba") {
    const Eigen::Index d = Eigen::Index{dims.expand} * dims.hidden, n = dims.state;
    return {gain,
            {h, 2 * d, Split::kColumnHalves},  // W_in: [u | z]
            {d, d, Split::kRows},              // W_dt
            {1, d, Split::kColumns},           // b_dt
            {d, n, Split::kRows},              // W_B
            {d, n, Split::kRows},              // W_C
            {d, n, Split::kRows},              // A_log
            {1, d, Split::kColumns},           // D
            {d, h, Split::kRows}};             // W_out
  }
  if (kind == "head") return {gain, {h, dims.vocab, Split::kColumns}};
  return {};
}

ParamLayout ShardLayout(const ParamLayout& whole, int size) {
  ParamLayout s = whole;
  if (whole.split == Split::kRows) s.rows /= size;
  if (whole.split == Split::kColumns || whole.split == Split::kColumnHalves) s.cols /= size;
  return s;
}

Tensor Slice(const Tensor& whole, Split split, int rank, int size) {
  switch (split) {
    case Split::kReplicated:
      return whole;
    case Split::kRows: {
      const Eigen::Index per = whole.rows() / size;
      return whole.middleRows(rank * per, per);
    }
    case Split::kColumns: {
      const Eigen::Index per = whole.cols() / size;
      return whole.middleCols(rank * per, per);
    }
    case Split::kColumnHalves: {
      const Eigen::Index half = whole.cols() / 2, per = half / size;
      Tensor out(whole.rows(), 2 * per);
      out.leftCols(per) = whole.middleCols(rank * per, per);
      out.rightCols(per) = whole.middleCols(half + rank * per, per);
      return out;
    }
  }
  return Tensor();
}

// Writes member `rank`'s shard `part` into its place in `whole` (the inverse of Slice).
void Place(const Tensor& part, Split split, int rank, Tensor* whole) {
  switch (split) {
    case Split::kReplicated:
      *whole = part;
      return;
    case Split::kRows:
      whole->middleRows(rank * part.rows(), part.rows()) = part;
      return;
    case Split::kColumns:
      whole->middleCols(rank * part.cols(), part.cols()) = part;
      return;
    case Split::kColumnHalves: {
      const Eigen::Index per = part.cols() / 2, half = whole->cols() / 2;
      whole->middleCols(rank * per, per) = part.leftCols(per);
      whole->middleCols(half + rank * per, per) = part.rightCols(per);
      return;
    }
  }
}

bool SameBits(const Tensor& a, const Tensor& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         std::memcmp(a.data(), b.data(), sizeof(float) * static_cast<size_t>(a.size())) == 0;
}

// The dimension `kind` splits, its name and value; false for a kind that splits nothing.
bool SplitDimension(absl::string_view kind, const ModelDims& dims, const char** field, int* value) {
  if (kind == "embedding" || kind == "head") {
    *field = "vocab";
    *value = dims.vocab;
  } else if (kind == "attention") {
    *field = "heads";
    *value = dims.heads;
  } else if (kind == "mlp") {
    *field = "ffn";
    *value = dims.ffn;
  } else if (kind == "mamba") {
    *field = "expand*hidden";
    *value = dims.expand * dims.hidden;
  } else {
    return false;
  }
  return true;
}

// CheckTensorParallel's checks; `where` ends the messages ("layer 2, attention").
absl::Status CheckSplit(absl::string_view kind, const ModelDims& dims, int tp,
                        absl::string_view where) {
  const char* field = nullptr;
  int value = 0;
  if (!SplitDimension(kind, dims, &field, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor parallelism: unknown layer kind \"", kind, "\" (", where,
                     "; known: embedding, attention, mlp, mamba, head)"));
  }
  if (tp < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor parallelism: tp must be >= 1, got ", tp, " (", where, ")"));
  }
  if (value <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor parallelism: ", field, " = ", value, " must be > 0 (", where, ")"));
  }
  if (value % tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor parallelism: ", tp, " does not divide ",
                                                   field, " = ", value, " (", where, ")"));
  }
  return absl::OkStatus();
}

std::string ShapeOf(Eigen::Index rows, Eigen::Index cols) { return absl::StrCat(rows, "x", cols); }

}  // namespace

absl::Status CheckTensorParallel(absl::string_view kind, const ModelDims& dims, int layer_index,
                                 int tp) {
  if (kind == "moe") return CheckParallelMoe(dims, layer_index, /*ep=*/1, tp);
  return CheckSplit(kind, dims, tp, absl::StrCat("layer ", layer_index, ", ", kind));
}

absl::StatusOr<std::unique_ptr<Layer>> MakeTensorParallelLayer(absl::string_view kind,
                                                               const ModelDims& dims,
                                                               int layer_index, Collective* tp) {
  if (tp == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor parallelism: no group for layer ", layer_index, " (", kind, ")"));
  }
  if (kind == "moe") return MakeParallelMoe(dims, layer_index, /*ep=*/nullptr, tp);
  RETURN_IF_ERROR(CheckTensorParallel(kind, dims, layer_index, tp->size()));
  if (tp->rank() < 0 || tp->rank() >= tp->size()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor parallelism: group ", tp->name(),
                                                   " has rank ", tp->rank(), " outside [0, ",
                                                   tp->size(), ")"));
  }
  // Cut from the unsharded layer's parameters, so that the shards are its slices by
  // construction.
  ASSIGN_OR_RETURN(std::unique_ptr<Layer> whole_layer, MakeLayer(kind, dims, layer_index));
  std::vector<Tensor> whole;
  for (Tensor* p : whole_layer->params()) whole.push_back(std::move(*p));
  ASSIGN_OR_RETURN(std::vector<Tensor> shard,
                   TensorParallelShard(kind, dims, whole, tp->rank(), tp->size()));
  if (kind == "embedding") {
    return std::make_unique<TpEmbeddingLayer>(dims, layer_index, std::move(shard), tp);
  }
  if (kind == "attention") return std::make_unique<TpAttentionLayer>(dims, std::move(shard), tp);
  if (kind == "mlp") return std::make_unique<TpMlpLayer>(dims, std::move(shard), tp);
  if (kind == "mamba") return std::make_unique<TpMambaLayer>(dims, std::move(shard), tp);
  return std::make_unique<TpHeadLayer>(dims, layer_index, std::move(shard), tp);
}

absl::StatusOr<std::vector<Tensor>> MergeTensorParallelShards(
    absl::string_view kind, const ModelDims& dims, const std::vector<std::vector<Tensor>>& shards) {
  const int size = static_cast<int>(shards.size());
  if (size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor parallelism: no shards to merge (", kind, ")"));
  }
  if (kind == "moe") return MergeParallelMoeShards(dims, {shards});
  RETURN_IF_ERROR(CheckSplit(kind, dims, size, kind));
  const std::vector<ParamLayout> layout = LayoutOf(kind, dims);
  std::vector<Tensor> whole;
  for (const ParamLayout& p : layout) whole.emplace_back(p.rows, p.cols);
  for (int m = 0; m < size; ++m) {
    const std::vector<Tensor>& shard = shards[static_cast<size_t>(m)];
    if (shard.size() != layout.size()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor parallelism: ", kind, " member ", m,
                                                     " of ", size, " has ", shard.size(),
                                                     " tensors, expected ", layout.size()));
    }
    for (size_t i = 0; i < layout.size(); ++i) {
      const ParamLayout want = ShardLayout(layout[i], size);
      if (shard[i].rows() != want.rows || shard[i].cols() != want.cols) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor parallelism: ", kind, " member ", m, " of ", size, " tensor ", i,
                         " is ", ShapeOf(shard[i].rows(), shard[i].cols()), ", expected ",
                         ShapeOf(want.rows, want.cols)));
      }
      if (layout[i].split == Split::kReplicated && m > 0 && !SameBits(shard[i], shards[0][i])) {
        return absl::InvalidArgumentError(absl::StrCat("tensor parallelism: ", kind, " tensor ", i,
                                                       " is replicated but member ", m,
                                                       "'s copy differs from member 0's"));
      }
      if (layout[i].split != Split::kReplicated || m == 0) {
        Place(shard[i], layout[i].split, m, &whole[i]);
      }
    }
  }
  return whole;
}

absl::StatusOr<std::vector<Tensor>> TensorParallelShard(absl::string_view kind,
                                                        const ModelDims& dims,
                                                        const std::vector<Tensor>& whole, int rank,
                                                        int size) {
  if (kind == "moe") return ParallelMoeShard(dims, whole, /*ep_rank=*/0, /*ep=*/1, rank, size);
  RETURN_IF_ERROR(CheckSplit(kind, dims, size, kind));
  if (rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor parallelism: rank ", rank, " outside [0, ", size, ") (", kind, ")"));
  }
  const std::vector<ParamLayout> layout = LayoutOf(kind, dims);
  if (whole.size() != layout.size()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor parallelism: whole ", kind, " has ",
                                                   whole.size(), " tensors, expected ",
                                                   layout.size()));
  }
  std::vector<Tensor> shard;
  for (size_t i = 0; i < layout.size(); ++i) {
    if (whole[i].rows() != layout[i].rows || whole[i].cols() != layout[i].cols) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor parallelism: whole ", kind, " tensor ", i, " is ",
                       ShapeOf(whole[i].rows(), whole[i].cols()), ", expected ",
                       ShapeOf(layout[i].rows, layout[i].cols)));
    }
    shard.push_back(Slice(whole[i], layout[i].split, rank, size));
  }
  return shard;
}

TensorParallelComm TensorParallelCommOf(absl::string_view kind, const ModelDims& dims, int tp) {
  TensorParallelComm comm;
  if (tp <= 1) return comm;
  const int64_t tokens = int64_t{dims.batch} * dims.seq_len;
  const int64_t activations = tokens * dims.hidden;  // [T, h]
  // Mamba's channel-mixing projections: [T, d + 2N].
  const int64_t mixed = tokens * (int64_t{dims.expand} * dims.hidden + 2 * int64_t{dims.state});
  auto add = [&comm](TpPass pass, TpCollectiveOp op, int64_t floats) {
    comm.calls.push_back({pass, op, floats});
  };
  using Op = TpCollectiveOp;
  if (kind == "embedding") {
    add(TpPass::kForward, Op::kAllReduceSum, activations);
  } else if (kind == "attention" || kind == "mlp") {
    add(TpPass::kForward, Op::kAllReduceSum, activations);
    add(TpPass::kBackwardInput, Op::kAllReduceSum, activations);
  } else if (kind == "mamba") {
    add(TpPass::kForward, Op::kAllReduceSum, mixed);
    add(TpPass::kForward, Op::kAllReduceSum, activations);
    add(TpPass::kBackwardInput, Op::kAllReduceSum, mixed);
    add(TpPass::kBackwardInput, Op::kAllReduceSum, activations);
  } else if (kind == "head") {
    add(TpPass::kForward, Op::kAllGather, tokens * 3);  // [max, sum, target logit] per token
    add(TpPass::kBackwardInput, Op::kAllReduceSum, activations);
  } else if (kind == "moe") {  // experts split by their FFN width (executor/layers/expert_parallel.h)
    const ParallelMoeCollectives moe = ParallelMoeCollectivesPerMicroBatch(dims, /*ep=*/1, tp);
    for (int i = 0; i < moe.forward.tp_all_reduces; ++i) {
      add(TpPass::kForward, Op::kAllReduceSum,
          moe.forward.tp_all_reduce_floats / moe.forward.tp_all_reduces);
    }
    for (int i = 0; i < moe.backward_input.tp_all_reduces; ++i) {
      add(TpPass::kBackwardInput, Op::kAllReduceSum,
          moe.backward_input.tp_all_reduce_floats / moe.backward_input.tp_all_reduces);
    }
  }
  for (const TensorParallelCall& c : comm.calls) {
    const bool forward = c.pass == TpPass::kForward;
    if (c.op == Op::kAllGather) {
      ++comm.forward_allgathers;
      comm.forward_allgather_floats += c.floats;
    } else if (forward) {
      ++comm.forward_allreduces;
      comm.forward_floats += c.floats;
    } else {
      ++comm.backward_allreduces;
      comm.backward_floats += c.floats;
    }
  }
  return comm;
}

}  // namespace octopipe::executor
