// SimulateLayout: predicts a whole parallel layout (core/layout_plan.h) as the executor runs it
// (executor/layout_trainer.h): every replica's pipeline runs its schedule, and each rank sums
// each layer's gradients over its DP group by a ring all-reduce on a communication thread that
// overlaps the rest of the backward pass.
//
// Model:
//   * Pipelines. Each distinct pipeline is costed on the cluster of its replica 0: one device
//     per TP group, on the node (and hardware) of the group's first GPU (PipelineCluster), with
//     the model's training degrees as the layout search sets them (ModelForLayout: tp, ep, the
//     EP ranks sharing replica 0's stage-0 node, ZeRO over DP), and its schedule evaluated with
//     the timeline. Every replica of a pipeline runs the same times; all start together.
//   * Gradient buckets, as the executor forms them: per rank and held layer, the layer's
//     param_bytes on its pipeline device (the problem builder's layer cost: per TP rank, experts
//     divided by EP). With ep > 1 a MoE layer is two buckets, in this order: its dense part
//     (router, norm, shared experts: summed over every replica) and its experts (over the
//     replicas with the same EP rank). The split is the cost model's own: the expert parameters
//     per rank are (param_count at EP 1 - param_count at EP ep) / (ep - 1) (CostModel::Cost,
//     measured param_bytes ignored for the split), and param_bytes is divided in that ratio.
//     Under vocabulary parallelism the head (and an input embedding) is one shard per device,
//     param_bytes × the device's vocabulary columns / the vocabulary, summed over the ranks of
//     the same device in every replica.
//   * Ready: a layer's bucket when its rank's last W or BW op of the stage holding it ends; a
//     vocabulary shard when the rank's part of the iteration ends (DeviceEnd).
//   * Each rank runs its buckets one at a time in descending layer order (dense before experts);
//     an all-reduce of n members starts at the latest of its members' ready times and the ends
//     of their previous all-reduces, and takes OverlappedRingAllReduceSeconds(bytes, n, link,
//     start, busy until): at the link's overlapped all-reduce figures while the ranks compute,
//     at the idle ones after. Busy until the last of its members' ends (DeviceEnd; a GPU's
//     contention is its own), or, on an executor's ranks (Cluster::executor_ranks: processes
//     sharing a host's cores, as the profile measured the figures), the last end of any rank on
//     the members' nodes. The link is the node's intra-node link when every member is on that
//     node, else the inter-node link. Groups of one rank do nothing. Concurrent all-reduces do
//     not share link bandwidth (as DpSyncSeconds in tuner/layout.cc), and the final loss
//     all-reduce is neglected.
//   * The iteration ends when every rank's part of the pipeline and its last all-reduce are
//     done (the synchronous objective).
// A single-pipeline layout (one replica) gives exactly the evaluator's iteration time.
//
// Deterministic; thread-safe (no shared state).
#ifndef OCTOPIPE_TUNER_LAYOUT_SIMULATION_H_
#define OCTOPIPE_TUNER_LAYOUT_SIMULATION_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cluster.h"
#include "core/cost_model.h"
#include "core/layout_plan.h"
#include "core/model_graph.h"

namespace octopipe {

struct LayoutSimulation {
  double iteration_time_s = 0;   // last op or last gradient all-reduce of any rank (synchronous)
  double pipeline_time_s = 0;    // the slowest pipeline alone (no DP sync)
  double dp_sync_exposed_s = 0;  // iteration - pipeline: what the overlap did not hide
  double dp_sync_total_s = 0;    // the slowest rank's summed all-reduce seconds
  double tokens_per_s = 0;       // global_microbatches * tokens per micro-batch / iteration
  double bubble_ratio = 0;       // 1 - sum of every rank's busy seconds / (ranks * iteration)
  std::vector<double> pipeline_iteration_s;  // per distinct pipeline (the evaluator's)
  std::vector<double> peak_memory_bytes;     // per rank (its pipeline device's peak)
  // Per rank: of that peak, the live activations (the peak less the weights, gradients and
  // optimizer state of the device's stages) — what `train --json` measures as
  // peak_activation_bytes.
  std::vector<double> peak_activation_bytes;
  bool fits = true;                          // every pipeline fits in memory
};

// kInvalidArgument naming the field: ValidateLayoutPlan (against model.layers.size()),
// CheckLayoutAgainstModel, num_ranks beyond the cluster's GPUs, a TP group across nodes; the
// problem builder's and evaluator's errors prefixed with "pipelines[p].plan: ".
// `layer_time_factors`: the calibration, as TunerOptions::layer_time_factors (empty: none).
absl::StatusOr<LayoutSimulation> SimulateLayout(const ModelGraph& model, const Cluster& cluster,
                                                const CostModel& cost, const LayoutPlan& plan,
                                                bool link_contention = false,
                                                const std::vector<double>& layer_time_factors = {});

// Shared with the layout search (tuner/layout.cc).

// The cluster a pipeline runs on: device j is the TP group whose first GPU (cluster device) is
// device_first_gpus[j], with that GPU's node and hardware; each run of consecutive devices on
// one node forms one node. Hardware, inter-node link and memory reserve are the cluster's.
Cluster PipelineCluster(const Cluster& cluster, const std::vector<int>& device_first_gpus,
                        const std::string& name);

// Of the replicas of EP group 0 (dp ranks [0, ep)), how many have their first pipeline
// device's TP group on the node of dp rank 0's; 0 without expert parallelism. What
// SimulateLayout passes to ModelForLayout for `plan` on `cluster`.
int EpRanksPerNode(const Cluster& cluster, const LayoutPlan& plan);

// The model with the training degrees of `layout`: tp_degree, ep_degree, ep_ranks_per_node
// (`ep_ranks_per_node` when ep > 1, else 0) and zero_degree = max(the model's, dp).
ModelGraph ModelForLayout(const ModelGraph& model, const ParallelLayout& layout,
                          int ep_ranks_per_node);

}  // namespace octopipe

#endif  // OCTOPIPE_TUNER_LAYOUT_SIMULATION_H_
