// JobManager: the planner's jobs — their plan versions, calibration, re-planning and
// persistence — as a plain class the gRPC adapter calls (tested without a server).
//
// Every job is persisted before a call returns (Store, SQLite) so a restart serves the same
// jobs and versions. Planning runs on the TuningPool: the first plan of a job on create, then
// re-plans when measured stage times deviate (ReplanPolicy decides; a new version only if it is
// predicted at least min_gain faster under the calibrated costs), when a node fails or is
// drained (the job continues on the devices left), and when a node comes back. Versions are
// pushed to watchers under the manager's lock, in version order: watch callbacks must only
// queue (never block or call back into the manager).
//
// The jobs themselves are domain records (JobRecord, job_state.h); the gRPC adapter converts
// requests and answers (job_convert.h) and the store converts what it persists. Plan versions
// and stage-time reports still travel in their wire form (proto::PlanVersion,
// ReportStageTimesRequest/Response): a version is the tuner's answer as the planner stores and
// streams it, and the report is parsed into calibration's types here.
//
// Thread-safe. The pool must be shut down before the manager is destroyed (tasks hold `this`).
#ifndef OCTOPIPE_PLANNER_SERVICE_JOB_MANAGER_H_
#define OCTOPIPE_PLANNER_SERVICE_JOB_MANAGER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/layout_plan.h"
#include "core/clock.h"
#include "core/plan.h"
#include "core/replan_reason.h"
#include "calibration/layer_calibration.h"
#include "planner_service/job_state.h"
#include "planner_service/measured_bubble.h"
#include "planner_service/planning.h"
#include "planner_service/replan_policy.h"
#include "planner_service/store.h"
#include "planner_service/tuning_pool.h"
#include "proto/planner.pb.h"

namespace octopipe::planner {

// What the manager tells the outside world (metrics); every method has a no-op default.
class JobObserver {
 public:
  virtual ~JobObserver() = default;
  virtual void OnPlanComputed(const std::string& job_id, const proto::PlanResult& result) {}
  virtual void OnReplan(ReplanReason reason) {}
  virtual void OnJobRemoved(const std::string& job_id) {}
  virtual void OnJobCount(int jobs) {}
  // Jobs by phase name (JobPhaseName: planning, pending, running, completed, failed; every one
  // present), when a job is created, removed, planned or gets an event.
  virtual void OnJobPhases(const std::map<std::string, int>& jobs_by_phase) {}
  // Tasks waiting in the pool's jobs lane (lane is "jobs"), when a job's planning is queued or
  // starts. Same signature as RpcObserver::OnQueueDepth, so one override serves both.
  virtual void OnQueueDepth(const std::string& lane, int depth) {}
  // A valid report's per-device busy times (ReportStageTimesRequest.device_times, not empty)
  // for `version` of the job, whose plan has `num_devices` devices.
  virtual void OnDeviceBusy(const std::string& job_id, int64_t version, int num_devices,
                            const std::vector<DeviceBusy>& devices) {}
};

// A job and its current plan version (absent before the first plan), as Get returns them.
struct JobSnapshot {
  JobRecord job;
  std::optional<proto::PlanVersion> current;
};

struct JobManagerOptions {
  PlanningLimits limits;
  ReplanPolicyOptions replan;
};

class JobManager {
 public:
  JobManager(Store* store, TuningPool* pool, const Clock* clock, JobManagerOptions options,
             JobObserver* observer = nullptr);

  // Loads jobs, versions and calibration from the store. A stored re-plan intent
  // (JobRecord::pending_reason) is resumed and a job without a plan is planned; a job whose
  // stored input no longer validates is marked FAILED with the reason (never planned).
  absl::Status Recover();

  // Validates, persists and queues the first plan. kResourceExhausted when the pool's queue is
  // full (nothing is created), kInvalidArgument naming the field.
  absl::StatusOr<JobRecord> Create(NewJob job);
  // The job and its current version (none before the first plan). kNotFound for an unknown job.
  absl::StatusOr<JobSnapshot> Get(const std::string& job_id) const;
  // Every job, full, oldest first (created_unix_ms, then id).
  std::vector<JobRecord> List() const;
  // Whether any job's cluster has this node.
  bool KnowsNode(const std::string& node_id) const;

  absl::Status Delete(const std::string& job_id);

  // Calls `on_version` for every version newer than `after_version` (the current one first
  // when after_version is 0), now and as they are made; `on_end` when the job is deleted;
  // `on_event` (if set) for every job event added from now on (AddEvent), in order with the
  // versions. Callbacks run under the manager's lock: they must only queue.
  // Returns a subscription id for Unwatch. kNotFound for an unknown job.
  absl::StatusOr<int64_t> Watch(const std::string& job_id, int64_t after_version,
                                std::function<void(const proto::PlanVersion&)> on_version,
                                std::function<void()> on_end,
                                std::function<void(const JobEvent&)> on_event = nullptr);
  // After Unwatch no new call starts, but one already running may still be in progress: the
  // callbacks must not own state the caller frees (the gRPC reactor shares its state with
  // them through a shared_ptr and an alive flag).
  void Unwatch(int64_t subscription);

  absl::StatusOr<proto::ReportStageTimesResponse> ReportStageTimes(
      const proto::ReportStageTimesRequest& request);

