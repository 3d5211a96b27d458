// Layout search: how a cluster's GPUs are split into pipeline (PP), tensor (TP), expert (EP)
// and data (DP) parallelism, and which GPUs form which pipeline — chosen by the planner when
// the request does not fix it, then each distinct pipeline tuned by Tune (tuner.h).
//
// Model of a layout (PP × TP × DP GPUs, EP dividing DP):
//   * Ranks are ordered TP innermost, then DP (EP groups are consecutive DP ranks), then PP
//     (`pp_outer`, Megatron-LM's default order), or TP, PP, DP (`!pp_outer`: each replica's
//     pipeline on consecutive GPUs). Rank i is the cluster's GPU i (node order); a TP group must
//     sit inside one node.
//   * A pipeline device is one TP group: the cost model divides its work and memory by TP and
//     adds the TP all-reduces and EP all-to-alls (CostModel::Comm) on the group's node link and
//     the inter-node link, with as many EP peers on the node as the rank order puts there.
//   * The global batch is `global_microbatches` micro-batches per iteration; each of the DP
//     replicas runs M = global / DP of them. The optimizer state is sharded over DP (dense
//     parameters) and DP / EP (experts): Megatron's distributed optimizer.
//   * Replicas whose pipelines differ (hardware, node boundaries: mixed clusters) are tuned
//     separately; the iteration waits for the slowest. After the pipelines, each device
//     all-reduces its gradients over its DP group (ring; over NVLink when the group is inside
//     one node, else the inter-node link), not overlapped: iteration = pipeline + dp_sync.
//   Candidates are compared by iteration time at the same global batch (= tokens/s).
//
// Search: enumerate every layout the request leaves open (PP dividing the GPUs and at most
// the layer count; TP in {1, 2, 4, 8} dividing the node size; EP dividing DP and the expert
// count; both rank orders), prune those whose weights, gradients and optimizer state cannot
// fit even spread perfectly, bound the rest (the tuner's certified lower bound + the least
// DP synchronisation), and tune the most promising ones in order of an estimate (the bound
// with a 1F1B bubble), each with an equal share of the remaining time budget, skipping any
// whose lower bound already loses to the best tuned. A layout with TP > 1 or several distinct
// pipelines keeps the head whole (the executor splits it only with TP 1 and replicas of one
// pipeline); with vocab_parallel on such layouts are ruled out. One implementation for `octopipe plan`,
// the Plan RPC and bench:plan_quality.
//
// Deterministic for a seed when the budget is not exhausted; thread-safe (no shared state).
#ifndef OCTOPIPE_TUNER_LAYOUT_H_
#define OCTOPIPE_TUNER_LAYOUT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cluster.h"
#include "core/cost_model.h"
#include "core/layout_plan.h"
#include "core/model_graph.h"
#include "tuner/layout_simulation.h"
#include "tuner/tuner.h"

