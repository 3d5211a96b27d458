#include "planner_service/job_manager.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/convert.h"
#include "core/cost_model.h"
#include "core/job_event_kind.h"
#include "core/limits.h"
#include "core/status_macros.h"
#include "logging/logging.h"
#include "planner_service/agent_jobs.h"
#include "calibration/layer_calibration.h"
#include "planner_service/job_convert.h"
#include "simulator/evaluator.h"
#include "simulator/problem_builder.h"
#include "tuner/layout_simulation.h"

namespace octopipe::planner {
namespace {

// Agents' layouts keep whole replicas within nodes where that costs at most this much
// predicted time: a lost node then leaves a live copy of every layer (LayoutRequest).
constexpr double kAgentNodeLocalTolerance = 0.05;

absl::StatusOr<PlanningInput> InputOf(const JobRecord& job, const PlanningLimits& limits) {
  ASSIGN_OR_RETURN(PlanningInput input,
                   PrepareInput(job.spec.model, job.spec.cluster, job.spec.options,
                                job.excluded_nodes, limits));
  if (job.training) input.layout.node_local_tolerance = kAgentNodeLocalTolerance;
  return input;
}

// The version's whole layout when it was planned as one (PlanResult.layout_plan); nullopt for
// a single-pipeline version or one whose layout does not convert.
std::optional<LayoutPlan> LayoutOfVersion(const proto::PlanVersion& version) {
  if (!version.result().has_layout_plan()) return std::nullopt;
  absl::StatusOr<LayoutPlan> layout = LayoutPlanFromProto(version.result().layout_plan());
  if (!layout.ok()) return std::nullopt;
  return std::move(*layout);
}

absl::Status NoJob(const std::string& job_id) {
  return absl::NotFoundError(absl::StrCat("job_id: no job '", logging::Abbreviated(job_id), "'"));
}

// Agents' events are bounded before they are stored: the kind a short lower-case word, the node
// id a name, the message at most kMaxEventMessageBytes; a job keeps its newest kMaxEvents events
// within kMaxEventBytes in all.
constexpr size_t kMaxEvents = 200;
constexpr size_t kMaxEventMessageBytes = 8 << 10;
constexpr size_t kMaxEventBytes = 256 << 10;

absl::Status CheckEvent(const JobEvent& e, int64_t max_name_bytes) {
  if (e.kind.empty() || e.kind.size() > 64 ||
      !std::all_of(e.kind.begin(), e.kind.end(), [](char c) { return (c >= 'a' && c <= 'z') || c == '_'; })) {
    return absl::InvalidArgumentError(absl::StrCat(
        "event.kind must be 1-64 characters of a-z and _, got '", logging::Abbreviated(e.kind), "'"));
  }
  if (static_cast<int64_t>(e.node_id.size()) > max_name_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("event.node_id: ", e.node_id.size(),
                                                   " bytes exceed the limit of ", max_name_bytes));
  }
  if (e.message.size() > kMaxEventMessageBytes) {
    return absl::InvalidArgumentError(absl::StrCat("event.message: ", e.message.size(),
                                                   " bytes exceed the limit of ",
                                                   kMaxEventMessageBytes));
  }
  if (e.iteration < 0 || e.plan_version < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "event.iteration and event.plan_version must be >= 0, got ", e.iteration, " and ",
        e.plan_version));
  }
  return absl::OkStatus();
}

size_t EventBytes(const JobEvent& e) { return e.kind.size() + e.node_id.size() + e.message.size(); }

// The current plan's objective under the given calibration, or an error when it no longer
// applies (e.g. its devices are gone).
absl::StatusOr<double> CurrentObjective(const PlanningInput& input, const Plan& p,
                                        const std::optional<LayoutPlan>& layout,
                                        const std::vector<double>& factors) {
  if (layout) {
    // A layout is judged whole (every replica and the gradient all-reduces), as its
    // replacement's prediction is (ObjectiveOf).
    ASSIGN_OR_RETURN(LayoutSimulation sim,
                     SimulateLayout(input.model, input.cluster, CostModel(), *layout,
                                    input.tuner.link_contention, factors));
    return sim.iteration_time_s;
  }
  ASSIGN_OR_RETURN(ProblemBuilder builder,
                   ProblemBuilder::Create(input.model, input.cluster, CostModel(),
                                          p.num_devices, factors, p.vocab_parallel));
  ASSIGN_OR_RETURN(PipelineProblem problem, builder.Build(p));
  problem.link_contention = input.tuner.link_contention;
  ASSIGN_OR_RETURN(SimResult r, Simulate(problem, p.schedule));
  return input.tuner.objective == Objective::kSteadyState ? r.steady_state_iteration_time_s
                                                          : r.iteration_time_s;
}

