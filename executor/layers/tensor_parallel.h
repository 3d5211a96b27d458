// Tensor parallelism (Megatron-LM style) of the reference model's layers: a group of `tp`
// members (threads or processes, joined by a Collective, executor/collective.h) each holds one
// shard of a layer and runs the layer's F, B and W on the same replicated input; together they
// compute what the unsharded layer (MakeLayer, executor/layer.h) computes.
//
// What each kind splits (member t of tp holds the t-th of tp equal, consecutive blocks) and what
// its ops communicate per micro-batch of T = batch * seq_len tokens (hidden h):
//  - embedding: the table's rows (vocabulary). F: each member looks its tokens up in its rows
//    (zero for the others') and one all-reduce of [T, h] sums them into the whole embedding,
//    bit for bit (one non-zero term per element). B: none (keeps dy). W: scatter-adds its rows.
//  - attention: the heads. W_q, W_k, W_v by columns (column-parallel), W_o by rows
//    (row-parallel). F: one all-reduce of the output projection's partial sums [T, h].
//    B: one all-reduce of the norm output's gradient dn [T, h].
//  - mlp: the FFN width. W_1, W_3 by columns, W_2 by rows. F and B as attention.
//  - mamba: the inner channels (d = expand * hidden). W_in's u and z columns of the member's
//    channels (the shard is [u block | z block]), b_dt and D by columns, W_dt, W_B, W_C, A_log
//    and W_out by rows. F: one all-reduce of [T, d + 2N], the member's partial sums of u W_dt,
//    u W_B and u W_C (each member keeps its channels of the step pre-activation, all of B_t and
//    C_t); the scan runs on the member's channels; one all-reduce of W_out's partial sums
//    [T, h]. B: one all-reduce of [T, d + 2N]: the step pre-activation's gradient (each member
//    writes its channels and zero elsewhere, so the sum is an exact all-gather) and the partial
//    sums of dB_t and dC_t over the member's channels; then one all-reduce of dn [T, h].
//  - head: W_out's columns (vocabulary), the maths of executor/layers/vocab_head.h. F: each
//    member's logits and per-token softmax statistics [T, 3] (max, sum, target logit), one
//    all-gather of the statistics, combined in member order, so the loss is bit-identical on
//    every member. B: one all-reduce of dn [T, h].
//  - moe: every expert's SwiGLU by its FFN width (moe_ffn), router and gain replicated: the MoE
//    layer of executor/layers/expert_parallel.h with a group of one for expert parallelism
//    (these functions delegate to it).
// W never communicates. RMSNorm gains are replicated: every member computes the same norm of the
// same input, and dn is all-reduced before the norm's backward (Megatron's "f" operator), so the
// gain's gradient, dx and every replicated output are bit-identical on all members.
//
// Parameters: a shard holds exactly its slice of the parameters MakeLayer initialises for the
// same (dims, layer index) (it is cut from them), in the unsharded layer's params() order with
// split tensors cut as above, so tensor-parallel training is single-process training.
// Checkpoints hold whole layers: MergeTensorParallelShards and TensorParallelShard convert.
//
// Thread safety: the functions are; a layer is not (like every Layer). A layer records its first
// communication failure in comm_status() and computes on.
#ifndef OCTOPIPE_EXECUTOR_LAYERS_TENSOR_PARALLEL_H_
#define OCTOPIPE_EXECUTOR_LAYERS_TENSOR_PARALLEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "executor/collective.h"
#include "executor/layer.h"
#include "executor/tensor.h"

namespace octopipe::executor {

// OK when `tp` members can split layer `kind` (tp divides what it splits; tp = 1 always can).
// kInvalidArgument naming the field and the values otherwise, e.g. "tensor parallelism: 3 does
// not divide heads = 4 (layer 2, attention)", and for an unknown kind or tp < 1.
absl::Status CheckTensorParallel(absl::string_view kind, const ModelDims& dims, int layer_index,
                                 int tp);

// Member tp->rank() of tp->size()'s shard of layer `kind` (embedding, attention, mlp, mamba,
// moe, head). `tp` must outlive the layer. Errors: those of CheckTensorParallel and MakeLayer.
absl::StatusOr<std::unique_ptr<Layer>> MakeTensorParallelLayer(absl::string_view kind,
                                                               const ModelDims& dims,
                                                               int layer_index, Collective* tp);

// The unsharded layer's tensors (params() order and shapes of MakeLayer's layer) from every
// member's tensors in its params() order (parameters, gradients or optimizer moments), members
// in order. A replicated tensor is taken from member 0. kInvalidArgument naming the member and
// tensor when a count or shape is wrong, tp does not divide, or replicated copies differ in any
// bit.
absl::StatusOr<std::vector<Tensor>> MergeTensorParallelShards(
    absl::string_view kind, const ModelDims& dims, const std::vector<std::vector<Tensor>>& shards);

// Member `rank` of `size`'s shard of the unsharded layer's tensors `whole` (the inverse of
// MergeTensorParallelShards). kInvalidArgument when a count or shape is wrong, size does not
// divide, or rank is outside [0, size).
absl::StatusOr<std::vector<Tensor>> TensorParallelShard(absl::string_view kind,
                                                        const ModelDims& dims,
                                                        const std::vector<Tensor>& whole, int rank,
                                                        int size);

// The collectives of one tensor-parallel shard per micro-batch, exactly the calls its ops make
// (dims.batch * dims.seq_len tokens), so the simulator can cost what runs.
enum class TpPass { kForward, kBackwardInput, kBackwardWeight };
enum class TpCollectiveOp {
  kAllReduceSum,  // `floats` in and out on every member
  kAllGather,     // every member contributes `floats` and receives tp * floats
};
struct TensorParallelCall {
  TpPass pass = TpPass::kForward;
  TpCollectiveOp op = TpCollectiveOp::kAllReduceSum;
  int64_t floats = 0;
};
struct TensorParallelComm {
  // All-reduces of F and of B: how many, and their floats summed over those calls.
  int forward_allreduces = 0;
  int64_t forward_floats = 0;
  int backward_allreduces = 0;
  int64_t backward_floats = 0;
  // All-gathers of F (the head's softmax statistics): how many, and each member's floats
  // summed over those calls. B never all-gathers and W never communicates.
  int forward_allgathers = 0;
  int64_t forward_allgather_floats = 0;
  // Every call, in the order F, then B, make them.
  std::vector<TensorParallelCall> calls;
};
// For a (kind, dims, tp) that CheckTensorParallel accepts; no calls for tp = 1 (a group of one
// communicates nothing) or for a kind that is not split.
TensorParallelComm TensorParallelCommOf(absl::string_view kind, const ModelDims& dims, int tp);

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_LAYERS_TENSOR_PARALLEL_H_