namespace octopipe {

// What the request fixes; 0 (or false) leaves it to the search.
struct LayoutRequest {
  int pp = 0, tp = 0, ep = 0, dp = 0;
  int gpus = 0;  // the cluster's first GPUs to use; 0: all
  // Micro-batches per iteration over all replicas; 0: the model's training.num_microbatches.
  int global_microbatches = 0;
  // > 0: layouts whose replicas would each run more micro-batches than this are not considered
  // (the limit a single pipeline has on its micro-batches, applied per replica: a global batch
  // of 15,360 sequences over 128 replicas is 120 micro-batches for each).
  int max_microbatches_per_pipeline = 0;
  // Up to 2 x this many layouts of the best estimates are screened with equal shares of half
  // the budget (the rest only bounded), and the fastest is tuned on with the other half; more
  // finds better layouts on big clusters at the cost of a smaller share each.
  int max_tuned = 3;
  // Failure domains: > 0 prefers, among the layouts tuned, one whose every DP replica lies
  // within one node when it is predicted at most this fraction slower than the fastest (0.05:
  // 5%). Losing a node then leaves whole replicas, so every layer keeps a live copy and the
  // survivors recover from each other's memory instead of a checkpoint (as Oobleck's
  // node-sized pipeline templates). Agent jobs ask for it; 0: the fastest, always.
  double node_local_tolerance = 0;
};

// Whether every DP replica of `layout` runs on GPUs of one node of `cluster` (the rank order
// of the layout, GPUs in cluster order), on at least two nodes, without expert parallelism
// (EP shards are not copies) — so that a lost node leaves a whole replica.
bool ReplicasWithinNodes(const Cluster& cluster, const ParallelLayout& layout);

// One layout the search looked at.
struct LayoutConsidered {
  ParallelLayout layout;
  int microbatches = 0;    // per replica
  // "chosen", "tuned", "pruned: memory", "pruned: bound", "not tuned", "failed: <why>"
  std::string outcome;
  double bound_s = 0;      // lower bound on the iteration (pipeline + DP sync)
  double estimate_s = 0;   // the ordering estimate
  double iteration_s = 0;  // when tuned (inf when it does not fit)
};

// One distinct pipeline of the chosen layout and the replicas that run it.
struct LayoutPipeline {
  std::vector<int> replicas;                 // DP ranks with this pipeline
  std::vector<std::vector<int>> device_gpus; // per pipeline device of the first replica: its TP group
  Cluster cluster;                           // the pipeline's devices (one per TP group)
  TuneResult tune;
  double dp_sync_s = 0;  // the slowest device's gradient all-reduce
};

struct LayoutResult {
  ParallelLayout layout;
  ModelGraph model;  // training options of the layout (tp, ep, zero degrees)
  int microbatches = 0;            // per replica
  int global_microbatches = 0;
  std::vector<LayoutPipeline> pipelines;  // [0] the slowest: the one the iteration waits for
  bool feasible = false;
  double pipeline_time_s = 0;   // the slowest pipeline's objective
  double dp_sync_s = 0;
  double iteration_time_s = 0;  // pipeline + DP sync
  double tokens_per_s = 0;      // over all replicas
  std::vector<LayoutConsidered> considered;
  double tuning_wall_s = 0;
  // The chosen layout as the executor runs it (tuner/layout_simulation.h): the DP all-reduces
  // overlapped with the backward, layer by layer, instead of after it. For the synchronous
  // objective the tuned layouts are chosen by this iteration (the candidates are ordered and
  // pruned by the non-overlapped bound and estimate, which stay valid bounds); for the steady
  // state, which the layout simulation does not model, by iteration_time_s. SimulateLayout(ToLayoutPlan) with
  // the tuner's link_contention and layer_time_factors; when it fails (a plan the executor
  // cannot run, e.g. TP not dividing the heads), `simulated` is empty and simulation_error
  // says why.
  LayoutSimulation simulated;
  std::string simulation_error;  // "" when `simulated` holds the prediction
};

// The chosen layout as a plan the executor runs (core/layout_plan.h): every distinct
// pipeline's tuned plan with its replicas, replica r taking micro-batches [r·M, (r+1)·M) of the
// global batch and its pipeline device j the TP group of GPUs (= ranks) the rank order gives.
LayoutPlan ToLayoutPlan(const LayoutResult& result);

// kInvalidArgument naming the field when the request cannot be met ("layout.pp: 7 does not
// divide 32 GPUs"); a layout that does not fit in memory is a result with feasible == false.
// `tuner` supplies objective, budget (for the whole search), seed, threads, clock, stop and
// constraints; its num_devices and num_microbatches are ignored.
absl::StatusOr<LayoutResult> TuneLayout(const ModelGraph& model, const Cluster& cluster,
                                        const CostModel& cost_model, const TunerOptions& tuner,
                                        const LayoutRequest& request);

}  // namespace octopipe

#endif  // OCTOPIPE_TUNER_LAYOUT_H_
