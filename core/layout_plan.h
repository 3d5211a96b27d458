// LayoutPlan: a whole parallel layout — every distinct pipeline's plan (partition, placement,
// schedule), the data-parallel replicas that run each, the micro-batches of the global batch
// each replica takes, and which executor rank plays which part (pipeline, replica, pipeline
// device, tensor-parallel rank, expert-parallel rank). What `octopipe plan --out` writes, the
// Plan RPC returns, `simulate --plan` predicts and `train --plan` runs; a single-pipeline Plan
// is the layout with one pipeline, one replica and TP 1 (SinglePipelineLayout).
//
// Ranks. The layout runs on `num_ranks` executor ranks (the cluster's GPUs in order, as the
// layout search numbers them). Replica r of a pipeline puts pipeline device d on the TP group
// of ranks device_ranks[d] .. device_ranks[d] + tp - 1; TP rank t of that device is the rank
// device_ranks[d] + t. Every rank plays exactly one (pipeline, replica, device, TP rank).
//
// Data parallelism. The global batch is `global_microbatches` micro-batches; replica r takes
// [first_microbatch, first_microbatch + plan.num_microbatches) of them, and the replicas' ranges
// tile [0, global) exactly. Replicas may run different pipelines (heterogeneous replicas:
// other partitions, device counts and shares of the batch, as on mixed clusters and after a
// node is lost). Each layer's gradients are summed over every rank that holds the same shard
// of it (one per replica, per TP rank), the loss of each micro-batch scaled by 1 / global, so
// the step equals single-process training on the global batch.
//
// Expert parallelism. With ep > 1 the replicas with dp_rank in [g·ep, (g+1)·ep) form EP group
// g: each holds experts / ep of every MoE layer's experts (ep_rank = dp_rank mod ep) and they
// exchange tokens by all-to-all, so they must run the same pipeline (same schedule).
#ifndef OCTOPIPE_CORE_LAYOUT_PLAN_H_
#define OCTOPIPE_CORE_LAYOUT_PLAN_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/model_graph.h"
#include "core/plan.h"

namespace octopipe {

// How GPUs split into pipeline (PP), tensor (TP), expert (EP) and data (DP) parallelism.
struct ParallelLayout {
  int pp = 1, tp = 1, ep = 1, dp = 1;
  bool pp_outer = true;  // rank order TP, DP, PP (Megatron-LM's default); else TP, PP, DP

  int gpus() const { return pp * tp * dp; }
  // "PP16 x TP1 x EP64 x DP128 (pp outer)".
  std::string ToString() const;
  // "tp-dp-pp" (pp_outer) or "tp-pp-dp".
  std::string RankOrder() const;
};

struct PipelineReplica {
  int dp_rank = 0;           // among all replicas of the layout, 0 .. dp - 1
  int first_microbatch = 0;  // of the global batch
  std::vector<int> device_ranks;  // per pipeline device: the first rank of its TP group
};

struct LayoutPipelinePlan {
  Plan plan;  // devices numbered within the pipeline; num_microbatches per replica
  std::vector<PipelineReplica> replicas;
};

struct LayoutPlan {
  ParallelLayout layout;  // pp: the most pipeline devices of any pipeline
  int num_ranks = 0;
  int global_microbatches = 0;
  std::vector<LayoutPipelinePlan> pipelines;

  int num_replicas() const;
  bool single_pipeline() const {  // one pipeline, one replica, no TP: a plain Plan
    return pipelines.size() == 1 && pipelines[0].replicas.size() == 1 && layout.tp == 1;
  }
};

// What one rank does.
struct RankRole {
  int pipeline = 0;
  int replica = 0;  // index into pipelines[pipeline].replicas
  int dp_rank = 0;
  int device = 0;   // pipeline device
  int tp_rank = 0;
  int ep_rank = 0;  // dp_rank mod ep
};

// The layout of one pipeline on ranks 0 .. P-1, one replica, TP 1.
LayoutPlan SinglePipelineLayout(const Plan& plan);

// Checks everything the header describes, with kInvalidArgument naming the field and value:
// each pipeline's plan (ValidatePlanShape against `num_layers`), degrees >= 1, dp = number of
// replicas with dp_ranks 0 .. dp - 1, device_ranks per pipeline device, ranks covering
// 0 .. num_ranks - 1 exactly once (pp·tp·dp when every pipeline has pp devices), micro-batch
// ranges tiling the global batch, EP groups on one pipeline, and vocab_parallel only with
// TP 1 and replicas of one pipeline.
absl::Status ValidateLayoutPlan(const LayoutPlan& plan, int num_layers);

// The model's dimensions against the degrees: TP must divide every attention layer's heads
// (and KV heads), every MLP's and expert's FFN width and every Mamba layer's inner width and
// heads; EP every MoE layer's experts. kInvalidArgument naming the layer and field.
absl::Status CheckLayoutAgainstModel(const ParallelLayout& layout, const ModelGraph& model);

// rank -> role; the plan must be valid (ValidateLayoutPlan).
std::vector<RankRole> RankRoles(const LayoutPlan& plan);

}  // namespace octopipe

#endif  // OCTOPIPE_CORE_LAYOUT_PLAN_H_
