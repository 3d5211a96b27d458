#include "planner_service/job_manager.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/convert.h"
#include "core/cost_model.h"
#include "core/status_macros.h"
#include "planner_service/agent_jobs.h"
#include "planner_service/calibration.h"
#include "simulator/evaluator.h"
#include "simulator/problem_builder.h"

namespace octopipe::planner {
namespace {

bool HasNode(const proto::Cluster& cluster, const std::string& node) {
  for (const proto::Node& n : cluster.nodes()) {
    if (n.name() == node) return true;
  }
  return false;
}

std::vector<std::string> Excluded(const proto::Job& job) {
  return {job.excluded_nodes().begin(), job.excluded_nodes().end()};
}

// The current plan's objective under the given calibration, or an error when it no longer
// applies (e.g. its devices are gone).
absl::StatusOr<double> CurrentObjective(const PlanningInput& input, const proto::Plan& plan,
                                        const std::vector<double>& factors) {
  ASSIGN_OR_RETURN(Plan p, PlanFromProto(plan));
  ASSIGN_OR_RETURN(ProblemBuilder builder,
                   ProblemBuilder::Create(input.model, input.cluster, CostModel(),
                                          p.num_devices, factors));
  ASSIGN_OR_RETURN(PipelineProblem problem, builder.Build(p));
  problem.link_contention = input.tuner.link_contention;
  ASSIGN_OR_RETURN(SimResult r, Simulate(problem, p.schedule));
  return input.tuner.objective == Objective::kSteadyState ? r.steady_state_iteration_time_s
                                                          : r.iteration_time_s;
}

}  // namespace

JobManager::JobManager(Store* store, TuningPool* pool, const Clock* clock,
                       JobManagerOptions options, JobObserver* observer)
    : store_(store), pool_(pool), clock_(clock), options_(options), observer_(observer),
      policy_(options.replan) {}

std::string JobManager::NewJobId() { return absl::StrCat("job-", next_job_++); }

absl::Status JobManager::Recover() {
  ASSIGN_OR_RETURN(std::vector<proto::Job> jobs, store_->LoadJobs());
  absl::MutexLock lock(&mu_);
  for (proto::Job& job : jobs) {
    Entry e;
    ASSIGN_OR_RETURN(e.versions, store_->LoadPlanVersions(job.id()));
    ASSIGN_OR_RETURN(e.factors, store_->LoadCalibration(job.id()));
    int64_t n = 0;
    if (job.id().size() > 4 && absl::SimpleAtoi(absl::string_view(job.id()).substr(4), &n)) {
      next_job_ = std::max(next_job_, n + 1);
    }
    const std::string id = job.id();
    const bool needs_plan = e.versions.empty();
    e.job = std::move(job);
    if (!e.versions.empty()) e.job.set_current_version(e.versions.back().version());
    jobs_[id] = std::move(e);
    if (needs_plan) SchedulePlanning(id, "initial", /*bounded=*/false);
  }
  if (observer_) observer_->OnJobCount(static_cast<int>(jobs_.size()));
  return absl::OkStatus();
}

absl::StatusOr<proto::Job> JobManager::Create(const proto::CreateJobRequest& request) {
  // Validate everything before anything is stored.
  RETURN_IF_ERROR(
      PrepareInput(request.model(), request.cluster(), request.options(), {}, options_.limits)
          .status());
  absl::MutexLock lock(&mu_);
  const std::string id = NewJobId();
  Entry e;
  e.job.set_id(id);
  e.job.set_name(request.name().empty() ? id : request.name());
  *e.job.mutable_model() = request.model();
  *e.job.mutable_cluster() = request.cluster();
  *e.job.mutable_options() = request.options();
  if (request.has_training()) *e.job.mutable_training() = request.training();
  e.job.set_state(proto::JOB_STATE_PLANNING);
  e.job.set_created_unix_ms(UnixMillis());
  RETURN_IF_ERROR(store_->PutJob(e.job));
  jobs_[id] = e;
  if (!SchedulePlanning(id, "initial", /*bounded=*/true)) {
    jobs_.erase(id);
    absl::Status s = store_->DeleteJob(id);
    (void)s;  // best effort: the job was never visible
    return absl::ResourceExhaustedError(absl::StrCat(
        "planning queue is full (", pool_->max_queued(), " tasks waiting); retry later"));
  }
  if (observer_) observer_->OnJobCount(static_cast<int>(jobs_.size()));
  return jobs_[id].job;
}

absl::StatusOr<proto::GetJobResponse> JobManager::Get(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("job_id: no job '", job_id, "'"));
  }
  proto::GetJobResponse out;
  *out.mutable_job() = it->second.job;
  if (!it->second.versions.empty()) *out.mutable_current() = it->second.versions.back();
  return out;
}

