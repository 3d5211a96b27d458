// Planning requests: validation against the server's limits, conversion from the wire types,
// the cluster a job has left after node failures, and the tuner result as a wire PlanResult.
// The one code path shared by the one-shot Plan RPC and by jobs.
#ifndef OCTOPIPE_PLANNER_SERVICE_PLANNING_H_
#define OCTOPIPE_PLANNER_SERVICE_PLANNING_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cluster.h"
#include "core/limits.h"
#include "core/model_graph.h"
#include "proto/planner.pb.h"
#include "tuner/layout.h"
#include "tuner/node_loss.h"
#include "tuner/tuner.h"

namespace octopipe::planner {

// The server's limits: every size limit of core/limits.h (RESOURCE_EXHAUSTED beyond it, checked
// before anything proportional is allocated) plus the planning defaults.
struct PlanningLimits : SizeLimits {
  // Largest plan result (serialised PlanResult) the service answers with: it travels in Plan,
  // GetJob and WatchPlan responses, which default gRPC clients accept up to 4 MB. Checked
  // twice: a lower estimate before tuning (every stage runs a forward and a backward of each
  // micro-batch, at least one stage per device, each op at least 6 bytes on the wire: 12 x
  // devices x micro-batches) and the exact size after it; beyond it RESOURCE_EXHAUSTED.
  int64_t max_plan_bytes = 3 << 20;
  double default_time_budget_s = 10;
  int tuner_threads = 1;  // per planning task (the pool runs several tasks)
};

struct PlanningInput {
  ModelGraph model;
  Cluster cluster;  // without excluded nodes
  TunerOptions tuner;
  // options.choose_layout: the layout search (tuner/layout.h) over every device, with what
  // `layout` fixes; tuner.num_microbatches is then the global batch.
  bool choose_layout = false;
  LayoutRequest layout;
  int64_t max_plan_bytes = 3 << 20;  // PlanningLimits::max_plan_bytes
};

// Errors: kInvalidArgument naming the field ("model.layers[3].kind: unknown layer kind 'x'",
// "options.num_devices: ..."), kResourceExhausted naming the limit, kFailedPrecondition when
// excluded nodes leave no device. Sizes are checked on the wire form before conversion.
// options.num_devices larger than the cluster (or the model's layer count) is an error, never
// clamped — except after node loss (`excluded_nodes` non-empty), when a job continues on the
// devices left.
absl::StatusOr<PlanningInput> PrepareInput(const proto::Model& model,
                                           const proto::Cluster& cluster,
                                           const proto::PlanOptions& options,
                                           const std::vector<std::string>& excluded_nodes,
                                           const PlanningLimits& limits);

// `cluster` without the named nodes (device numbering follows the remaining nodes).
Cluster WithoutNodes(const Cluster& cluster, const std::vector<std::string>& excluded_nodes);

// Runs the tuner (with calibration factors, possibly empty) and converts the result.
// `should_stop` (may be empty) is polled by the tuner: when it returns true (client gone,
// deadline passed, shutting down) tuning ends early and the answer is kCancelled. A result
// whose predictions are not finite is kInvalidArgument (inputs outside what the cost model
// can represent), never a plan. A plan whose wire size exceeds input.max_plan_bytes is
// kResourceExhausted naming its size and the limit.
absl::StatusOr<proto::PlanResult> RunPlanning(const PlanningInput& input,
                                              const std::vector<double>& layer_time_factors,
                                              std::function<bool()> should_stop = {});

proto::PlanResult ToProto(const TuneResult& result);

// After a node loss: drops the fixed degrees of a job's layout request that no layout over the
// `available` devices left can keep (the global batch of `global_microbatches` split evenly
// over the replicas, whole EP groups): DP and EP first, then every degree (planning.cc).
// `model_tp`, `model_ep`: the model's training.tp_degree and ep_degree, which the layout
// search takes for a degree the request leaves open (> 1 only).
void RelaxLayoutForDevicesLeft(int available, int global_microbatches, int model_tp,
                               int model_ep, LayoutRequest* req);

// A job's re-plan after a node loss: what it was running and how much is left.
struct NodeLossContext {
  LayoutPlan current;                  // the current version's layout
  std::vector<GpuSlot> current_slots;  // per rank of it: its node and GPU (device slots)
  int remaining_iterations = 0;
  // Process start, rendezvous and loading of any switch (paid by every option alike).
  double restart_s = 2;
  // The share of input.tuner.time_budget_s given to the survivors' options, on top of the
  // new layout's full budget.
  double survivor_budget_share = 0.25;
  // How much quicker (a fraction of the total time) a new layout must be predicted than the
  // best option that keeps the survivors' replicas to be chosen over it: the job manager
  // passes its re-plan min_gain, the same margin a measured re-plan must clear. Keeping the
  // replicas moves less state and keeps the layout whose predictions the job has checked; a
  // new layout predicted a fraction of a percent quicker is within the prediction's error.
  // 0: the quickest option wins, the new layout ties.
  double new_layout_min_gain = 0;
};

// A result and the devices it runs on (its ranks are their GPUs in order).
struct PlannedOn {
  proto::PlanResult result;
  Cluster cluster;
};

// RunPlanning's new layout over input.cluster against the options that keep the survivors'
// replicas (tuner/node_loss.h), by the time to finish the remaining iterations with the switch
// counted; the best is returned on the GPUs it uses, every option compared in
// result.node_loss_options. The new layout is chosen only when its total is at most
// (1 - context.new_layout_min_gain) of the best survivors' option's (then it wins ties); when
// the margin keeps it from winning, its summary says by how much it was quicker. Errors are
// RunPlanning's when no option is left (kCancelled at once).
absl::StatusOr<PlannedOn> RunNodeLossPlanning(const PlanningInput& input,
                                              const std::vector<double>& layer_time_factors,
                                              std::function<bool()> should_stop,
                                              const NodeLossContext& context);

// The objective the job optimises, read from a result.
double ObjectiveOf(const proto::PlanResult& result, const TunerOptions& options);

}  // namespace octopipe::planner

#endif  // OCTOPIPE_PLANNER_SERVICE_PLANNING_H_
