#include "planner_service/measured_bubble.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "calibration/layer_calibration.h"

namespace octopipe::planner {

absl::StatusOr<std::vector<DeviceBusy>> DeviceBusyFromProto(
    const proto::ReportStageTimesRequest& request, int num_devices) {
  std::vector<DeviceBusy> out;
  for (int i = 0; i < request.device_times_size(); ++i) {
    const proto::DeviceBusyTime& t = request.device_times(i);
    const std::string field = absl::StrCat("device_times[", i, "]");
    if (t.device() < 0 || t.device() >= num_devices) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".device must be in [0, ",
                                                     num_devices - 1,
                                                     "] for this plan version, got ", t.device()));
    }
    if (!(t.busy_seconds() >= 0) || !std::isfinite(t.busy_seconds())) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".busy_seconds must be >= 0, got ", t.busy_seconds()));
    }
    RETURN_IF_ERROR(CheckReportedSeconds(field + ".iteration_seconds", t.iteration_seconds()));
    if (t.busy_seconds() > t.iteration_seconds() * (1 + 1e-6)) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".busy_seconds (", t.busy_seconds(), ") exceeds iteration_seconds (",
          t.iteration_seconds(), "): a device cannot be busy longer than the iteration"));
    }
    RETURN_IF_ERROR(CheckReportedSamples(field + ".iterations", t.iterations()));
    out.push_back({t.device(), t.busy_seconds(), t.iteration_seconds(), t.iterations()});
  }
  return out;
}

std::optional<PipelineMeasure> PipelineBubble::Record(const std::string& job_id,
                                                      int64_t version, int num_devices,
                                                      const std::vector<DeviceBusy>& devices) {
  absl::MutexLock lock(&mu_);
  JobReports& r = jobs_[job_id];
  if (version < r.version) return std::nullopt;
  if (version > r.version) r = JobReports{version, num_devices, {}};
  for (const DeviceBusy& d : devices) r.newest[d.device] = d;
  if (num_devices < 1 || static_cast<int>(r.newest.size()) < r.num_devices) return std::nullopt;
  PipelineMeasure m;
  double busy = 0;
  for (const auto& [device, d] : r.newest) {
    m.iteration_s = std::max(m.iteration_s, d.iteration_s);
    busy += d.busy_s;
  }
  m.bubble_ratio = std::clamp(1 - busy / (r.num_devices * m.iteration_s), 0.0, 1.0);
  return m;
}

void PipelineBubble::Remove(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  jobs_.erase(job_id);
}

}  // namespace octopipe::planner
