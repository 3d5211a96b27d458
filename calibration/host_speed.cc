#include "calibration/host_speed.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "calibration/layer_calibration.h"
#include "core/status_macros.h"

namespace octopipe {

absl::Status ScaleToHostSpeed(double ratio, ModelGraph* model, Cluster* cluster) {
  if (!(ratio > 0) || !std::isfinite(ratio)) {
    return absl::InvalidArgumentError(
        absl::StrCat("host speed ratio must be finite and > 0, got ", ratio));
  }
  ASSIGN_OR_RETURN(*model,
                   ApplyLayerFactors(*model, std::vector<double>(model->num_layers(), ratio)));
  for (HardwareSpec& hw : cluster->hardware) {
    hw.op_overhead_s *= ratio;
    hw.message_cpu_s *= ratio;
  }
  return absl::OkStatus();
}

}  // namespace octopipe
