#include "planner_service/replan_policy.h"

namespace octopipe::planner {

bool ReplanPolicy::OnReport(const std::string& job_id, double deviation, double now_s) {
  absl::MutexLock lock(&mu_);
  State& s = jobs_[job_id];
  if (!s.started) {
    s.started = true;
    s.last_replan_s = now_s;
  }
  if (deviation <= options_.stop_deviation) {
    s.deviating = false;
    return false;
  }
  if (!s.deviating && deviation < options_.start_deviation) return false;
  s.deviating = true;
  if (now_s - s.last_replan_s < options_.cooldown_s) return false;
  s.last_replan_s = now_s;
  return true;
}

void ReplanPolicy::OnFirstPlan(const std::string& job_id, double now_s) {
  absl::MutexLock lock(&mu_);
  State& s = jobs_[job_id];
  s.started = true;
  s.last_replan_s = now_s;
}

bool ReplanPolicy::Accept(double current_s, double candidate_s) const {
  return candidate_s <= current_s * (1 - options_.min_gain);
}

void ReplanPolicy::Forget(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  jobs_.erase(job_id);
}

}  // namespace octopipe::planner
