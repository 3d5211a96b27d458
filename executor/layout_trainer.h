// TrainLayoutRank: one executor rank's part of a whole parallel layout (core/layout_plan.h) —
// data-parallel replicas (also heterogeneous: different partitions, device counts and shares of
// the batch), tensor parallelism inside a pipeline device and expert parallelism over the
// replicas of an EP group — equal to single-process training on the global batch.
//
// What each rank does:
//  * Its role (pipeline, replica, device, TP rank, EP rank) comes from the plan's rank map. Its
//    pipeline's engine runs on a SubTransport of the replica's ranks (TP rank t of each pipeline
//    device talks to TP rank t of the next), on micro-batches [first, first + M) of the global
//    batch, each loss scaled by 1 / global micro-batches.
//  * Layers: whole layers (TP 1), or their shards over the device's TP group
//    (executor/layers/tensor_parallel.h), and MoE layers over the EP group
//    (executor/layers/expert_parallel.h).
//  * Gradients: every layer's gradient is summed over the ranks holding the same shard of it in
//    the other replicas (its DP group; a MoE layer's router and gain over every replica, its
//    experts over the replicas with the same EP rank) by the transport's collective all-reduce
//    (Gloo: gloo::allreduce on a context per group; in-process: InProcGroup). The all-reduces
//    run on a communication thread, one per layer in descending layer order, each started as
//    soon as this rank has finished the layer's last weight-gradient op of the iteration, so
//    they overlap the rest of the backward pass; the optimizer steps once all are done. Every
//    rank creates its groups and runs its all-reduces in one global order (groups by member
//    list, layers descending), so no two ranks can wait on each other in opposite orders.
//  * The iteration's loss (IterationStats::loss, on every rank of a replica's last device) is
//    the global batch's mean, summed over the replicas.
//  * Checkpoints hold whole layers, so any layout (or a single pipeline) resumes from any other's:
//    each layer is written by the first rank of one whole copy of it (replica 0's ranks holding
//    it, every TP rank; a MoE layer under EP: EP group 0's), which gathers the copy's shards
//    (parameters and AdamW moments) point to point and merges them; a split head is written by
//    replica 0 as a single pipeline writes it. On resume each rank cuts its shard of every
//    whole layer (LoadRankCheckpoint's cutter).
// A single-pipeline layout runs TrainRank unchanged.
#ifndef OCTOPIPE_EXECUTOR_LAYOUT_TRAINER_H_
#define OCTOPIPE_EXECUTOR_LAYOUT_TRAINER_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/layout_plan.h"
#include "executor/model_spec.h"
#include "executor/trainer.h"
#include "executor/transport.h"

namespace octopipe::executor {

// Whether the layout runs on this model: ValidateLayoutPlan, and the TP / EP degrees against
// every layer's dimensions (kInvalidArgument naming the layer and field).
absl::Status CheckLayoutRunnable(const ModelSpec& spec, const LayoutPlan& plan);

// Trains rank `rank` (of plan.num_ranks = transport->size()) of the layout. Errors name the
// iteration and the peer or group that failed.
absl::StatusOr<RankResult> TrainLayoutRank(const ModelSpec& spec, const LayoutPlan& plan,
                                           int rank, Transport* transport,
                                           const TrainOptions& options);

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_LAYOUT_TRAINER_H_
