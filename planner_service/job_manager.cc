#include "planner_service/job_manager.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/convert.h"
#include "core/cost_model.h"
#include "core/limits.h"
#include "core/status_macros.h"
#include "logging/logging.h"
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

// The re-plan a job has acknowledged but not finished (Job.pending_reason and its text twin
// pending_replan_reason, which jobs stored by older planners carry alone). nullopt: none. An
// intent this binary does not know plans anyway, as for a node change.
std::optional<ReplanReason> PendingReason(const proto::Job& job) {
  if (job.pending_reason() == proto::PLAN_REASON_UNSPECIFIED &&
      job.pending_replan_reason().empty()) {
    return std::nullopt;
  }
  absl::StatusOr<ReplanReason> r =
      ReplanReasonFromProto(job.pending_reason(), job.pending_replan_reason());
  return r.ok() ? *r : ReplanReason::kNodeJoin;
}

void SetPendingReason(std::optional<ReplanReason> reason, proto::Job* job) {
  job->set_pending_reason(reason ? ReplanReasonToProto(*reason)
                                 : proto::PLAN_REASON_UNSPECIFIED);
  job->set_pending_replan_reason(reason ? std::string(ReplanReasonName(*reason)) : "");
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
                                          p.num_devices, factors, p.vocab_parallel));
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

absl::StatusOr<std::string> JobManager::NewJobId() {
  // From the store: a number is never handed out twice, across deletes and restarts.
  ASSIGN_OR_RETURN(int64_t n, store_->NextJobNumber());
  return absl::StrCat("job-", n);
}

absl::Status JobManager::Recover() {
  ASSIGN_OR_RETURN(std::vector<proto::Job> jobs, store_->LoadJobs());
  absl::MutexLock lock(&mu_);
  for (proto::Job& job : jobs) {
    Entry e;
    ASSIGN_OR_RETURN(e.versions, store_->LoadPlanVersions(job.id()));
    ASSIGN_OR_RETURN(e.factors, store_->LoadCalibration(job.id()));
    const std::string id = job.id();
    e.job = std::move(job);
    if (!e.versions.empty()) e.job.set_current_version(e.versions.back().version());
    // Stored data that no longer passes validation (an older binary accepted it, or the
    // limits were lowered) makes the job FAILED with the reason; it is never planned, so it
    // cannot crash the service on every start.
    absl::Status valid = PrepareInput(e.job.model(), e.job.cluster(), e.job.options(),
                                      Excluded(e.job), options_.limits)
                             .status();
    if (!valid.ok() && valid.code() != absl::StatusCode::kFailedPrecondition) {
      e.job.set_state(proto::JOB_STATE_FAILED);
      e.job.set_last_error(absl::StrCat("at start-up: ", valid.message()));
      SetPendingReason(std::nullopt, &e.job);
      RETURN_IF_ERROR(store_->PutJob(e.job));
      jobs_[id] = std::move(e);
      continue;
    }
    // A re-plan acknowledged before the restart (stored with the acknowledgement) resumes;
    // a job that never got its first plan gets it.
    std::optional<ReplanReason> reason = PendingReason(e.job);
    if (!reason && e.versions.empty() && e.job.state() != proto::JOB_STATE_FAILED) {
      reason = ReplanReason::kInitial;
    }
    jobs_[id] = std::move(e);
    if (reason) SchedulePlanning(id, *reason, /*bounded=*/false);
  }
  if (observer_) observer_->OnJobCount(static_cast<int>(jobs_.size()));
  return absl::OkStatus();
}

bool JobManager::KnowsNode(const std::string& node_id) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [id, e] : jobs_) {
    if (HasNode(e.job.cluster(), node_id)) return true;
  }
  return false;
}

