// Jobs that worker agents train (proto AgentTraining): resolving the reference model a job
// names into the model the planner plans, and the (node, local device) of every plan device.
// Plain functions the service and the job manager call; no state.
#ifndef OCTOPIPE_PLANNER_SERVICE_AGENT_JOBS_H_
#define OCTOPIPE_PLANNER_SERVICE_AGENT_JOBS_H_

#include "absl/status/statusor.h"
#include "core/cluster.h"
#include "proto/planner.pb.h"

namespace octopipe::planner {

// Requests without `training` are returned unchanged. Otherwise checks the training fields
// (kInvalidArgument naming "training.reference_model" for a model the executor does not know,
// "training.iterations" / "training.checkpoint_interval" for bad counts) and, when `model` is
// absent, fills it with the reference model's own graph.
absl::StatusOr<proto::CreateJobRequest> ResolveAgentTraining(proto::CreateJobRequest request);

// Sets version->device_slots for the first `num_devices` devices of `cluster` (the cluster the
// version was planned on: nodes in order, devices in node order).
void FillDeviceSlots(const Cluster& cluster, int num_devices, proto::PlanVersion* version);

}  // namespace octopipe::planner

#endif  // OCTOPIPE_PLANNER_SERVICE_AGENT_JOBS_H_