// The iterations a job has left, for weighing a switch against a faster layout after a node
// loss: an agent job's from its progress; a planning-only job's are unknown, and a horizon of
// kPlanningOnlyHorizon iterations stands in (a switch then matters only when it costs more
// than that many iterations' difference).
constexpr int kPlanningOnlyHorizon = 1000;
int RemainingIterations(const JobRecord& job) {
  if (!job.training) return kPlanningOnlyHorizon;
  return static_cast<int>(std::clamp<int64_t>(job.training->iterations - job.progress.iteration,
                                              0, std::numeric_limits<int>::max()));
}

// The node-loss options a re-plan compared, one log line each.
void LogNodeLossOptions(const std::string& job_id, const proto::PlanResult& result) {
  for (const proto::NodeLossOption& o : result.node_loss_options()) {
    logging::Event(*logging::Logger("replan"), spdlog::level::info, "node-loss option",
                   {{"job", job_id}, {"kind", o.kind()}, {"summary", o.summary()},
                    {"iteration_s", o.iteration_time_s()}, {"switch_s", o.switch_s()},
                    {"moved_bytes", o.moved_bytes()},
                    {"remaining_iterations", o.remaining_iterations()},
                    {"total_s", o.total_s()}, {"chosen", o.chosen()},
                    {"not_offered", o.not_offered()}});
  }
}

// A report's stage and layer times, parsed (kInvalidArgument naming the entry).
struct MeasuredTimes {
  std::vector<MeasuredStageTime> stages;
  std::vector<MeasuredLayerTime> layers;
};

absl::StatusOr<MeasuredTimes> MeasuredTimesOf(const proto::ReportStageTimesRequest& request) {
  MeasuredTimes out;
  for (int i = 0; i < request.times_size(); ++i) {
    const proto::StageTime& t = request.times(i);
    absl::StatusOr<OpKind> kind = OpKindFromProto(t.kind());
    if (!kind.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("times[", i, "].", kind.status().message()));
    }
    const std::string field = absl::StrCat("times[", i, "]");
    RETURN_IF_ERROR(CheckReportedSeconds(field + ".seconds", t.seconds()));
    RETURN_IF_ERROR(CheckReportedSamples(field + ".samples", t.samples()));
    out.stages.push_back(MeasuredStageTime{t.stage(), *kind, t.seconds(), t.samples()});
  }
  for (int i = 0; i < request.layer_times_size(); ++i) {
    const proto::LayerOpTime& t = request.layer_times(i);
    absl::StatusOr<OpKind> kind = OpKindFromProto(t.kind());
    if (!kind.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer_times[", i, "].", kind.status().message()));
    }
    const std::string field = absl::StrCat("layer_times[", i, "]");
    RETURN_IF_ERROR(CheckReportedSeconds(field + ".seconds", t.seconds()));
    RETURN_IF_ERROR(CheckReportedSamples(field + ".samples", t.samples()));
    out.layers.push_back(MeasuredLayerTime{t.layer(), *kind, t.seconds(), t.samples()});
  }
  return out;
}

// A report's progress: iterations within the job's, a finite loss, tokens/s finite and >= 0.
absl::Status CheckProgress(const proto::ReportStageTimesRequest& request, const JobRecord& job) {
  if (!request.has_progress()) return absl::OkStatus();
  const proto::JobProgress& p = request.progress();
  const int64_t total = job.training ? job.training->iterations : 0;
  if (p.iteration() < 0 || p.iteration() > total) {
    return absl::InvalidArgumentError(absl::StrCat(
        "progress.iteration must be in [0, ", total, "] (the job's iterations), got ",
        p.iteration()));
  }
  if (p.has_loss() && !std::isfinite(p.loss())) {
    return absl::InvalidArgumentError(absl::StrCat("progress.loss must be finite, got ", p.loss()));
  }
  if (!(p.tokens_per_s() >= 0) || !std::isfinite(p.tokens_per_s())) {
    return absl::InvalidArgumentError(
        absl::StrCat("progress.tokens_per_s must be finite and >= 0, got ", p.tokens_per_s()));
  }
  return absl::OkStatus();
}

