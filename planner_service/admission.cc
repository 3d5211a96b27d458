#include "planner_service/admission.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace octopipe::planner {

double CallDeadline(double now_s, double budget_s, double client_remaining_s,
                    const AdmissionOptions& options) {
  double d = now_s + budget_s;
  if (std::isfinite(client_remaining_s)) {
    d = std::min(d, now_s + client_remaining_s * (1 - options.deadline_margin));
  }
  return d;
}

double MinBudget(double budget_s, const AdmissionOptions& options) {
  return std::min(budget_s, std::max(options.min_budget_s, options.min_budget_fraction * budget_s));
}

absl::Status Admit(double now_s, double deadline_s, double budget_s, const LoadSnapshot& load,
                   const AdmissionOptions& options) {
  const int workers = std::max(1, load.workers);
  // Tasks beyond the free workers wait; each takes about the typical time, and at least a
  // minimum budget (before any task has finished the typical time is unknown).
  const double min_budget = MinBudget(budget_s, options);
  const double per_task = std::max(load.typical_task_s, min_budget);
  const int waiting_for = std::max(0, load.tasks_ahead - workers + 1);
  const double wait_s = waiting_for * per_task / workers;
  if (now_s + wait_s + min_budget <= deadline_s) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrFormat(
      "the planner is loaded: %d tuning tasks ahead on %d workers (about %.2f s each), an "
      "estimated wait of %.2f s leaves less than the minimum budget of %.3f s before this "
      "call's deadline in %.2f s (its time budget or gRPC deadline); retry later or allow more "
      "time",
      load.tasks_ahead, workers, per_task, wait_s, min_budget, deadline_s - now_s));
}

double StartBudget(double now_s, double deadline_s, double budget_s, const LoadSnapshot& load,
                   const AdmissionOptions& options) {
  const int workers = std::max(1, load.workers);
  const double share = budget_s * workers / (workers + std::max(0, load.queued));
  return std::min(std::max(share, MinBudget(budget_s, options)), deadline_s - now_s);
}

void TaskTimeEstimate::Add(double seconds) {
  absl::MutexLock lock(&mu_);
  mean_ = any_ ? 0.8 * mean_ + 0.2 * seconds : seconds;
  any_ = true;
}

double TaskTimeEstimate::Get() const {
  absl::MutexLock lock(&mu_);
  return mean_;
}

}  // namespace octopipe::planner
