// The measured pipeline bubble ratio of a job's current plan version, across all of its
// devices, from the agents' reports (ReportStageTimesRequest.device_times). Each device's
// newest report gives its mean busy seconds b_d and iteration seconds t_d per iteration; once
// every device d in [0, D) of the version has reported,
//   iteration time T = max_d t_d,   bubble ratio = 1 - (sum_d b_d) / (D x T),
// clamped to [0, 1]. Agents report their own devices only; the planner is the one place that
// sees the whole pipeline.
#ifndef OCTOPIPE_PLANNER_SERVICE_MEASURED_BUBBLE_H_
#define OCTOPIPE_PLANNER_SERVICE_MEASURED_BUBBLE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/planner.pb.h"

namespace octopipe::planner {

struct DeviceBusy {
  int device = 0;
  double busy_s = 0;       // mean per iteration
  double iteration_s = 0;  // mean per iteration
  int64_t iterations = 1;
};

// request.device_times checked against a plan of `num_devices` devices: kInvalidArgument naming
// the field (device_times[i].device out of range, busy_seconds negative or not finite,
// iteration_seconds not > 0, iterations < 1).
absl::StatusOr<std::vector<DeviceBusy>> DeviceBusyFromProto(
    const proto::ReportStageTimesRequest& request, int num_devices);

struct PipelineMeasure {
  double iteration_s = 0;
  double bubble_ratio = 0;
};

// The newest report of every device, per job and plan version. Thread-safe.
class PipelineBubble {
 public:
  // Records a report for `version` of the job, whose plan has `num_devices` devices. A report
  // for an older version than the job's newest recorded one is ignored; a newer version drops
  // the older one's reports. Returns the measure once every device of the version has
  // reported (then after every report), nullopt before.
  std::optional<PipelineMeasure> Record(const std::string& job_id, int64_t version,
                                        int num_devices, const std::vector<DeviceBusy>& devices);
  // Forgets the job.
  void Remove(const std::string& job_id);

 private:
  struct JobReports {
    int64_t version = 0;
    int num_devices = 0;
    std::map<int, DeviceBusy> newest;  // by device
  };
  absl::Mutex mu_;
  std::map<std::string, JobReports> jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace octopipe::planner

#endif  // OCTOPIPE_PLANNER_SERVICE_MEASURED_BUBBLE_H_
