#include "planner_service/job_convert.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/convert.h"
#include "core/job_event_kind.h"

namespace octopipe::planner {

proto::JobState JobStateToProto(JobState state) {
  switch (state) {
    case JobState::kPlanning: return proto::JOB_STATE_PLANNING;
    case JobState::kReady: return proto::JOB_STATE_READY;
    case JobState::kInfeasible: return proto::JOB_STATE_INFEASIBLE;
    case JobState::kFailed: return proto::JOB_STATE_FAILED;
  }
  return proto::JOB_STATE_UNSPECIFIED;
}

JobState JobStateFromProto(proto::JobState state) {
  switch (state) {
    case proto::JOB_STATE_READY: return JobState::kReady;
    case proto::JOB_STATE_INFEASIBLE: return JobState::kInfeasible;
    case proto::JOB_STATE_FAILED: return JobState::kFailed;
    default: return JobState::kPlanning;
  }
}

proto::JobEvent JobEventToProto(const JobEvent& e) {
  proto::JobEvent out;
  out.set_unix_ms(e.unix_ms);
  out.set_kind(e.kind);
  out.set_node_id(e.node_id);
  out.set_plan_version(e.plan_version);
  out.set_iteration(e.iteration);
  out.set_message(e.message);
  return out;
}

JobEvent JobEventFromProto(const proto::JobEvent& e) {
  JobEvent out;
  out.unix_ms = e.unix_ms();
  out.kind = e.kind();
  out.node_id = e.node_id();
  out.plan_version = e.plan_version();
  out.iteration = e.iteration();
  out.message = e.message();
  return out;
}

proto::AgentTraining AgentTrainingToProto(const AgentTraining& t) {
  proto::AgentTraining out;
  out.set_reference_model(t.reference_model);
  out.set_iterations(t.iterations);
  out.set_checkpoint_interval(t.checkpoint_interval);
  out.set_lr(t.lr);
  out.set_data_seed(t.data_seed);
  return out;
}

AgentTraining AgentTrainingFromProto(const proto::AgentTraining& t) {
  AgentTraining out;
  out.reference_model = t.reference_model();
  out.iterations = t.iterations();
  out.checkpoint_interval = t.checkpoint_interval();
  out.lr = t.lr();
  out.data_seed = t.data_seed();
  return out;
}

namespace {

// The stored intent; nullopt when unset; one this binary does not know plans anyway, as for a
// node change.
std::optional<ReplanReason> PendingReasonFromProto(const proto::Job& job) {
  if (job.pending_reason() == proto::PLAN_REASON_UNSPECIFIED) return std::nullopt;
  absl::StatusOr<ReplanReason> r = ReplanReasonFromProto(job.pending_reason());
  return r.ok() ? *r : ReplanReason::kNodeJoin;
}

}  // namespace

proto::JobPhase JobPhaseOf(const JobRecord& job) {
  if (job.state == JobState::kFailed || job.state == JobState::kInfeasible) {
    return proto::JOB_PHASE_FAILED;
  }
  if (job.current_version == 0) return proto::JOB_PHASE_PLANNING;
  if (!job.training) return proto::JOB_PHASE_PENDING;
  for (auto e = job.events.rbegin(); e != job.events.rend(); ++e) {
    const std::optional<JobEventKind> kind = ParseJobEventKind(e->kind);
    if (kind == JobEventKind::kCompleted) return proto::JOB_PHASE_COMPLETED;
    if (kind && ShowsRunning(*kind)) return proto::JOB_PHASE_RUNNING;
  }
  return proto::JOB_PHASE_PENDING;
}

std::string JobPhaseName(proto::JobPhase phase) {
  switch (phase) {
    case proto::JOB_PHASE_PLANNING: return "planning";
    case proto::JOB_PHASE_PENDING: return "pending";
    case proto::JOB_PHASE_RUNNING: return "running";
    case proto::JOB_PHASE_COMPLETED: return "completed";
    case proto::JOB_PHASE_FAILED: return "failed";
    default: return "unspecified";
  }
}

proto::Job JobToProto(const JobRecord& job) {
  proto::Job out;
  out.set_id(job.id);
  out.set_name(job.name);
  *out.mutable_model() = job.spec.model;
  *out.mutable_cluster() = job.spec.cluster;
  *out.mutable_options() = job.spec.options;
  out.set_state(JobStateToProto(job.state));
  out.set_current_version(job.current_version);
  for (const std::string& n : job.excluded_nodes) out.add_excluded_nodes(n);
  out.set_created_unix_ms(job.created_unix_ms);
  out.set_last_error(job.last_error);
  if (job.pending_reason) {
    out.set_pending_reason(ReplanReasonToProto(*job.pending_reason));
  }
  if (job.training) *out.mutable_training() = AgentTrainingToProto(*job.training);
  for (const JobEvent& e : job.events) *out.add_events() = JobEventToProto(e);
  out.set_phase(JobPhaseOf(job));
  if (job.training) {
    proto::JobProgress* p = out.mutable_progress();
    p->set_iteration(job.progress.iteration);
    p->set_total_iterations(job.training->iterations);
    p->set_has_loss(job.progress.has_loss);
    p->set_loss(job.progress.loss);
    p->set_tokens_per_s(job.progress.tokens_per_s);
    p->set_updated_unix_ms(job.progress.updated_unix_ms);
    p->set_loss_iteration(job.progress.loss_iteration);
  }
  return out;
}

JobRecord JobFromProto(const proto::Job& job) {
  JobRecord out;
  out.id = job.id();
  out.name = job.name();
  out.spec.model = job.model();
  out.spec.cluster = job.cluster();
  out.spec.options = job.options();
  out.state = JobStateFromProto(job.state());
  out.current_version = job.current_version();
  out.excluded_nodes.assign(job.excluded_nodes().begin(), job.excluded_nodes().end());
  out.created_unix_ms = job.created_unix_ms();
  out.last_error = job.last_error();
  out.pending_reason = PendingReasonFromProto(job);
  if (job.has_training()) out.training = AgentTrainingFromProto(job.training());
  for (const proto::JobEvent& e : job.events()) out.events.push_back(JobEventFromProto(e));
  out.progress.iteration = job.progress().iteration();
  out.progress.has_loss = job.progress().has_loss();
  out.progress.loss = job.progress().loss();
  out.progress.tokens_per_s = job.progress().tokens_per_s();
  out.progress.updated_unix_ms = job.progress().updated_unix_ms();
  out.progress.loss_iteration = job.progress().loss_iteration();
  return out;
}

NewJob NewJobFromProto(const proto::CreateJobRequest& request) {
  NewJob out;
  out.name = request.name();
  out.spec.model = request.model();
  out.spec.cluster = request.cluster();
  out.spec.options = request.options();
  if (request.has_training()) out.training = AgentTrainingFromProto(request.training());
  return out;
}

proto::Job JobSummaryProto(const JobRecord& job) {
  proto::Job s = JobToProto(job);
  s.set_num_layers(job.spec.model.layers_size());
  s.mutable_model()->clear_layers();
  return s;
}

proto::GetJobResponse GetJobResponseOf(const JobRecord& job, const proto::PlanVersion* current) {
  proto::GetJobResponse out;
  *out.mutable_job() = JobToProto(job);
  if (current != nullptr) *out.mutable_current() = *current;
  if (out.ByteSizeLong() > kMaxResponseBytes) {
    *out.mutable_job() = JobSummaryProto(job);
    out.set_model_omitted(true);
  }
  return out;
}

absl::StatusOr<proto::ListJobsResponse> ListJobsPage(const std::vector<JobRecord>& jobs,
                                                     int page_size,
                                                     const std::string& page_token) {
  if (page_size < 0 || page_size > kMaxPageSize) {
    return absl::InvalidArgumentError(absl::StrCat("page_size must be in [0, ", kMaxPageSize,
                                                   "] (0 = ", kDefaultPageSize, "), got ",
                                                   page_size));
  }
  if (page_size == 0) page_size = kDefaultPageSize;
  int64_t after_ms = 0;
  std::string after_id;
  if (!page_token.empty()) {
    const size_t colon = page_token.find(':');
    if (colon == std::string::npos ||
        !absl::SimpleAtoi(absl::string_view(page_token).substr(0, colon), &after_ms)) {
      return absl::InvalidArgumentError(
          absl::StrCat("page_token: '", page_token.substr(0, 64), "' is not a token this server gave"));
    }
    after_id = page_token.substr(colon + 1);
  }
  proto::ListJobsResponse out;
  size_t bytes = 0;
  for (const JobRecord& job : jobs) {
    if (!page_token.empty() &&
        std::make_pair(job.created_unix_ms, job.id) <= std::make_pair(after_ms, after_id)) {
      continue;
    }
    if (out.jobs_size() == page_size || (out.jobs_size() > 0 && bytes > kMaxResponseBytes)) {
      const proto::Job& last = out.jobs(out.jobs_size() - 1);
      out.set_next_page_token(absl::StrCat(last.created_unix_ms(), ":", last.id()));
      break;
    }
    *out.add_jobs() = JobSummaryProto(job);
    bytes += out.jobs(out.jobs_size() - 1).ByteSizeLong();
  }
  return out;
}

}  // namespace octopipe::planner
