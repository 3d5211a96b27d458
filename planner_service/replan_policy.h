// ReplanPolicy: decides when measured deviations justify re-planning a job, without flapping.
//
// Hysteresis: a job starts "deviating" when a report's largest stage deviation reaches
// `start_deviation`, and only stops when a report falls to `stop_deviation` or below; a
// re-plan is considered on entering the deviating state, at most once per `cooldown_s`, and
// not before `cooldown_s` after the job's first plan (OnFirstPlan; for a job whose first plan
// this policy did not see, e.g. after a planner restart, after its first report here). Times
// are a monotonic clock's seconds from any origin. A computed plan replaces the current one
// only if it is predicted at least `min_gain` faster than the current plan under the same
// calibrated costs. Thread-safe.
#ifndef OCTOPIPE_PLANNER_SERVICE_REPLAN_POLICY_H_
#define OCTOPIPE_PLANNER_SERVICE_REPLAN_POLICY_H_

#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace octopipe::planner {

struct ReplanPolicyOptions {
  double start_deviation = 0.10;  // |measured / predicted - 1| that starts a re-plan
  double stop_deviation = 0.05;   // at or below this a job is back to normal
  double min_gain = 0.05;         // new plan must be predicted >= 5% faster
  double cooldown_s = 30;         // between re-plans of one job (measured-time re-plans)
};

class ReplanPolicy {
 public:
  explicit ReplanPolicy(ReplanPolicyOptions options) : options_(options) {}

  // A report with this largest deviation arrived at `now_s`: should a re-plan be computed?
  bool OnReport(const std::string& job_id, double deviation, double now_s);
  // The job's first plan was published at `now_s`: its cool-down starts here.
  void OnFirstPlan(const std::string& job_id, double now_s);
  // Whether a computed plan (predicted `candidate_s`) should replace one predicted `current_s`
  // under the same costs.
  bool Accept(double current_s, double candidate_s) const;
  void Forget(const std::string& job_id);

  const ReplanPolicyOptions& options() const { return options_; }

 private:
  struct State {
    bool deviating = false;
    bool started = false;      // last_replan_s holds the first plan's (or report's) time
    double last_replan_s = 0;  // the last re-plan, or the first plan
  };
  const ReplanPolicyOptions options_;
  absl::Mutex mu_;
  std::map<std::string, State> jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace octopipe::planner

#endif  // OCTOPIPE_PLANNER_SERVICE_REPLAN_POLICY_H_
