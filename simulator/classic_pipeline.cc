#include "simulator/classic_pipeline.h"

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "simulator/problem_builder.h"

namespace octopipe {

absl::StatusOr<Plan> ClassicPlan(ScheduleKind kind, int devices, int chunks, int microbatches,
                                 const ModelGraph& model) {
  ASSIGN_OR_RETURN(GeneratedSchedule gen,
                   GenerateSchedule(kind, devices, chunks, microbatches));
  if (gen.num_stages > model.num_layers()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "devices: ", devices, " devices x ", gen.num_chunks, " chunks = ", gen.num_stages,
        " stages but the model '", model.name, "' has only ", model.num_layers(), " layers"));
  }
  Plan plan;
  plan.schedule_name = std::string(ScheduleKindName(kind));
  plan.num_devices = devices;
  plan.num_microbatches = microbatches;
  plan.stages = EvenPartition(model.num_layers(), gen.num_stages);
  for (int s = 0; s < gen.num_stages; ++s) plan.stages[s].device = gen.stage_device[s];
  plan.schedule = std::move(gen.schedule);
  return plan;
}

absl::StatusOr<ClassicRun> SimulateClassic(const ModelGraph& model, const Cluster& cluster,
                                           const CostModel& cost_model,
                                           const ClassicRequest& request) {
  if (request.devices < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("devices must be >= 1, got ", request.devices));
  }
  if (request.devices > cluster.num_devices()) {
    return absl::InvalidArgumentError(absl::StrCat("devices: ", request.devices,
                                                   " requested but the cluster '", cluster.name,
                                                   "' has ", cluster.num_devices()));
  }
  ClassicRun run;
  ASSIGN_OR_RETURN(run.plan, ClassicPlan(request.kind, request.devices, request.chunks,
                                         request.microbatches, model));
  ASSIGN_OR_RETURN(run.problem, BuildProblem(model, cluster, cost_model, run.plan));
  run.problem.link_contention = request.link_contention;
  // The ZB family's order is built for the real costs (ZeroBubble's own builders).
  ASSIGN_OR_RETURN(run.plan.schedule,
                   ScheduleForProblem(request.kind, request.chunks, run.problem));
  ASSIGN_OR_RETURN(run.result, Simulate(run.problem, run.plan.schedule, request.eval));
  return run;
}

}  // namespace octopipe