std::vector<proto::Job> JobManager::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<proto::Job> out;
  for (const auto& [id, e] : jobs_) out.push_back(e.job);
  std::sort(out.begin(), out.end(), [](const proto::Job& a, const proto::Job& b) {
    return a.created_unix_ms() != b.created_unix_ms() ? a.created_unix_ms() < b.created_unix_ms()
                                                      : a.id() < b.id();
  });
  return out;
}

absl::Status JobManager::Delete(const std::string& job_id) {
  std::vector<std::function<void()>> ends;
  {
    absl::MutexLock lock(&mu_);
    if (jobs_.count(job_id) == 0) {
      return absl::NotFoundError(absl::StrCat("job_id: no job '", job_id, "'"));
    }
    // Store first: on failure the job stays (in memory and on disk) and the error is true.
    RETURN_IF_ERROR(store_->DeleteJob(job_id));
    jobs_.erase(job_id);
    for (auto it = subscriptions_.begin(); it != subscriptions_.end();) {
      if (it->second.job_id == job_id) {
        if (it->second.on_end) ends.push_back(it->second.on_end);
        it = subscriptions_.erase(it);
      } else {
        ++it;
      }
    }
    if (observer_) observer_->OnJobCount(static_cast<int>(jobs_.size()));
  }
  policy_.Forget(job_id);
  if (observer_) observer_->OnJobRemoved(job_id);
  for (auto& end : ends) end();
  return absl::OkStatus();
}

absl::StatusOr<int64_t> JobManager::Watch(
    const std::string& job_id, int64_t after_version,
    std::function<void(const proto::PlanVersion&)> on_version, std::function<void()> on_end) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("job_id: no job '", job_id, "'"));
  }
  // Initial delivery happens under the lock so it cannot interleave with a new version.
  const std::vector<proto::PlanVersion>& versions = it->second.versions;
  if (after_version <= 0) {
    if (!versions.empty()) on_version(versions.back());
  } else {
    for (const proto::PlanVersion& v : versions) {
      if (v.version() > after_version) on_version(v);
    }
  }
  const int64_t id = next_subscription_++;
  subscriptions_[id] = Subscription{job_id, std::move(on_version), std::move(on_end)};
  return id;
}

void JobManager::Unwatch(int64_t subscription) {
  absl::MutexLock lock(&mu_);
  subscriptions_.erase(subscription);
}

absl::Status JobManager::AddEvent(const std::string& job_id, proto::JobEvent event) {
  constexpr int kMaxEvents = 200;
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("job_id: no job '", job_id, "'"));
  proto::Job job = it->second.job;
  event.set_unix_ms(UnixMillis());
  *job.add_events() = std::move(event);
  if (job.events_size() > kMaxEvents) {
    job.mutable_events()->DeleteSubrange(0, job.events_size() - kMaxEvents);
  }
  RETURN_IF_ERROR(store_->PutJob(job));
  it->second.job = std::move(job);
  return absl::OkStatus();
}

int JobManager::num_jobs() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(jobs_.size());
}