absl::StatusOr<proto::Job> JobManager::Create(const proto::CreateJobRequest& request) {
  // Validate everything before anything is stored.
  RETURN_IF_ERROR(
      PrepareInput(request.model(), request.cluster(), request.options(), {}, options_.limits)
          .status());
  if (static_cast<int64_t>(request.name().size()) > options_.limits.max_name_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "name: ", request.name().size(), " bytes exceed the limit of ",
        options_.limits.max_name_bytes, " (max_name_bytes)"));
  }
  absl::MutexLock lock(&mu_);
  if (pool_->stopping()) {
    return absl::UnavailableError("the planner is shutting down; retry on another replica");
  }
  if (pool_->full(TuningPool::Lane::kJobs)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "job planning queue is full (", pool_->max_queued(), " tasks waiting); retry later"));
  }
  ASSIGN_OR_RETURN(const std::string id, NewJobId());
  Entry e;
  e.job.set_id(id);
  e.job.set_name(request.name().empty() ? id : request.name());
  *e.job.mutable_model() = request.model();
  *e.job.mutable_cluster() = request.cluster();
  *e.job.mutable_options() = request.options();
  // Validated above: answered and stored in both forms, typed and text.
  const Objective objective =
      ObjectiveFromProto(request.options().objective_kind(), request.options().objective())
          .value_or(Objective::kSynchronous);
  e.job.mutable_options()->set_objective_kind(ObjectiveToProto(objective));
  e.job.mutable_options()->set_objective(std::string(ObjectiveName(objective)));
  if (request.has_training()) *e.job.mutable_training() = request.training();
  e.job.set_state(proto::JOB_STATE_PLANNING);
  e.job.set_created_unix_ms(UnixMillis());
  SetPendingReason(ReplanReason::kInitial, &e.job);
  RETURN_IF_ERROR(store_->PutJob(e.job));
  jobs_[id] = e;
  if (!SchedulePlanning(id, ReplanReason::kInitial, /*bounded=*/true)) {
    jobs_.erase(id);
    absl::Status s = store_->DeleteJob(id);
    (void)s;  // best effort: the job was never visible
    return absl::ResourceExhaustedError(absl::StrCat(
        "job planning queue is full (", pool_->max_queued(), " tasks waiting); retry later"));
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
  if (out.ByteSizeLong() > kMaxResponseBytes) {
    *out.mutable_job() = Summary(it->second.job);
    out.set_model_omitted(true);
  }
  return out;
}

proto::Job JobManager::Summary(const proto::Job& job) {
  proto::Job s = job;
  s.set_num_layers(job.model().layers_size());
  s.mutable_model()->clear_layers();
  return s;
}

absl::StatusOr<proto::ListJobsResponse> JobManager::ListPage(int page_size,
                                                            const std::string& page_token) const {
  if (page_size < 0 || page_size > kMaxPageSize) {
    return absl::InvalidArgumentError(absl::StrCat("page_size must be in [0, ", kMaxPageSize,
                                                   "] (0 = ", kDefaultPageSize, "), got ",
                                                   page_size));
  }
  if (page_size == 0) page_size = kDefaultPageSize;
  // The token is the (created_unix_ms, id) of the last job of the previous page: the next page
  // starts after it, so deletes and creates in between neither repeat nor skip a job.
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
  for (const proto::Job& job : List()) {
    if (!page_token.empty() &&
        std::make_pair(job.created_unix_ms(), job.id()) <= std::make_pair(after_ms, after_id)) {
      continue;
    }
    if (out.jobs_size() == page_size || (out.jobs_size() > 0 && bytes > kMaxResponseBytes)) {
      const proto::Job& last = out.jobs(out.jobs_size() - 1);
      out.set_next_page_token(absl::StrCat(last.created_unix_ms(), ":", last.id()));
      break;
    }
    *out.add_jobs() = Summary(job);
    bytes += out.jobs(out.jobs_size() - 1).ByteSizeLong();
  }
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
    std::function<void(const proto::PlanVersion&)> on_version, std::function<void()> on_end,
    std::function<void(const proto::JobEvent&)> on_event) {
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
  subscriptions_[id] =
      Subscription{job_id, std::move(on_version), std::move(on_end), std::move(on_event)};
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
  const proto::JobEvent& added = it->second.job.events(it->second.job.events_size() - 1);
  for (const auto& [id, sub] : subscriptions_) {
    if (sub.job_id == job_id && sub.on_event) sub.on_event(added);
  }
  return absl::OkStatus();
}

int JobManager::num_jobs() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(jobs_.size());
}

bool JobManager::SchedulePlanning(const std::string& job_id, ReplanReason reason,
                                  bool bounded) {
  Entry& e = jobs_[job_id];
  // The intent, stored by the caller's next PutJob (with its acknowledgement): a restart
  // resumes it. "initial" stays until the first plan exists.
  const std::optional<ReplanReason> pending = PendingReason(e.job);
  if (!pending || *pending == ReplanReason::kMeasured) SetPendingReason(reason, &e.job);
  if (e.planning) {
    // A task is queued or running; run once more after it with the latest reason.
    if (!e.pending_reason || reason != ReplanReason::kMeasured) e.pending_reason = reason;
    return true;
  }
  auto task = [this, job_id, reason] { RunPlanning(job_id, reason); };
  if (bounded) {
    if (!pool_->TrySubmit(task)) return false;
  } else {
    pool_->Submit(task);
  }
  e.planning = true;
  if (observer_) observer_->OnQueueDepth("jobs", pool_->queued(TuningPool::Lane::kJobs));
  return true;
}