// New calibration factors from measured times against what `plan` predicts under `factors`:
// per stage, or per layer when the report has layer times (the stage deviation still decides
// about re-planning); a split head's from the vocabulary passes (calibration.h).
absl::StatusOr<CalibrationUpdate> FitReport(const PlanningInput& input, const Plan& plan,
                                            const std::vector<double>& factors,
                                            const MeasuredTimes& measured) {
  ASSIGN_OR_RETURN(ProblemBuilder builder,
                   ProblemBuilder::Create(input.model, input.cluster, CostModel(),
                                          plan.num_devices, factors, plan.vocab_parallel));
  return FitMeasuredTimes(builder, plan, measured.stages, measured.layers, factors);
}

// Agents run a split head with the executor, whose vocabulary shards need an entry each: for a
// job agents train (`trains`), "auto" does not try the split when the model's vocabulary is
// smaller than the devices, and "on" is kInvalidArgument naming options.vocab_parallel.
absl::Status AgentVocabSplit(bool trains, PlanningInput* input) {
  TunerOptions& t = input->tuner;
  if (!trains || t.vocab_parallel == VocabParallelMode::kOff || input->model.layers.empty() ||
      input->model.layers.back().kind != LayerKind::kHead) {
    return absl::OkStatus();  // (a model without a head: the tuner's answer)
  }
  const int64_t vocab = input->model.layers.back().dims.vocab;
  if (vocab >= t.num_devices) return absl::OkStatus();
  if (t.vocab_parallel == VocabParallelMode::kOn) {
    return absl::InvalidArgumentError(absl::StrCat(
        "options.vocab_parallel: on, but agents split the head into one vocabulary shard per "
        "device and the model's vocabulary (", vocab, ") is smaller than its ", t.num_devices,
        " devices"));
  }
  t.vocab_parallel = VocabParallelMode::kOff;
  return absl::OkStatus();
}

// Where the largest deviation is, for the report's decision: "(stage 2)", or "(vocabulary
// passes)", with the vocabulary passes' own deviation when they were reported but are not it.
std::string WorstOf(const CalibrationUpdate& u) {
  if (u.worst_is_vocab) return "(vocabulary passes S/T)";
  std::string out = absl::StrFormat("(stage %d)", u.worst_stage);
  if (u.vocab_reported) {
    absl::StrAppendFormat(&out, ", vocabulary passes S/T %.1f%%", u.vocab_deviation * 100);
  }
  return out;
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
  ASSIGN_OR_RETURN(std::vector<JobRecord> jobs, store_->LoadJobs());
  absl::MutexLock lock(&mu_);
  for (JobRecord& job : jobs) {
    Entry e;
    ASSIGN_OR_RETURN(e.versions, store_->LoadPlanVersions(job.id));
    ASSIGN_OR_RETURN(e.factors, store_->LoadCalibration(job.id));
    const std::string id = job.id;
    // Factors an older binary stored outside the range (from a report it did not check) are
    // clamped here, not left to refuse every later report.
    if (const int repaired = ClampFactors(&e.factors); repaired > 0) {
      logging::Event(*logging::Logger("jobs"), spdlog::level::warn, "calibration repaired",
                     {{"job", id}, {"factors_clamped", repaired},
                      {"range", absl::StrCat("[", kMinFactor, ", ", kMaxFactor, "]")}});
      RETURN_IF_ERROR(store_->PutCalibration(id, e.factors));
    }
    e.job = std::move(job);
    if (!e.versions.empty()) {
      e.job.current_version = e.versions.back().version();
      e.current_plan = PlanFromProto(e.versions.back().result().plan());
      e.current_layout = LayoutOfVersion(e.versions.back());
    }
    // Stored data that no longer passes validation (an older binary accepted it, or the
    // limits were lowered) makes the job FAILED with the reason; it is never planned, so it
    // cannot crash the service on every start.
    absl::Status valid = InputOf(e.job, options_.limits).status();
    if (!valid.ok() && valid.code() != absl::StatusCode::kFailedPrecondition) {
      e.job.state = JobState::kFailed;
      e.job.last_error = absl::StrCat("at start-up: ", valid.message());
      e.job.pending_reason.reset();
      RETURN_IF_ERROR(store_->PutJob(e.job));
      jobs_[id] = std::move(e);
      continue;
    }
    // A re-plan acknowledged before the restart (stored with the acknowledgement) resumes;
    // a job that never got its first plan gets it.
    std::optional<ReplanReason> reason = e.job.pending_reason;
    if (!reason && e.versions.empty() && e.job.state != JobState::kFailed) {
      reason = ReplanReason::kInitial;
    }
    jobs_[id] = std::move(e);
    if (reason) SchedulePlanning(id, *reason, /*bounded=*/false);
  }
  PublishJobCounts();
  return absl::OkStatus();
}