bool JobManager::SchedulePlanning(const std::string& job_id, const std::string& reason,
                                  bool bounded) {
  Entry& e = jobs_[job_id];
  if (e.planning) {
    // A task is queued or running; run once more after it with the latest reason.
    if (e.pending_reason.empty() || reason != "measured") e.pending_reason = reason;
    return true;
  }
  auto task = [this, job_id, reason] { RunPlanning(job_id, reason); };
  if (bounded) {
    if (!pool_->TrySubmit(task)) return false;
  } else {
    pool_->Submit(task);
  }
  e.planning = true;
  return true;
}

void JobManager::RunPlanning(const std::string& job_id, const std::string& reason) {
  proto::Job job;
  std::vector<double> factors;
  proto::PlanVersion current;
  bool has_current = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return;
    job = it->second.job;
    factors = it->second.factors;
    has_current = !it->second.versions.empty();
    if (has_current) current = it->second.versions.back();
  }
  absl::StatusOr<PlanningInput> input =
      PrepareInput(job.model(), job.cluster(), job.options(), Excluded(job), options_.limits);
  absl::StatusOr<proto::PlanResult> result =
      input.ok() ? planner::RunPlanning(*input, factors)
                 : absl::StatusOr<proto::PlanResult>(input.status());
  bool accept = result.ok();
  if (result.ok() && reason == "measured" && has_current) {
    // Only worth a switch when the new plan is predicted min_gain faster than the current one
    // under the same calibrated costs.
    absl::StatusOr<double> now_s = CurrentObjective(*input, current.result().plan(), factors);
    if (now_s.ok()) accept = policy_.Accept(*now_s, ObjectiveOf(*result, input->tuner));
  }
  proto::PlanVersion version;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return;  // deleted meanwhile
    Entry& e = it->second;
    e.planning = false;
    if (!result.ok()) {
      e.job.set_state(proto::JOB_STATE_FAILED);
      e.job.set_last_error(std::string(result.status().message()));
      absl::Status s = store_->PutJob(e.job);
      (void)s;
    } else if (accept) {
      version.set_job_id(job_id);
      version.set_version(e.job.current_version() + 1);
      *version.mutable_result() = *result;
      version.set_reason(reason);
      version.set_created_unix_ms(UnixMillis());
      FillDeviceSlots(input->cluster, result->plan().num_devices(), &version);
      absl::Status stored = store_->PutPlanVersion(version);
      if (stored.ok()) {
        e.versions.push_back(version);
        e.job.set_current_version(version.version());
        e.job.set_state(result->feasible() ? proto::JOB_STATE_READY
                                           : proto::JOB_STATE_INFEASIBLE);
        e.job.clear_last_error();
        // Delivered under the lock (callbacks only queue), so watchers see versions in order
        // even when the next re-plan finishes on another worker right after this one.
        for (const auto& [id, sub] : subscriptions_) {
          if (sub.job_id == job_id) sub.on_version(version);
        }
      } else {
        e.job.set_last_error(std::string(stored.message()));
      }
      absl::Status s = store_->PutJob(e.job);
      (void)s;
    }
    if (!e.pending_reason.empty()) {
      const std::string next = e.pending_reason;
      e.pending_reason.clear();
      SchedulePlanning(job_id, next, /*bounded=*/false);
    }
  }
  if (result.ok() && accept) {
    if (observer_) {
      observer_->OnPlanComputed(job_id, *result);
      if (reason != "initial") observer_->OnReplan(reason);
    }
  }
}