void JobManager::RunPlanning(const std::string& job_id, ReplanReason reason) {
  if (observer_) observer_->OnQueueDepth("jobs", pool_->queued(TuningPool::Lane::kJobs));
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
  // Agents run a job's plans with the executor, which does not split the output layer yet.
  if (input.ok()) input->tuner.vocab_parallel = VocabParallelMode::kOff;
  if (input.ok() && has_current) {
    // Warm start: the search begins from the current plan (ignored when it no longer fits
    // the devices left).
    absl::StatusOr<Plan> plan = PlanFromProto(current.result().plan());
    if (plan.ok()) input->tuner.seed_stages = plan->stages;
  }
  absl::StatusOr<proto::PlanResult> result =
      input.ok() ? planner::RunPlanning(*input, factors, [this] { return pool_->stopping(); })
                 : absl::StatusOr<proto::PlanResult>(input.status());
  if (result.status().code() == absl::StatusCode::kCancelled) {
    // Shutting down: the intent stays stored, and the next start resumes it.
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it != jobs_.end()) it->second.planning = false;
    return;
  }
  bool accept = result.ok();
  if (result.ok() && reason == ReplanReason::kMeasured && has_current) {
    // Only worth a switch when the new plan is predicted min_gain faster than the current one
    // under the same calibrated costs.
    absl::StatusOr<double> now_s = CurrentObjective(*input, current.result().plan(), factors);
    if (now_s.ok()) {
      const double new_s = ObjectiveOf(*result, input->tuner);
      accept = policy_.Accept(*now_s, new_s);
      logging::Event(*logging::Logger("replan"), spdlog::level::info, "re-plan decision",
                     {{"job", job_id}, {"reason", reason}, {"current_s", *now_s},
                      {"new_s", new_s}, {"predicted_gain", *now_s > 0 ? 1 - new_s / *now_s : 0},
                      {"adopted", accept}});
    }
  }
  proto::PlanVersion version;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return;  // deleted meanwhile
    Entry& e = it->second;
    e.planning = false;
    // This run carried the stored intent; a re-plan asked for meanwhile sets it again below.
    SetPendingReason(std::nullopt, &e.job);
    if (!result.ok()) {
      logging::Event(*logging::Logger("jobs"), spdlog::level::warn, "planning failed",
                     {{"job", job_id}, {"reason", reason},
                      {"error", std::string(result.status().message())}});
      e.job.set_state(proto::JOB_STATE_FAILED);
      e.job.set_last_error(std::string(result.status().message()));
      absl::Status s = store_->PutJob(e.job);
      (void)s;
    } else if (accept) {
      version.set_job_id(job_id);
      version.set_version(e.job.current_version() + 1);
      *version.mutable_result() = *result;
      version.set_reason_kind(ReplanReasonToProto(reason));
      version.set_reason(std::string(ReplanReasonName(reason)));
      version.set_created_unix_ms(UnixMillis());
      FillDeviceSlots(input->cluster, result->plan().num_devices(), &version);
      absl::Status stored = store_->PutPlanVersion(version);
      if (stored.ok()) {
        e.versions.push_back(version);
        e.job.set_current_version(version.version());
        if (version.version() == 1) policy_.OnFirstPlan(job_id, clock_->NowSeconds());
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
    } else {
      absl::Status s = store_->PutJob(e.job);  // the intent is done: not worth a switch
      (void)s;
    }
    if (e.pending_reason) {
      const ReplanReason next = *e.pending_reason;
      e.pending_reason.reset();
      SchedulePlanning(job_id, next, /*bounded=*/false);
      absl::Status s = store_->PutJob(e.job);
      (void)s;
    }
  }
  if (result.ok() && accept) {
    if (observer_) {
      observer_->OnPlanComputed(job_id, *result);
      if (reason != ReplanReason::kInitial) observer_->OnReplan(reason);
    }
  }
}

