#include "planner_service/agent_jobs.h"

#include "absl/strings/str_cat.h"
#include "core/convert.h"
#include "executor/model_spec.h"

namespace octopipe::planner {

absl::StatusOr<proto::CreateJobRequest> ResolveAgentTraining(proto::CreateJobRequest request) {
  if (!request.has_training()) return request;
  const proto::AgentTraining& t = request.training();
  absl::StatusOr<executor::ModelSpec> spec = executor::ParseModelSpec(t.reference_model());
  if (!spec.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("training.reference_model: '",
                                                   t.reference_model(),
                                                   "': ", spec.status().message()));
  }
  if (t.iterations() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("training.iterations must be >= 1, got ", t.iterations()));
  }
  if (t.checkpoint_interval() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "training.checkpoint_interval must be >= 0, got ", t.checkpoint_interval()));
  }
  if (!request.has_model()) *request.mutable_model() = ModelToProto(executor::ToModelGraph(*spec));
  return request;
}

void FillDeviceSlots(const Cluster& cluster, int num_devices, proto::PlanVersion* version) {
  version->clear_device_slots();
  for (const Node& node : cluster.nodes) {
    for (int d = 0; d < node.num_devices; ++d) {
      if (version->device_slots_size() >= num_devices) return;
      proto::DeviceSlot* slot = version->add_device_slots();
      slot->set_node_id(node.name);
      slot->set_local_device(d);
    }
  }
}

}  // namespace octopipe::planner