bool JobManager::KnowsNode(const std::string& node_id) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [id, e] : jobs_) {
    if (e.job.HasNode(node_id)) return true;
  }
  return false;
}

absl::StatusOr<JobRecord> JobManager::Create(NewJob request) {
  // Agents run whole layouts: a job they train is planned as one over every device of its
  // cluster (PP x TP x EP x DP; layout_pp/tp/ep/dp fix degrees) unless num_devices asks for a
  // single pipeline over that many. Stored so, so a re-plan chooses the same way.
  if (request.training && request.spec.options.num_devices() == 0) {
    request.spec.options.set_choose_layout(true);
  }
  // Validate everything before anything is stored.
  ASSIGN_OR_RETURN(PlanningInput input,
                   PrepareInput(request.spec.model, request.spec.cluster, request.spec.options,
                                {}, options_.limits));
  RETURN_IF_ERROR(AgentVocabSplit(request.training.has_value(), &input));
  if (static_cast<int64_t>(request.name.size()) > options_.limits.max_name_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "name: ", request.name.size(), " bytes exceed the limit of ",
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
  e.job.id = id;
  e.job.name = request.name.empty() ? id : std::move(request.name);
  e.job.spec = std::move(request.spec);
  // Validated above: answered and stored explicitly.
  proto::PlanOptions& options = e.job.spec.options;
  const Objective objective =
      ObjectiveFromProto(options.objective_kind()).value_or(Objective::kSynchronous);
  options.set_objective_kind(ObjectiveToProto(objective));
  e.job.training = std::move(request.training);
  e.job.state = JobState::kPlanning;
  e.job.created_unix_ms = UnixMillis();
  e.job.pending_reason = ReplanReason::kInitial;
  RETURN_IF_ERROR(store_->PutJob(e.job));
  jobs_[id] = e;
  if (!SchedulePlanning(id, ReplanReason::kInitial, /*bounded=*/true)) {
    jobs_.erase(id);
    absl::Status s = store_->DeleteJob(id);
    (void)s;  // best effort: the job was never visible
    return absl::ResourceExhaustedError(absl::StrCat(
        "job planning queue is full (", pool_->max_queued(), " tasks waiting); retry later"));
  }
  PublishJobCounts();
  return jobs_[id].job;
}

absl::StatusOr<JobSnapshot> JobManager::Get(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return NoJob(job_id);
  JobSnapshot out{it->second.job, std::nullopt};
  if (!it->second.versions.empty()) out.current = it->second.versions.back();
  return out;
}

std::vector<JobRecord> JobManager::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<JobRecord> out;
  for (const auto& [id, e] : jobs_) out.push_back(e.job);
  std::sort(out.begin(), out.end(), [](const JobRecord& a, const JobRecord& b) {
    return a.created_unix_ms != b.created_unix_ms ? a.created_unix_ms < b.created_unix_ms
                                                  : a.id < b.id;
  });
  return out;
}

absl::Status JobManager::Delete(const std::string& job_id) {
  std::vector<std::function<void()>> ends;
  {
    absl::MutexLock lock(&mu_);
    if (jobs_.count(job_id) == 0) return NoJob(job_id);
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
    PublishJobCounts();
  }
  policy_.Forget(job_id);
  if (observer_) observer_->OnJobRemoved(job_id);
  for (auto& end : ends) end();
  return absl::OkStatus();
}

absl::StatusOr<int64_t> JobManager::Watch(
    const std::string& job_id, int64_t after_version,
    std::function<void(const proto::PlanVersion&)> on_version, std::function<void()> on_end,
    std::function<void(const JobEvent&)> on_event) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return NoJob(job_id);
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

