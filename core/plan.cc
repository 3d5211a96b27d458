#include "core/plan.h"

#include "absl/strings/str_cat.h"

namespace octopipe {

std::vector<StageAssignment> EvenPartition(int num_layers, int num_stages) {
  std::vector<StageAssignment> stages(num_stages);
  const int base = num_layers / num_stages;
  const int extra = num_layers % num_stages;
  int next = 0;
  for (int s = 0; s < num_stages; ++s) {
    const int size = base + (s < extra ? 1 : 0);
    stages[s].first_layer = next;
    stages[s].last_layer = next + size - 1;
    next += size;
  }
  return stages;
}

absl::Status ValidatePlanShape(const Plan& plan, int num_layers) {
  if (plan.num_devices <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_devices must be > 0, got ", plan.num_devices));
  }
  if (plan.num_microbatches <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_microbatches must be > 0, got ", plan.num_microbatches));
  }
  if (plan.stages.empty()) return absl::InvalidArgumentError("stages: plan has no stages");
  int next = 0;
  for (int s = 0; s < plan.num_stages(); ++s) {
    const StageAssignment& st = plan.stages[s];
    const std::string p = absl::StrCat("stages[", s, "]");
    if (st.first_layer != next) {
      return absl::InvalidArgumentError(absl::StrCat(p, ".first_layer must be ", next,
                                                     " (stages cover the layers in order), got ",
                                                     st.first_layer));
    }
    if (st.last_layer < st.first_layer || st.last_layer >= num_layers) {
      return absl::InvalidArgumentError(absl::StrCat(p, ".last_layer must be in [",
                                                     st.first_layer, ", ", num_layers - 1,
                                                     "], got ", st.last_layer));
    }
    if (st.device < 0 || st.device >= plan.num_devices) {
      return absl::InvalidArgumentError(absl::StrCat(
          p, ".device must be in [0, ", plan.num_devices - 1, "], got ", st.device));
    }
    next = st.last_layer + 1;
  }
  if (next != num_layers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stages cover layers [0, ", next, ") but the model has ", num_layers, " layers"));
  }
  return absl::OkStatus();
}

}  // namespace octopipe
