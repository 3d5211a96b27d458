// Admission control for one-shot Plan calls: under load the time budget degrades instead of
// the queue growing without bound, and a call is refused only when even the degraded budget
// cannot be met.
//
// A call's deadline is its arrival plus its time budget (queue wait counts), or the client's
// gRPC deadline when that is earlier (less a 5% margin for the answer to travel back).
//   Admit: refused (RESOURCE_EXHAUSTED) when the estimated queue wait — tasks ahead (queued and
//     running, both lanes) x the recent typical task time (at least this call's minimum
//     budget) / workers — leaves less than the minimum budget before the deadline.
//   StartBudget: when the task starts, its tuning budget is the requested one scaled by the
//     load, requested x workers / (workers + tasks still queued), never below the minimum
//     budget, and never past the deadline. Zero or less: the deadline passed while queued.
// The minimum budget is `min_budget_fraction` of the requested one, at least `min_budget_s`.
// Pure functions plus a thread-safe estimate of the typical task time.
#ifndef OCTOPIPE_PLANNER_SERVICE_ADMISSION_H_
#define OCTOPIPE_PLANNER_SERVICE_ADMISSION_H_

#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace octopipe::planner {

struct AdmissionOptions {
  double min_budget_fraction = 0.1;  // degrade a budget at most 10x
  double min_budget_s = 0.02;
  double deadline_margin = 0.05;  // of the client's remaining time, kept for the answer
};

// The absolute deadline (same clock as `now_s`) of a call that arrived at `now_s` asking for
// `budget_s`; `client_remaining_s` is the time to the client's gRPC deadline (infinity: none).
double CallDeadline(double now_s, double budget_s, double client_remaining_s,
                    const AdmissionOptions& options);

double MinBudget(double budget_s, const AdmissionOptions& options);

struct LoadSnapshot {
  int tasks_ahead = 0;  // queued and running tuning tasks, both lanes
  int queued = 0;       // waiting (not running) tasks, both lanes
  int workers = 1;
  double typical_task_s = 0;  // recent wall time of one tuning task (0: unknown yet)
};

// OK, or RESOURCE_EXHAUSTED naming the load, the estimated wait and the deadline.
absl::Status Admit(double now_s, double deadline_s, double budget_s, const LoadSnapshot& load,
                   const AdmissionOptions& options);

// The tuning budget for a task starting at `now_s` (see above).
double StartBudget(double now_s, double deadline_s, double budget_s, const LoadSnapshot& load,
                   const AdmissionOptions& options);

// Exponentially weighted mean of recent task wall times. Thread-safe.
class TaskTimeEstimate {
 public:
  void Add(double seconds);
  double Get() const;

 private:
  mutable absl::Mutex mu_;
  double mean_ ABSL_GUARDED_BY(mu_) = 0;
  bool any_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace octopipe::planner

#endif  // OCTOPIPE_PLANNER_SERVICE_ADMISSION_H_
