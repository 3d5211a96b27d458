// After a node is lost: the ways a job can go on from the layout it was running, besides a
// new layout over every device left (TuneLayout), each predicted as the executor runs it
// (SimulateLayout) and with the time to switch to it counted — so the planner publishes the
// option that finishes the job's remaining iterations soonest, not merely the fastest layout.
//
// The options built from the current layout:
//   * "drop replicas": the DP replicas with every GPU on a live node keep their pipelines,
//     re-tuned for their new share of the global batch on the same GPUs (warm-started from
//     their partition). The batch is split as evenly as whole micro-batches allow, so the step
//     still equals single-process training on the global batch. GPUs of a broken replica that
//     survived stay idle.
//   * "re-partition": as "drop replicas", and each broken replica that kept at least one
//     device (a whole TP group on a live node) becomes a pipeline over those devices alone —
//     a heterogeneous replica, as Oobleck re-instantiates a smaller pipeline template — with a
//     share of the batch in proportion to its predicted throughput. Only when some broken
//     replica kept a device.
// With expert parallelism (ep > 1) the replicas of an EP group (dp ranks [g·ep, (g+1)·ep),
// core/layout_plan.h) each hold 1/ep of every MoE layer's experts, so a replica is only of use
// with its whole group:
//   * "drop replicas" is offered only when the experts are replicated (dp / ep >= 2 EP groups,
//     each holding every expert) and at least one EP group has every replica whole: it drops
//     every EP group with a broken replica (the GPUs such a group kept stay idle) and
//     keeps the complete groups with their pipelines, renumbered in order so each replica keeps
//     its EP rank (its experts' shard) and EP stays ep — dp becomes ep × the groups kept. A
//     group's replicas exchange tokens in lock step, so they run one pipeline with one share:
//     the global batch is split as evenly as whole micro-batches allow over the groups kept
//     (global / ep per replica of a group), re-tuned as above. No expert shard moves: the
//     switch is the restart alone unless the re-tuned partitions move layers between a
//     pipeline's own GPUs (costed as below, as for every option).
//   * "re-partition" is never offered (a broken replica's experts' shard is lost with it: only
//     a new layout re-shards them).
// Neither is offered for a layout with a split head (vocabulary parallelism: one pipeline's
// replicas only) or that no replica survives. Options with several pipelines or TP > 1 keep
// the head whole (as the layout search does).
//
// Switch time (every option, the new layout's too): `restart_s` (processes, rendezvous and
// loading: paid by every option alike) plus the slowest rank's state moved. A rank needs a
// layer shard (layer, TP rank of TP degree, EP rank of EP degree) that its GPU did not hold in
// the current layout; its static bytes (weights, gradients and optimizer state, CostModel::Cost
// under the new degrees — an upper bound: gradients need not move) come over the node's link
// when a surviving GPU of its node held that shard, else over the inter-node link (from
// another node's memory, or its checkpoint). Options whose ranks keep their GPUs move nothing.
// total_s = switch_s + remaining_iterations × the predicted iteration (synchronous).
//
// Deterministic for a seed; thread-safe (no shared state).
#ifndef OCTOPIPE_TUNER_NODE_LOSS_H_
#define OCTOPIPE_TUNER_NODE_LOSS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cluster.h"
#include "core/cost_model.h"
#include "core/layout_plan.h"
#include "core/model_graph.h"
#include "tuner/layout_simulation.h"
#include "tuner/tuner.h"

namespace octopipe {

// Where a rank runs: its node's name and its GPU on that node.
using GpuSlot = std::pair<std::string, int>;

struct NodeLossRequest {
  LayoutPlan current;                   // the layout that was running (valid)
  std::vector<GpuSlot> current_slots;   // per rank of `current`
  int remaining_iterations = 0;         // of the job, from the last completed one
  double restart_s = 0;                 // see the top comment
};

struct NodeLossOption {
  std::string kind;     // "drop replicas", "re-partition", "new layout"
  std::string summary;  // what it keeps and changes, for logs and `jobs get`
  LayoutPlan plan;
  // Its ranks' GPUs, in rank order, and the cluster they form (each node's used GPUs; ranks
  // numbered in node order, as the layout search numbers them).
  std::vector<GpuSlot> slots;
  Cluster cluster;
  std::vector<TuneResult> tunes;  // per pipeline of `plan`
  LayoutSimulation predicted;
  double moved_bytes = 0;  // the slowest rank's state to fetch
  double switch_s = 0;
  double total_s = 0;
};

// The switch time of going from `request.current` to `plan` run on `slots` (see the top
// comment); `cluster` holds the GPUs of `slots` (their links and hardware) and `model` the
// training degrees of `plan`'s layout. Fills moved_bytes, switch_s and total_s (from
// predicted.iteration_time_s) of `option`.
void CostSwitch(const ModelGraph& model, const Cluster& cluster, const CostModel& cost,
                const NodeLossRequest& request, NodeLossOption* option);

// The "drop replicas" and "re-partition" options (those that apply, see the top comment;
// possibly none) on
// `cluster_left`, the cluster without the lost nodes. `tuner` supplies objective, budget (for
// all options together), seed, clock, stop, constraints and calibration; its num_devices and
// num_microbatches are ignored. kInvalidArgument naming the field when the request does not
// describe the current layout (slots per rank, a slot on no node of the job).
absl::StatusOr<std::vector<NodeLossOption>> SurvivorOptions(const ModelGraph& model,
                                                            const Cluster& cluster_left,
                                                            const CostModel& cost,
                                                            const TunerOptions& tuner,
                                                            const NodeLossRequest& request);

}  // namespace octopipe

#endif  // OCTOPIPE_TUNER_NODE_LOSS_H_