absl::StatusOr<proto::ReportStageTimesResponse> JobManager::ReportStageTimes(
    const proto::ReportStageTimesRequest& request) {
  // One entry per (stage, op kind) at most: bounded by the stage limit.
  RETURN_IF_ERROR(CheckLimit("times", request.times_size(),
                             5 * options_.limits.max_layers, "5 x max_layers"));
  RETURN_IF_ERROR(CheckLimit("device_times", request.device_times_size(),
                             options_.limits.max_devices, "max_devices"));
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
    absl::StatusOr<OpKind> kind = OpKindFromProto(t.kind(), t.op_kind());
    if (!kind.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("times[", i, "].", kind.status().message()));
    }
    times.push_back(MeasuredStageTime{t.stage(), *kind, t.seconds(), t.samples()});
  }
  std::vector<MeasuredLayerTime> layer_times;
  for (int i = 0; i < request.layer_times_size(); ++i) {
    const proto::LayerOpTime& t = request.layer_times(i);
    absl::StatusOr<OpKind> kind = OpKindFromProto(t.kind(), t.op_kind());
    if (!kind.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer_times[", i, "].", kind.status().message()));
    }
    layer_times.push_back(MeasuredLayerTime{t.layer(), *kind, t.seconds(), t.samples()});
  }
  ASSIGN_OR_RETURN(PlanningInput input, PrepareInput(job.model(), job.cluster(), job.options(),
                                                     Excluded(job), options_.limits));
  ASSIGN_OR_RETURN(Plan plan, PlanFromProto(current.result().plan()));
  ASSIGN_OR_RETURN(std::vector<DeviceBusy> device_busy,
                   DeviceBusyFromProto(request, plan.num_devices));
  ASSIGN_OR_RETURN(ProblemBuilder builder,
                   ProblemBuilder::Create(input.model, input.cluster, CostModel(),
                                          plan.num_devices, factors, plan.vocab_parallel));
  ASSIGN_OR_RETURN(PipelineProblem predicted, builder.Build(plan));
  ASSIGN_OR_RETURN(CalibrationUpdate update,
                   FitCalibration(plan, predicted, times, factors, input.model.num_layers()));
  if (!layer_times.empty()) {
    // Per-layer factors; the stage deviation above still decides about re-planning.
    std::vector<LayerCost> layer_costs(input.model.num_layers());
    for (const StageAssignment& st : plan.stages) {
      for (int l = st.first_layer; l <= st.last_layer; ++l) {
        layer_costs[l] = builder.layer_cost(l, st.device);
      }
    }
    ASSIGN_OR_RETURN(CalibrationUpdate by_layer,
                     FitLayerCalibration(layer_costs, layer_times, factors));
    update.factors = std::move(by_layer.factors);
  }
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
  if (replan) {
    SchedulePlanning(request.job_id(), ReplanReason::kMeasured, /*bounded=*/false);
    absl::Status s = store_->PutJob(it->second.job);
    (void)s;  // the calibration is stored; a lost intent only delays this re-plan
  }
  logging::Event(*logging::Logger("replan"), spdlog::level::info, "measured deviation",
                 {{"job", request.job_id()}, {"deviation", update.max_deviation},
                  {"worst_stage", update.worst_stage}, {"replan", replan}});
  if (observer_ && !device_busy.empty()) {
    observer_->OnDeviceBusy(request.job_id(), current.version(), plan.num_devices, device_busy);
  }
  out.set_replanned(replan);
  out.set_current_version(it->second.job.current_version());
  out.set_decision(absl::StrFormat(
      "largest deviation %.1f%% (stage %d): %s", update.max_deviation * 100, update.worst_stage,
      replan ? "re-planning with the measured costs"
             : "no re-plan (within tolerance, or cooling down)"));
  return out;
}

std::vector<std::string> JobManager::NodeLost(const std::string& node_id,
                                              ReplanReason reason) {
  std::vector<std::string> out;
  absl::MutexLock lock(&mu_);
  for (auto& [id, e] : jobs_) {
    if (!HasNode(e.job.cluster(), node_id)) continue;
    const std::vector<std::string> excluded = Excluded(e.job);
    if (std::find(excluded.begin(), excluded.end(), node_id) != excluded.end()) continue;
    e.job.add_excluded_nodes(node_id);
    // The exclusion and the re-plan intent are stored together, before the caller is told.
    SchedulePlanning(id, reason, /*bounded=*/false);
    absl::Status s = store_->PutJob(e.job);
    (void)s;
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
    SchedulePlanning(id, ReplanReason::kNodeJoin, /*bounded=*/false);
    absl::Status s = store_->PutJob(e.job);
    (void)s;
    out.push_back(id);
  }
  return out;
}

}  // namespace octopipe::planner