absl::Status JobManager::AddEvent(const std::string& job_id, JobEvent event) {
  RETURN_IF_ERROR(CheckEvent(event, options_.limits.max_name_bytes));
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return NoJob(job_id);
  JobRecord job = it->second.job;
  event.unix_ms = UnixMillis();
  const std::optional<JobEventKind> kind = ParseJobEventKind(event.kind);
  if (kind == JobEventKind::kCompleted && job.training) {
    job.progress.iteration = std::min<int64_t>(
        std::max(event.iteration, job.progress.iteration), job.training->iterations);
    job.progress.updated_unix_ms = event.unix_ms;
  }
  // The ranks start over from event.iteration, which a checkpoint can put before what was
  // reported: progress follows them from there (the loss shown stays until a newer one). A late
  // start of an older version, or one after the job completed, changes nothing.
  const auto supersedes = [&](const JobEvent& e) {
    const std::optional<JobEventKind> k = ParseJobEventKind(e.kind);
    return k == JobEventKind::kCompleted ||
           ((k == JobEventKind::kStarted || k == JobEventKind::kResumed) &&
            e.plan_version > event.plan_version);
  };
  if ((kind == JobEventKind::kStarted || kind == JobEventKind::kResumed) && job.training &&
      std::none_of(job.events.begin(), job.events.end(), supersedes)) {
    const int64_t from = std::min<int64_t>(event.iteration, job.training->iterations);
    job.progress.iteration = from;
    job.progress.loss_iteration = std::min(job.progress.loss_iteration, from);
    job.progress.updated_unix_ms = event.unix_ms;
  }
  job.events.push_back(std::move(event));
  if (job.events.size() > kMaxEvents) {
    job.events.erase(job.events.begin(), job.events.end() - kMaxEvents);
  }
  size_t bytes = 0;
  for (const JobEvent& e : job.events) bytes += EventBytes(e);
  while (bytes > kMaxEventBytes && job.events.size() > 1) {  // the oldest go first
    bytes -= EventBytes(job.events.front());
    job.events.erase(job.events.begin());
  }
  RETURN_IF_ERROR(store_->PutJob(job));
  it->second.job = std::move(job);
  PublishJobCounts();
  const JobEvent& added = it->second.job.events.back();
  for (const auto& [id, sub] : subscriptions_) {
    if (sub.job_id == job_id && sub.on_event) sub.on_event(added);
  }
  return absl::OkStatus();
}