absl::StatusOr<proto::ReportStageTimesResponse> JobManager::ReportStageTimes(
    const proto::ReportStageTimesRequest& request) {
  proto::Job job;
  std::vector<double> factors;
  proto::PlanVersion current;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(request.job_id());
    if (it == jobs_.end()) {
      return absl::NotFoundError(absl::StrCat("job_id: no job '", request.job_id(), "'"));
    }
    if (it->second.versions.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("job '", request.job_id(), "' has no plan yet"));
    }
    current = it->second.versions.back();
    if (request.plan_version() != current.version()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "plan_version: ", request.plan_version(), " is not the job's current version (",
          current.version(), "); fetch the current plan with WatchPlan"));
    }
    job = it->second.job;
    factors = it->second.factors;
  }
  std::vector<MeasuredStageTime> times;
  for (int i = 0; i < request.times_size(); ++i) {
    const proto::StageTime& t = request.times(i);
    absl::StatusOr<OpKind> kind = ParseOpKind(t.op_kind());
    if (!kind.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("times[", i, "].", kind.status().message()));
    }
    times.push_back(MeasuredStageTime{t.stage(), *kind, t.seconds(), t.samples()});
  }
  ASSIGN_OR_RETURN(PlanningInput input, PrepareInput(job.model(), job.cluster(), job.options(),
                                                     Excluded(job), options_.limits));
  ASSIGN_OR_RETURN(Plan plan, PlanFromProto(current.result().plan()));
  ASSIGN_OR_RETURN(ProblemBuilder builder,
                   ProblemBuilder::Create(input.model, input.cluster, CostModel(),
                                          plan.num_devices, factors));
  ASSIGN_OR_RETURN(PipelineProblem predicted, builder.Build(plan));
  ASSIGN_OR_RETURN(CalibrationUpdate update,
                   FitCalibration(plan, predicted, times, factors, input.model.num_layers()));
  proto::ReportStageTimesResponse out;
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(request.job_id());
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("job_id: no job '", request.job_id(), "'"));
  }
  // A version made while the factors were fitted (outside the lock) makes them stale.
  if (it->second.job.current_version() != current.version()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "plan_version: ", request.plan_version(), " was replaced by version ",
        it->second.job.current_version(), " while the report was processed; report again"));
  }
  RETURN_IF_ERROR(store_->PutCalibration(request.job_id(), update.factors));
  it->second.factors = update.factors;
  const bool replan = policy_.OnReport(request.job_id(), update.max_deviation,
                                       clock_->NowSeconds());
  if (replan) SchedulePlanning(request.job_id(), "measured", /*bounded=*/false);
  out.set_replanned(replan);
  out.set_current_version(it->second.job.current_version());
  out.set_decision(absl::StrFormat(
      "largest deviation %.1f%% (stage %d): %s", update.max_deviation * 100, update.worst_stage,
      replan ? "re-planning with the measured costs"
             : "no re-plan (within tolerance, or cooling down)"));
  return out;
}

std::vector<std::string> JobManager::NodeLost(const std::string& node_id,
                                              const std::string& reason) {
  std::vector<std::string> out;
  absl::MutexLock lock(&mu_);
  for (auto& [id, e] : jobs_) {
    if (!HasNode(e.job.cluster(), node_id)) continue;
    const std::vector<std::string> excluded = Excluded(e.job);
    if (std::find(excluded.begin(), excluded.end(), node_id) != excluded.end()) continue;
    e.job.add_excluded_nodes(node_id);
    absl::Status s = store_->PutJob(e.job);
    (void)s;
    SchedulePlanning(id, reason, /*bounded=*/false);
    out.push_back(id);
  }
  return out;
}

std::vector<std::string> JobManager::NodeJoined(const std::string& node_id) {
  std::vector<std::string> out;
  absl::MutexLock lock(&mu_);
  for (auto& [id, e] : jobs_) {
    std::vector<std::string> excluded = Excluded(e.job);
    auto pos = std::find(excluded.begin(), excluded.end(), node_id);
    if (pos == excluded.end()) continue;
    excluded.erase(pos);
    e.job.clear_excluded_nodes();
    for (const std::string& n : excluded) e.job.add_excluded_nodes(n);
    absl::Status s = store_->PutJob(e.job);
    (void)s;
    SchedulePlanning(id, "node_join", /*bounded=*/false);
    out.push_back(id);
  }
  return out;
}

}  // namespace octopipe::planner
