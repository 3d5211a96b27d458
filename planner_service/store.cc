#include "planner_service/store.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "planner_service/job_convert.h"

namespace octopipe {

absl::Status Store::PutJob(const planner::JobRecord& job) {
  if (job.id.empty()) return absl::InvalidArgumentError("PutJob: job.id is empty");
  return PutJobMessage(planner::JobToProto(job));
}

absl::Status Store::PutJobMessage(const proto::Job& job) {
  if (job.id().empty()) return absl::InvalidArgumentError("PutJob: job.id is empty");
  std::string bytes;
  if (!job.SerializeToString(&bytes)) {
    return absl::InternalError(absl::StrCat("PutJob: cannot serialize job '", job.id(), "'"));
  }
  return WriteJob(job, bytes);
}

absl::StatusOr<std::vector<planner::JobRecord>> Store::LoadJobs() {
  absl::StatusOr<std::vector<proto::Job>> stored = ReadJobs();
  if (!stored.ok()) return stored.status();
  SortJobs(*stored);
  std::vector<planner::JobRecord> jobs;
  jobs.reserve(stored->size());
  for (const proto::Job& job : *stored) jobs.push_back(planner::JobFromProto(job));
  return jobs;
}

absl::StatusOr<planner::JobRecord> Store::LoadJob(const std::string& id) {
  absl::StatusOr<std::optional<proto::Job>> stored = ReadJob(id);
  if (!stored.ok()) return stored.status();
  if (!stored->has_value()) {
    return absl::NotFoundError(absl::StrCat("store ", Describe(), ": no job '", id, "'"));
  }
  return planner::JobFromProto(**stored);
}

void Store::SortJobs(std::vector<proto::Job>& jobs) {
  std::sort(jobs.begin(), jobs.end(), [](const proto::Job& a, const proto::Job& b) {
    return std::forward_as_tuple(a.created_unix_ms(), a.id()) <
           std::forward_as_tuple(b.created_unix_ms(), b.id());
  });
}

absl::Status Store::PutPlanVersion(const proto::PlanVersion& version) {
  if (version.job_id().empty()) {
    return absl::InvalidArgumentError("PutPlanVersion: version.job_id is empty");
  }
  if (version.version() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("PutPlanVersion: version.version is ", version.version(), "; must be >= 1"));
  }
  std::string bytes;
  if (!version.SerializeToString(&bytes)) {
    return absl::InternalError(absl::StrCat("PutPlanVersion: cannot serialize version ",
                                            version.version(), " of job '", version.job_id(), "'"));
  }
  return WritePlanVersion(version, bytes);
}

absl::Status Store::PutCalibration(const std::string& job_id,
                                   const std::vector<double>& layer_factors) {
  if (job_id.empty()) return absl::InvalidArgumentError("PutCalibration: job_id is empty");
  for (size_t i = 0; i < layer_factors.size(); ++i) {
    if (!std::isfinite(layer_factors[i])) {
      return absl::InvalidArgumentError(absl::StrCat("PutCalibration: layer_factors[", i,
                                                     "] of job '", job_id, "' is ",
                                                     layer_factors[i], "; must be finite"));
    }
  }
  return WriteCalibration(job_id, layer_factors);
}

absl::Status Store::PutAgent(const AgentRecord& record) {
  if (record.node_id.empty()) return absl::InvalidArgumentError("PutAgent: node_id is empty");
  return WriteAgent(record);
}

}  // namespace octopipe