  // A node failed / was drained / came back: the affected jobs are re-planned. Returns them.
  std::vector<std::string> NodeLost(const std::string& node_id, ReplanReason reason);
  std::vector<std::string> NodeJoined(const std::string& node_id);

  // Appends an agent's event to the job (time-stamped, persisted; the newest 200 are kept).
  // kNotFound for an unknown job.
  absl::Status AddEvent(const std::string& job_id, JobEvent event);

  int num_jobs() const;

 private:
  // Everything the manager holds about one job.
  struct Entry {
    JobRecord job;  // what is persisted as the job (Store::PutJob)
    std::vector<proto::PlanVersion> versions;  // as stored and streamed, oldest first
    // The current version's plan in core form (converted once, when the version is adopted or
    // loaded); an error when there is no version yet or its plan does not convert.
    absl::StatusOr<Plan> current_plan = absl::FailedPreconditionError("no plan yet");
    // The current version's whole layout when it was planned as one (every pipeline and
    // replica); nullopt for a single-pipeline version.
    std::optional<LayoutPlan> current_layout;
    std::vector<double> factors;  // calibration, one per layer (empty: none yet)
    bool planning = false;        // a task is queued or running
    // Another re-plan asked for while planning: runs once more after the task (not persisted;
    // the stored intent is job.pending_reason).
    std::optional<ReplanReason> rerun_reason;
  };
  struct Subscription {
    std::string job_id;
    std::function<void(const proto::PlanVersion&)> on_version;
    std::function<void()> on_end;
    std::function<void(const JobEvent&)> on_event;  // may be empty
  };

  // What a planning task or a stage-time report reads of its job, copied under the lock.
  struct TaskInput {
    JobRecord job;
    std::vector<double> factors;
    int64_t current_version = 0;  // 0: no plan yet
    absl::StatusOr<Plan> current_plan;
    std::optional<LayoutPlan> current_layout;
    std::vector<GpuSlot> current_slots;  // the current version's device slots
  };

  // Queues planning for the job (coalescing with a running task). `bounded` uses TrySubmit.
  bool SchedulePlanning(const std::string& job_id, ReplanReason reason, bool bounded)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A planning task, on the pool: tune, decide, record the outcome, tell the observer.
  void RunPlanning(const std::string& job_id, ReplanReason reason) ABSL_LOCKS_EXCLUDED(mu_);
  // nullopt for a job that is gone.
  std::optional<TaskInput> TaskInputOf(const std::string& job_id) const ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<PlanningInput> PlanningInputOf(const TaskInput& task) const;
  // Whether a finished plan becomes a version: always, except a re-plan for measured times
  // whose plan is not predicted min_gain faster than the current one under the same calibrated
  // costs (ReplanPolicy::Accept; logged). A current plan that no longer applies is replaced.
  bool WorthAdopting(const std::string& job_id, ReplanReason reason, const TaskInput& task,
                     const PlanningInput& input, const proto::PlanResult& result);
  // Records a task's outcome on the job and persists it: FAILED with the error, a new version
  // when `adopt_on` (the cluster it was planned on) is given, else nothing but the intent done;
  // then queues the re-plan asked for meanwhile. False when the job was deleted meanwhile.
  bool FinishPlanning(const std::string& job_id, ReplanReason reason,
                      const absl::StatusOr<proto::PlanResult>& result, const Cluster* adopt_on)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Stores `result` as the job's next version and pushes it to the job's watchers; when the
  // store refuses it, only the job's last_error changes.
  void AddVersion(const std::string& job_id, ReplanReason reason, const Cluster& cluster,
                  const proto::PlanResult& result, Entry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job a report is for: kNotFound, or kFailedPrecondition without a plan or for a version
  // that is not the current one.
  absl::StatusOr<TaskInput> ReportTaskInput(const proto::ReportStageTimesRequest& request) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Stores the fitted factors (unless the version changed meanwhile), lets the policy decide
  // about a re-plan, and answers.
  absl::StatusOr<proto::ReportStageTimesResponse> ApplyReport(
      const proto::ReportStageTimesRequest& request, int64_t version, int num_devices,
      const CalibrationUpdate& update, const std::vector<DeviceBusy>& device_busy)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::string> NewJobId() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The observer's job count and jobs by phase, as they are now.
  void PublishJobCounts() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Store* const store_;
  TuningPool* const pool_;
  const Clock* const clock_;
  const JobManagerOptions options_;
  JobObserver* const observer_;
  ReplanPolicy policy_;

  mutable absl::Mutex mu_;
  std::map<std::string, Entry> jobs_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, Subscription> subscriptions_ ABSL_GUARDED_BY(mu_);
  int64_t next_subscription_ ABSL_GUARDED_BY(mu_) = 1;
  // Stage-time reports since the last info summary (each report logs at debug level; a summary
  // at info at most once per kReportSummaryInterval of clock_).
  struct ReportSummary {
    double since_s = -1;  // clock_ seconds of the last summary; < 0: none yet
    int reports = 0;
    int replans = 0;
    double max_deviation = 0;
    std::string worst_job;
  };
  ReportSummary report_summary_ ABSL_GUARDED_BY(mu_);
};

}  // namespace octopipe::planner

#endif  // OCTOPIPE_PLANNER_SERVICE_JOB_MANAGER_H_