void JobManager::PublishJobCounts() {
  if (!observer_) return;
  observer_->OnJobCount(static_cast<int>(jobs_.size()));
  std::map<std::string, int> by_phase;
  for (proto::JobPhase p : {proto::JOB_PHASE_PLANNING, proto::JOB_PHASE_PENDING,
                            proto::JOB_PHASE_RUNNING, proto::JOB_PHASE_COMPLETED,
                            proto::JOB_PHASE_FAILED}) {
    by_phase[JobPhaseName(p)] = 0;
  }
  for (const auto& [id, e] : jobs_) ++by_phase[JobPhaseName(JobPhaseOf(e.job))];
  observer_->OnJobPhases(by_phase);
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
  const std::optional<ReplanReason> pending = e.job.pending_reason;
  if (!pending || *pending == ReplanReason::kMeasured) e.job.pending_reason = reason;
  if (e.planning) {
    // A task is queued or running; run once more after it with the latest reason.
    if (!e.rerun_reason || reason != ReplanReason::kMeasured) e.rerun_reason = reason;
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

std::optional<JobManager::TaskInput> JobManager::TaskInputOf(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return std::nullopt;
  const Entry& e = it->second;
  TaskInput in{e.job, e.factors, 0, e.current_plan, e.current_layout, {}};
  if (!e.versions.empty()) {
    in.current_version = e.versions.back().version();
    for (const proto::DeviceSlot& slot : e.versions.back().device_slots()) {
      in.current_slots.push_back({slot.node_id(), slot.local_device()});
    }
  }
  return in;
}

// The tuner's input for a planning task: the job's spec on the nodes it has left (its options
// decide the vocabulary split, as for a Plan call; AgentVocabSplit for jobs agents train),
// warm-started from the current plan (ignored when it no longer fits the devices left).
absl::StatusOr<PlanningInput> JobManager::PlanningInputOf(const TaskInput& task) const {
  absl::StatusOr<PlanningInput> input = InputOf(task.job, options_.limits);
  if (!input.ok()) return input;
  RETURN_IF_ERROR(AgentVocabSplit(task.job.training.has_value(), &*input));
  if (task.current_version > 0 && task.current_plan.ok()) {
    input->tuner.seed_stages = task.current_plan->stages;
  }
  return input;
}

bool JobManager::WorthAdopting(const std::string& job_id, ReplanReason reason,
                               const TaskInput& task, const PlanningInput& input,
                               const proto::PlanResult& result) {
  if (reason != ReplanReason::kMeasured || task.current_version == 0) return true;
  absl::StatusOr<double> now_s =
      task.current_plan.ok()
          ? CurrentObjective(input, *task.current_plan, task.current_layout, task.factors)
                             : absl::StatusOr<double>(task.current_plan.status());
  if (!now_s.ok()) return true;  // the current plan no longer applies
  const double new_s = ObjectiveOf(result, input.tuner);
  const bool accept = policy_.Accept(*now_s, new_s);
  logging::Event(*logging::Logger("replan"), spdlog::level::info, "re-plan decision",
                 {{"job", job_id}, {"reason", reason}, {"current_s", *now_s},
                  {"new_s", new_s}, {"predicted_gain", *now_s > 0 ? 1 - new_s / *now_s : 0},
                  {"adopted", accept}});
  return accept;
}

void JobManager::RunPlanning(const std::string& job_id, ReplanReason reason) {
  if (observer_) observer_->OnQueueDepth("jobs", pool_->queued(TuningPool::Lane::kJobs));
  const std::optional<TaskInput> task = TaskInputOf(job_id);
  if (!task) return;
  const absl::StatusOr<PlanningInput> input = PlanningInputOf(*task);
  const auto stopping = [this] { return pool_->stopping(); };
  // After a node loss, a layout job also weighs keeping its surviving replicas against a new
  // layout (RunNodeLossPlanning); the chosen option may run on fewer GPUs than are left.
  std::optional<Cluster> runs_on;
  absl::StatusOr<proto::PlanResult> result =
      input.ok() ? absl::StatusOr<proto::PlanResult>(absl::UnknownError("not planned"))
                 : absl::StatusOr<proto::PlanResult>(input.status());
  if (input.ok() && input->choose_layout && task->current_layout &&
      (reason == ReplanReason::kNodeFailure || reason == ReplanReason::kDrain)) {
    NodeLossContext context;
    context.current = *task->current_layout;
    context.current_slots = task->current_slots;
    context.remaining_iterations = RemainingIterations(task->job);
    context.new_layout_min_gain = options_.replan.min_gain;
    absl::StatusOr<PlannedOn> planned =
        RunNodeLossPlanning(*input, task->factors, stopping, context);
    if (planned.ok()) {
      LogNodeLossOptions(job_id, planned->result);
      runs_on = std::move(planned->cluster);
      result = std::move(planned->result);
    } else {
      result = planned.status();
    }
  } else if (input.ok()) {
    result = planner::RunPlanning(*input, task->factors, stopping);
    runs_on = input->cluster;
  }
  if (result.status().code() == absl::StatusCode::kCancelled) {
    // Shutting down: the intent stays stored, and the next start resumes it.
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it != jobs_.end()) it->second.planning = false;
    return;
  }
  const bool accept =
      result.ok() && WorthAdopting(job_id, reason, *task, *input, *result);
  if (!FinishPlanning(job_id, reason, result, accept ? &*runs_on : nullptr)) return;
  if (accept && observer_) {
    observer_->OnPlanComputed(job_id, *result);
    if (reason != ReplanReason::kInitial) observer_->OnReplan(reason);
  }
}

bool JobManager::FinishPlanning(const std::string& job_id, ReplanReason reason,
                                const absl::StatusOr<proto::PlanResult>& result,
                                const Cluster* adopt_on) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return false;  // deleted meanwhile
  Entry& e = it->second;
  e.planning = false;
  // This run carried the stored intent; a re-plan asked for meanwhile sets it again below.
  e.job.pending_reason.reset();
  if (!result.ok()) {
    logging::Event(*logging::Logger("jobs"), spdlog::level::warn, "planning failed",
                   {{"job", job_id}, {"reason", reason},
                    {"error", std::string(result.status().message())}});
    e.job.state = JobState::kFailed;
    e.job.last_error = std::string(result.status().message());
  } else if (adopt_on != nullptr) {
    AddVersion(job_id, reason, *adopt_on, *result, &e);
  }
  PublishJobCounts();
  // Failed, adopted or not worth a switch: the intent is done.
  absl::Status s = store_->PutJob(e.job);
  (void)s;
  if (e.rerun_reason) {
    const ReplanReason next = *e.rerun_reason;
    e.rerun_reason.reset();
    SchedulePlanning(job_id, next, /*bounded=*/false);
    s = store_->PutJob(e.job);
  }
  return true;
}

