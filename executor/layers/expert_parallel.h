// The MoE layer (layers/moe.h) sharded over expert parallelism (EP) and, optionally, tensor
// parallelism (TP) inside each expert, Megatron style.
//
// Layout. X experts of SwiGLU width F. An EP group of E members (X % E == 0): member i holds
// experts [i X/E, (i+1) X/E). A TP group of T members (F % T == 0): member r holds columns
// [r F/T, (r+1) F/T) of each of those experts' W1 and W3 and the same rows of W2. The norm gain
// and the router are replicated on every member. EP members are data-parallel replicas, so each
// runs its OWN micro-batch; the TP members of one replica run the same micro-batch (same x). A
// member is in the EP group of the replicas' members with its TP rank and in the TP group of its
// replica. Parameters start as MoeLayer's of the same (seed, layer index), cut as above, and the
// output for a member's tokens is the unsharded layer's output on those tokens.
//
// Per micro-batch on a member, T_m its tokens, H = hidden, k = top_k:
//  F: n = RMSNorm(x), routing as MoeLayer (MoeRoute). The T_m k copies (token, slot) are sorted by
//     expert, hence by owner. EP AllToAllV of counts (X/E floats to each member: its experts'
//     copy counts), then EP AllToAllV of the copies' rows of n; each owner applies its slice of
//     each of its experts to the rows it received (sources in member order, token order within a
//     source); EP AllToAllV of the (TP-partial) expert outputs back; z = sum over the copies of
//     gate * output, TP AllReduceSum of z [T_m, H]; y = x + z.
//  B: per copy dout = gate * dy to the owners (EP AllToAllV); SwiGLU backward of the slice gives
//     TP-partial rows of dn, sent back (EP AllToAllV) and summed per token; with the TP-partial
//     gate gradients dy . output, one TP AllReduceSum of [T_m, H + k]; then the router logits'
//     gradient (MoeLogitGradient), dn += dlogits W_r^T and dx = dy + RMSNorm backward. So the
//     input gradient is complete before the norm's backward, and every TP member of a replica
//     computes bit-identical gain and router gradients.
//  W: no communication. Each member's expert weight gradients accumulate over the rows its
//     experts processed, from every EP member's micro-batch; the gain and router gradients over
//     its own tokens only: summing those over the replicas is the data-parallel all-reduce's job,
//     as for any replicated parameter.
// Counts travel as floats (exact below 2^24 copies per member and expert; larger micro-batches
// are refused as a communication failure).
//
// Failures: the first failed collective is kept as comm_status(); from then on the layer skips
// its collectives (its peers then fail by their transport's timeout or abort) and computes on
// with zeros where data did not arrive. A layer built with a group of size 1 (or none) never
// communicates. Not thread-safe, like every Layer; the collectives outlive the layer.
#ifndef OCTOPIPE_EXECUTOR_LAYERS_EXPERT_PARALLEL_H_
#define OCTOPIPE_EXECUTOR_LAYERS_EXPERT_PARALLEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "executor/collective.h"
#include "executor/layer.h"
#include "executor/tensor.h"

namespace octopipe::executor {

// kInvalidArgument naming the field when the MoE dims are invalid (hidden, experts, moe_ffn
// <= 0, top_k outside [1, experts]), ep or tp < 1, ep does not divide experts ("expert
// parallelism: 3 does not divide experts = 4 (layer 4, moe)") or tp does not divide moe_ffn
// ("tensor parallelism: 5 does not divide moe_ffn = 32 (layer 4, moe)").
absl::Status CheckParallelMoe(const ModelDims& dims, int layer_index, int ep, int tp);

// The shard of MoE layer `layer_index` for member ep->rank() of the EP group and tp->rank() of
// the TP group (either may be null: a group of size 1). Both must outlive the layer. Its kind()
// is "moe". kInvalidArgument as CheckParallelMoe, and for a negative layer_index.
absl::StatusOr<std::unique_ptr<Layer>> MakeParallelMoe(const ModelDims& dims, int layer_index,
                                                       Collective* ep, Collective* tp);

// params() (and grads(), same order): gain, router — replicated over EP and TP, the first
// ParallelMoeReplicatedParams() — then the member's experts' W1, W3, W2 (its TP slices) in
// expert order.
int ParallelMoeReplicatedParams();

// Checkpoints hold whole layers, in MoeLayer::params() order. Merge: shards[ep_rank][tp_rank]
// are every member's params() (ep = shards.size(), tp = shards[0].size()); the replicated
// tensors are taken from member [0][0] (replicas hold the same bits). Shard: member
// (ep_rank, tp_rank)'s params() cut from the whole. Exact copies, so a round trip is
// bit-identical. kInvalidArgument naming the member and tensor for a wrong count or shape, a
// rank out of range, or a split CheckParallelMoe refuses.
absl::StatusOr<std::vector<Tensor>> MergeParallelMoeShards(
    const ModelDims& dims, const std::vector<std::vector<std::vector<Tensor>>>& shards);
absl::StatusOr<std::vector<Tensor>> ParallelMoeShard(const ModelDims& dims,
                                                     const std::vector<Tensor>& whole, int ep_rank,
                                                     int ep, int tp_rank, int tp);

// The collectives one op of one micro-batch runs on each member, for the simulator to cost what
// runs. Zero for a group of size 1.
struct ParallelMoeOpCollectives {
  // EP AllToAllV of per-expert copy counts: experts / ep floats to every EP member (`experts`
  // floats sent in all, itself included).
  int ep_count_all_to_alls = 0;
  // EP AllToAllV of routed rows, in pairs: out to the experts, a member sends routed_floats
  // (the rows for its own experts stay with it) and receives what the group routes to its
  // experts, which depends on the routing (routed_floats on average over members); back, the
  // reverse.
  int ep_row_all_to_alls = 0;
  // TP AllReduceSum, each of tp_all_reduce_floats.
  int tp_all_reduces = 0;
  int64_t tp_all_reduce_floats = 0;
};
struct ParallelMoeCollectives {
  // The formula's inputs: tokens = batch * seq_len of a micro-batch; routed_floats =
  // tokens * top_k * hidden.
  int64_t tokens = 0;
  int64_t routed_floats = 0;
  ParallelMoeOpCollectives forward;          // 1 count + 2 row all-to-alls; 1 all-reduce [T, H]
  ParallelMoeOpCollectives backward_input;   // 2 row all-to-alls; 1 all-reduce [T, H + top_k]
  ParallelMoeOpCollectives backward_weight;  // none
};
// dims and the split must pass CheckParallelMoe.
ParallelMoeCollectives ParallelMoeCollectivesPerMicroBatch(const ModelDims& dims, int ep, int tp);

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_LAYERS_EXPERT_PARALLEL_H_
