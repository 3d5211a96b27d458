// BuildProblem: turns (model, cluster, cost model, partition + placement) into the flat
// PipelineProblem the simulator evaluates. The only place stage costs are summed from layers.
#ifndef OCTOPIPE_SIMULATOR_PROBLEM_BUILDER_H_
#define OCTOPIPE_SIMULATOR_PROBLEM_BUILDER_H_

#include "absl/status/statusor.h"
#include "core/cluster.h"
#include "core/cost_model.h"
#include "core/model_graph.h"
#include "core/plan.h"
#include "simulator/problem.h"

namespace octopipe {

// Builds the problem for `plan`'s partition and placement (its schedule is not read) on the
// first `plan.num_devices` devices of `cluster`. Stage costs are the sums of their layers'
// costs on the stage's device; static memory sums over every stage a device holds. Errors:
// kInvalidArgument naming the field (bad partition, more devices than the cluster has).
absl::StatusOr<PipelineProblem> BuildProblem(const ModelGraph& model, const Cluster& cluster,
                                             const CostModel& cost_model, const Plan& plan);

}  // namespace octopipe

#endif  // OCTOPIPE_SIMULATOR_PROBLEM_BUILDER_H_