void JobManager::AddVersion(const std::string& job_id, ReplanReason reason,
                            const Cluster& cluster, const proto::PlanResult& result, Entry* e) {
  proto::PlanVersion version;
  version.set_job_id(job_id);
  version.set_version(e->job.current_version + 1);
  *version.mutable_result() = result;
  version.set_reason_kind(ReplanReasonToProto(reason));
  version.set_created_unix_ms(UnixMillis());
  // One slot per rank: every rank of a layout, or the pipeline's devices.
  const std::optional<LayoutPlan> layout = LayoutOfVersion(version);
  FillDeviceSlots(cluster, layout ? layout->num_ranks : result.plan().num_devices(), &version);
  if (absl::Status stored = store_->PutPlanVersion(version); !stored.ok()) {
    e->job.last_error = std::string(stored.message());
    return;
  }
  e->versions.push_back(version);
  e->current_plan = PlanFromProto(version.result().plan());
  e->current_layout = layout;
  e->job.current_version = version.version();
  if (version.version() == 1) policy_.OnFirstPlan(job_id, clock_->NowSeconds());
  e->job.state = result.feasible() ? JobState::kReady : JobState::kInfeasible;
  e->job.last_error.clear();
  // Delivered under the lock (callbacks only queue), so watchers see versions in order even
  // when the next re-plan finishes on another worker right after this one.
  for (const auto& [id, sub] : subscriptions_) {
    if (sub.job_id == job_id) sub.on_version(version);
  }
}

absl::StatusOr<JobManager::TaskInput> JobManager::ReportTaskInput(
    const proto::ReportStageTimesRequest& request) const {
  std::optional<TaskInput> task = TaskInputOf(request.job_id());
  if (!task) return NoJob(request.job_id());
  if (task->current_version == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("job '", request.job_id(), "' has no plan yet"));
  }
  if (request.plan_version() != task->current_version) {
    return absl::FailedPreconditionError(absl::StrCat(
        "plan_version: ", request.plan_version(), " is not the job's current version (",
        task->current_version, "); fetch the current plan with WatchPlan"));
  }
  return *std::move(task);
}

absl::StatusOr<proto::ReportStageTimesResponse> JobManager::ReportStageTimes(
    const proto::ReportStageTimesRequest& request) {
  // One entry per (stage, op kind) at most, and an S and a T per device: bounded by the stage
  // and device limits.
  RETURN_IF_ERROR(CheckLimit("times", request.times_size(),
                             5 * options_.limits.max_layers + 2 * options_.limits.max_devices,
                             "5 x max_layers + 2 x max_devices"));
  RETURN_IF_ERROR(CheckLimit("device_times", request.device_times_size(),
                             options_.limits.max_devices, "max_devices"));
  ASSIGN_OR_RETURN(TaskInput task, ReportTaskInput(request));
  ASSIGN_OR_RETURN(MeasuredTimes measured, MeasuredTimesOf(request));
  RETURN_IF_ERROR(CheckProgress(request, task.job));
  ASSIGN_OR_RETURN(PlanningInput input, InputOf(task.job, options_.limits));
  ASSIGN_OR_RETURN(Plan plan, std::move(task.current_plan));
  ASSIGN_OR_RETURN(std::vector<DeviceBusy> device_busy,
                   DeviceBusyFromProto(request, plan.num_devices));
  ASSIGN_OR_RETURN(CalibrationUpdate update, FitReport(input, plan, task.factors, measured));
  ClampFactors(&update.factors);  // within the stated range, whatever the report said
  return ApplyReport(request, task.current_version, plan.num_devices, update, device_busy);
}

