// SimulateClassic: one classic schedule (GPipe, 1F1B, interleaved, ZB-H1/H2, ZB-V, DualPipeV)
// on a real model and cluster, the way those systems run it: layers split as evenly as possible
// into P x V stages, the schedule's own placement, every stage on the cluster's first P devices.
// The one implementation shared by `octopipe simulate`, the tuner's baselines and the benchmarks.
#ifndef OCTOPIPE_SIMULATOR_CLASSIC_PIPELINE_H_
#define OCTOPIPE_SIMULATOR_CLASSIC_PIPELINE_H_

#include "absl/status/statusor.h"
#include "core/cluster.h"
#include "core/cost_model.h"
#include "core/model_graph.h"
#include "core/plan.h"
#include "simulator/evaluator.h"
#include "simulator/problem.h"
#include "simulator/schedules.h"

namespace octopipe {

struct ClassicRequest {
  ScheduleKind kind = ScheduleKind::k1F1B;
  int devices = 0;       // P; must not exceed the cluster's device count
  int chunks = 0;        // V; 0 = the schedule's default
  int microbatches = 0;  // M
  bool link_contention = false;
  EvalOptions eval;
};

struct ClassicRun {
  Plan plan;  // partition, placement and schedule, ready to write as a plan file
  PipelineProblem problem;
  SimResult result;
};

// The classic plan alone: the schedule's stages and placement, layers split evenly.
// kInvalidArgument naming the parameter, e.g. "devices: 16 devices x 2 chunks = 32 stages but
// the model 'x' has only 24 layers".
absl::StatusOr<Plan> ClassicPlan(ScheduleKind kind, int devices, int chunks, int microbatches,
                                 const ModelGraph& model);

// Errors are ClassicPlan's, "devices" beyond the cluster, or the evaluator's error.
absl::StatusOr<ClassicRun> SimulateClassic(const ModelGraph& model, const Cluster& cluster,
                                           const CostModel& cost_model,
                                           const ClassicRequest& request);

}  // namespace octopipe

#endif  // OCTOPIPE_SIMULATOR_CLASSIC_PIPELINE_H_
