// OneShotPlanner: the policy of one-shot Plan calls, apart from gRPC — the service's Plan
// handler authorizes, prepares the input and hands the call here; this class decides how it is
// answered and answers it exactly once through a callback.
//
// Contract (documented for clients in proto/planner.proto and the README):
//  - A call's deadline is its arrival plus its time budget, or the client's deadline when
//    nearer (admission.h CallDeadline) — time waiting in the queue counts.
//  - Cache: an identical earlier request's answer (PlanCacheKey) serves when it was tuned with at
//    least 95% of the budget this call would get now (answered with from_cache).
//  - Coalescing: identical calls in flight share one tuning task; the others are answered with
//    its result (from_cache) or its error. When the leading call is cancelled by its client,
//    the ones that joined it are answered UNAVAILABLE (retry).
//  - Admission: under load the tuning budget degrades with the queue (the answer's
//    tuning_budget_s); RESOURCE_EXHAUSTED when even the minimum budget cannot be met before the
//    deadline, or when the pool's one-shot queue is full; UNAVAILABLE while shutting down.
//  - Expiry: a call still queued at its deadline is answered DEADLINE_EXCEEDED then, and its
//    task is skipped when a worker reaches it (QueueExpiry).
//
// Thread-safe. `done` runs on the calling thread (cache hits, refusals), a pool worker (tuned
// or joined answers) or the expiry thread, never under this class's locks.
#ifndef OCTOPIPE_PLANNER_SERVICE_ONE_SHOT_H_
#define OCTOPIPE_PLANNER_SERVICE_ONE_SHOT_H_

#include <functional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/clock.h"
#include "planner_service/admission.h"
#include "planner_service/plan_cache.h"
#include "planner_service/planning.h"
#include "planner_service/queue_expiry.h"
#include "planner_service/tuning_pool.h"
#include "proto/planner.pb.h"

namespace octopipe::planner {

struct OneShotOptions {
  AdmissionOptions admission;
  // Answers to identical requests (plan_cache.h); 0 entries: no cache.
  int cache_entries = 256;
  int64_t cache_bytes = 64 << 20;
  // Tests on a FakeClock: no expiry thread; call PollExpiry() after advancing the clock.
  bool expiry_thread = true;
};

// How a call was answered. `result`, `from_cache` and `tuning_budget_s` only when status is OK
// (tuning_budget_s: the budget the answer was tuned with; 0 for a cache hit).
struct OneShotAnswer {
  absl::Status status;
  proto::PlanResult result;
  bool from_cache = false;
  double tuning_budget_s = 0;
};

// Metrics and health hooks; each may be empty.
struct OneShotHooks {
  std::function<void(bool hit)> on_cache_lookup;
  std::function<void(const proto::PlanResult&)> on_tuned;  // a result tuned for a call
  std::function<void()> on_queue_change;                    // a task queued or started
};

class OneShotPlanner {
 public:
  // `pool` and `clock` are not owned and outlive this.
  OneShotPlanner(TuningPool* pool, const Clock* clock, OneShotOptions options,
                 OneShotHooks hooks = {});
  OneShotPlanner(const OneShotPlanner&) = delete;
  OneShotPlanner& operator=(const OneShotPlanner&) = delete;

  // Answers the call with `key` (identical requests have equal keys) and prepared `input`
  // through `done`, exactly once. `arrival_s` on the clock; `client_remaining_s`: seconds to
  // the client's own deadline (infinity: none); `cancelled` is polled while tuning (the
  // client went away).
  void Plan(const PlanCacheKey& key, PlanningInput input, double arrival_s,
            double client_remaining_s, std::function<bool()> cancelled,
            std::function<void(OneShotAnswer)> done);

  // The queue and recent task times, as admission sees them.
  LoadSnapshot Load() const;
  // Without the expiry thread: answers the queued calls whose deadline has passed.
  int PollExpiry() { return expiry_.Poll(); }

 private:
  using Done = std::function<void(OneShotAnswer)>;
  // True when the call joined a task in flight for `key`; else it leads (and must Finish).
  bool JoinInFlight(const PlanCacheKey& key, const Done& done);
  // Answers every call that joined `key` (with `result` when given, else `status`) and forgets
  // the key.
  void FinishJoined(const PlanCacheKey& key, const absl::Status& status,
                    const proto::PlanResult* result, double tuning_budget_s);
  // A refusal: the joined calls and then the leading one get `status`.
  void Refuse(const PlanCacheKey& key, const absl::Status& status, const Done& done);
  // Runs one admitted call on a worker and answers it.
  void Run(const PlanningInput& input, const PlanCacheKey& key, double deadline_s,
           const std::function<bool()>& should_stop, const Done& done);

  TuningPool* const pool_;
  const Clock* const clock_;
  const OneShotOptions options_;
  const OneShotHooks hooks_;
  PlanCache cache_;
  TaskTimeEstimate task_time_;  // wall time of recent tuning tasks
  absl::Mutex mu_;
  absl::flat_hash_map<PlanCacheKey, std::vector<Done>> in_flight_ ABSL_GUARDED_BY(mu_);
  // Answers queued calls at their deadline. Last: destroyed (its thread joined) first.
  QueueExpiry expiry_;
};

}  // namespace octopipe::planner

#endif  // OCTOPIPE_PLANNER_SERVICE_ONE_SHOT_H_