absl::StatusOr<proto::ReportStageTimesResponse> JobManager::ApplyReport(
    const proto::ReportStageTimesRequest& request, int64_t version, int num_devices,
    const CalibrationUpdate& update, const std::vector<DeviceBusy>& device_busy) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(request.job_id());
  if (it == jobs_.end()) return NoJob(request.job_id());
  // A version made while the factors were fitted (outside the lock) makes them stale.
  if (it->second.job.current_version != version) {
    return absl::FailedPreconditionError(absl::StrCat(
        "plan_version: ", request.plan_version(), " was replaced by version ",
        it->second.job.current_version, " while the report was processed; report again"));
  }
  RETURN_IF_ERROR(store_->PutCalibration(request.job_id(), update.factors));
  it->second.factors = update.factors;
  if (request.has_progress()) {  // checked (CheckProgress); kept with the job's next write
    const proto::JobProgress& p = request.progress();
    JobProgress& progress = it->second.job.progress;
    // Nodes report at their own pace, and only those holding a last stage report a loss: a
    // late report of an older iteration must not put its loss or throughput beside a newer
    // one's, and a loss is kept with the iteration it belongs to.
    if (p.iteration() >= progress.iteration) progress.tokens_per_s = p.tokens_per_s();
    progress.iteration = std::max(progress.iteration, p.iteration());
    if (p.has_loss() && p.iteration() >= progress.loss_iteration) {
      progress.has_loss = true;
      progress.loss = p.loss();
      progress.loss_iteration = p.iteration();
    }
    progress.updated_unix_ms = UnixMillis();
  }
  const bool replan = policy_.OnReport(request.job_id(), update.max_deviation,
                                       clock_->NowSeconds());
  if (replan) {
    SchedulePlanning(request.job_id(), ReplanReason::kMeasured, /*bounded=*/false);
    absl::Status s = store_->PutJob(it->second.job);
    (void)s;  // the calibration is stored; a lost intent only delays this re-plan
  }
  // One line per report at debug (agents report up to once a second per node); a re-plan, and
  // a summary of the reports at most once a minute, at info.
  logging::Event(*logging::Logger("replan"), replan ? spdlog::level::info : spdlog::level::debug,
                 "measured deviation",
                 {{"job", request.job_id()}, {"deviation", update.max_deviation},
                  {"worst_stage", update.worst_stage},
                  {"vocab_deviation", update.vocab_reported ? update.vocab_deviation : 0.0},
                  {"replan", replan}});
  ReportSummary& sum = report_summary_;
  ++sum.reports;
  sum.replans += replan ? 1 : 0;
  if (update.max_deviation >= sum.max_deviation) {
    sum.max_deviation = update.max_deviation;
    sum.worst_job = request.job_id();
  }
  constexpr double kReportSummaryInterval = 60;
  const double now = clock_->NowSeconds();
  if (sum.since_s < 0) sum.since_s = now;
  if (now - sum.since_s >= kReportSummaryInterval) {
    logging::Event(*logging::Logger("replan"), spdlog::level::info, "stage-time reports",
                   {{"reports", sum.reports}, {"seconds", now - sum.since_s},
                    {"replans", sum.replans}, {"largest_deviation", sum.max_deviation},
                    {"job_of_largest", sum.worst_job}});
    sum = ReportSummary{now};
  }
  if (observer_ && !device_busy.empty()) {
    observer_->OnDeviceBusy(request.job_id(), version, num_devices, device_busy);
  }
  proto::ReportStageTimesResponse out;
  out.set_replanned(replan);
  out.set_current_version(it->second.job.current_version);
  out.set_decision(absl::StrFormat(
      "largest deviation %.1f%% %s: %s", update.max_deviation * 100, WorstOf(update),
      replan ? "re-planning with the measured costs"
             : "no re-plan (within tolerance, or cooling down)"));
  return out;
}

std::vector<std::string> JobManager::NodeLost(const std::string& node_id,
                                              ReplanReason reason) {
  std::vector<std::string> out;
  absl::MutexLock lock(&mu_);
  for (auto& [id, e] : jobs_) {
    if (!e.job.HasNode(node_id) || e.job.Excludes(node_id)) continue;
    e.job.excluded_nodes.push_back(node_id);
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
    std::vector<std::string>& excluded = e.job.excluded_nodes;
    auto pos = std::find(excluded.begin(), excluded.end(), node_id);
    if (pos == excluded.end()) continue;
    excluded.erase(pos);
    SchedulePlanning(id, ReplanReason::kNodeJoin, /*bounded=*/false);
    absl::Status s = store_->PutJob(e.job);
    (void)s;
    out.push_back(id);
  }
  return out;
}

}  // namespace octopipe::planner
