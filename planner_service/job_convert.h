// The wire forms of the planner's job state (job_state.h) and the job views the service answers
// with. The one place that maps JobRecord <-> proto::Job: the gRPC adapter (service.cc) converts
// requests and answers with it, the store (store.cc) converts what it persists — the JobManager
// itself never touches a proto::Job.
//
// Contract:
//  - JobToProto(JobFromProto(job)) is `job` byte for byte for every job this planner writes (a
//    state set, the re-plan intent set or not, no num_layers): stored jobs
//    keep their on-disk form (the store persists JobToProto's proto::Job, as before job state
//    had a domain form). Tested in job_convert_test.
//  - JobFromProto never fails. What older or newer planners stored is read the way the planner
//    has always read it: an intent this binary does not know reads
//    as kNodeJoin (the job is planned anyway, as for a node change); JOB_STATE_UNSPECIFIED,
//    which no planner writes, reads as kPlanning. Writing such a job back normalises it.
//  - Summaries and pages keep responses under gRPC's default 4 MB receive limit
//    (kMaxResponseBytes), leaving out model.layers (num_layers says how many there are).
// Stateless; thread-safe.
#ifndef OCTOPIPE_PLANNER_SERVICE_JOB_CONVERT_H_
#define OCTOPIPE_PLANNER_SERVICE_JOB_CONVERT_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner_service/job_state.h"
#include "proto/planner.pb.h"

namespace octopipe::planner {

proto::JobState JobStateToProto(JobState state);
JobState JobStateFromProto(proto::JobState state);

proto::JobEvent JobEventToProto(const JobEvent& event);
JobEvent JobEventFromProto(const proto::JobEvent& event);

proto::AgentTraining AgentTrainingToProto(const AgentTraining& training);
AgentTraining AgentTrainingFromProto(const proto::AgentTraining& training);

// Where the job is in its life: FAILED when planning failed or nothing fits; PLANNING before the
// first version; a planning-only job then stays PENDING; a job agents train is PENDING until an
// agent starts it, RUNNING from then (its newest started / resumed / stopped / rank_failed /
// state_saved event), COMPLETED once an agent reports `completed`. Derived, never stored state:
// Job.phase is filled by JobToProto and ignored by JobFromProto.
proto::JobPhase JobPhaseOf(const JobRecord& job);
// "planning", "pending", "running", "completed", "failed" ("unspecified" for 0).
std::string JobPhaseName(proto::JobPhase phase);

proto::Job JobToProto(const JobRecord& job);
JobRecord JobFromProto(const proto::Job& job);

// A CreateJobRequest (after ResolveAgentTraining) as the job to create; nothing is checked here
// (JobManager::Create validates).
NewJob NewJobFromProto(const proto::CreateJobRequest& request);

// ---- Views the service answers with. ----

// Responses stay under gRPC's default 4 MB receive limit with room to spare.
inline constexpr size_t kMaxResponseBytes = 3 << 20;
inline constexpr int kDefaultPageSize = 100;
inline constexpr int kMaxPageSize = 1000;

// The job without model.layers, with num_layers set.
proto::Job JobSummaryProto(const JobRecord& job);

// GetJob's answer: the job and its current version (null: none yet); the job is its summary,
// with model_omitted set, when the whole would exceed kMaxResponseBytes.
proto::GetJobResponse GetJobResponseOf(const JobRecord& job, const proto::PlanVersion* current);

// One ListJobs page of summaries from `jobs` (oldest first, as JobManager::List returns them):
// at most `page_size` (0: kDefaultPageSize) jobs and about kMaxResponseBytes, starting after the
// job `page_token` names. The token is the (created_unix_ms, id) of the previous page's last job,
// so deletes and creates in between neither repeat nor skip a job. kInvalidArgument for a
// page_size outside [0, kMaxPageSize] or a token this server did not give.
absl::StatusOr<proto::ListJobsResponse> ListJobsPage(const std::vector<JobRecord>& jobs,
                                                     int page_size,
                                                     const std::string& page_token);

}  // namespace octopipe::planner

#endif  // OCTOPIPE_PLANNER_SERVICE_JOB_CONVERT_H_
