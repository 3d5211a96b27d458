// A planner job as the JobManager keeps it: plain C++ state, converted to and from the wire
// (proto::Job, proto::JobEvent, proto::CreateJobRequest) only at the edges — the gRPC adapter
// (service.cc) and the SQLite store (store.cc) — by planner_service/job_convert.h.
//
// What is a domain type here and what is not:
//  - the job's lifecycle — state, current plan version, excluded nodes, the stored re-plan
//    intent, errors, agent events, the agent training settings — is plain C++ (this header);
//  - the job's *spec* (JobSpec: model, cluster, planning options) stays the document the client
//    sent, in its wire form. It is the job's input, not its state: GetJob and ListJobs echo it
//    back as sent, and every planning pass re-validates it against the server's *current*
//    limits before converting it (PrepareInput, which checks sizes on the wire form before it
//    allocates in proportion to them). A spec that no longer validates (limits lowered, or
//    stored by an older binary) must still be kept and shown beside the job's FAILED state, so
//    it cannot be held as the core ModelGraph / Cluster it no longer converts to;
//  - plan versions stay the wire PlanVersion the tuner's answer was stored and streamed as
//    (job_manager.h keeps them beside the record, with the current plan in core form).
//
// Plain structs with value semantics; no invariants beyond the comments on the fields.
#ifndef OCTOPIPE_PLANNER_SERVICE_JOB_STATE_H_
#define OCTOPIPE_PLANNER_SERVICE_JOB_STATE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "core/replan_reason.h"
#include "proto/cluster.pb.h"
#include "proto/model.pb.h"
#include "proto/planner.pb.h"

namespace octopipe::planner {

enum class JobState {
  kPlanning,    // the first plan is being computed
  kReady,       // a plan version is current
  kInfeasible,  // nothing fits on the devices left
  kFailed,      // planning failed, or the stored spec no longer validates; see last_error
};

// "planning", "ready", "infeasible", "failed".
absl::string_view JobStateName(JobState state);

// Worker agents train the job (proto AgentTraining).
struct AgentTraining {
  std::string reference_model;  // "ref:pattern=..."
  int64_t iterations = 0;
  int64_t checkpoint_interval = 0;  // 0: only at plan switches and drains
  double lr = 0;                    // 0: 1e-3
  uint64_t data_seed = 0;           // 0: 7
};

// Something an agent reported about the job (rank failed, resumed, plan refused, ...).
struct JobEvent {
  int64_t unix_ms = 0;  // set by the planner when it is added
  std::string kind;
  std::string node_id;
  int64_t plan_version = 0;
  int64_t iteration = 0;
  std::string message;
};

// What the client asked to plan, as it sent it (see the top comment for why this is the wire
// form). The manager normalises only options' objective (both its forms filled) at creation.
struct JobSpec {
  proto::Model model;
  proto::Cluster cluster;
  proto::PlanOptions options;
};

// A job to create: CreateJobRequest after the service resolved its agent training.
struct NewJob {
  std::string name;  // empty: the job's id
  JobSpec spec;
  std::optional<AgentTraining> training;
};

// JobProgress of proto/planner.proto.
struct JobProgress {
  int64_t iteration = 0;
  bool has_loss = false;
  double loss = 0;
  int64_t loss_iteration = 0;  // the iteration `loss` was reported for
  double tokens_per_s = 0;
  int64_t updated_unix_ms = 0;
};

struct JobRecord {
  std::string id;
  std::string name;
  JobSpec spec;
  std::optional<AgentTraining> training;  // set: worker agents train this job
  JobState state = JobState::kPlanning;
  int64_t current_version = 0;              // 0 before the first plan
  std::vector<std::string> excluded_nodes;  // failed or drained, in the order they went
  int64_t created_unix_ms = 0;
  std::string last_error;
  // A re-plan acknowledged but not finished: stored with the acknowledgement, so a restarted
  // planner resumes it. kInitial until the first plan exists.
  std::optional<ReplanReason> pending_reason;
  std::vector<JobEvent> events;  // oldest first (the manager keeps the newest 200)
  JobProgress progress;          // jobs agents train: from their reports

  // Whether the job's cluster has this node / the job has excluded it.
  bool HasNode(const std::string& node) const;
  bool Excludes(const std::string& node) const;
};

}  // namespace octopipe::planner

#endif  // OCTOPIPE_PLANNER_SERVICE_JOB_STATE_H_
