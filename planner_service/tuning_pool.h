// TuningPool: the bounded worker pool that runs tuning off the RPC threads.
//
// Two lanes with separate bounded queues, so anonymous one-shot Plan calls can never starve
// jobs: kJobs (a job's first plan and its re-plans) and kOneShot (Plan RPCs). An idle worker
// always takes the oldest kJobs task before any kOneShot task. TrySubmit refuses work when
// `max_queued` tasks already wait in that lane (the service answers RESOURCE_EXHAUSTED);
// Submit always queues on kJobs (internal re-plans must not be dropped).
//
// Shutdown: stopping() turns true at once (running tasks poll it and end early: tuning is
// cancelled), queued tasks still run — each sees stopping() and finishes immediately, so every
// RPC gets its answer — and the workers are joined. Thread-safe.
#ifndef OCTOPIPE_PLANNER_SERVICE_TUNING_POOL_H_
#define OCTOPIPE_PLANNER_SERVICE_TUNING_POOL_H_

#include <atomic>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace octopipe::planner {

class TuningPool {
 public:
  enum class Lane { kJobs = 0, kOneShot = 1 };

  TuningPool(int threads, int max_queued);
  ~TuningPool();
  TuningPool(const TuningPool&) = delete;
  TuningPool& operator=(const TuningPool&) = delete;

  bool TrySubmit(std::function<void()> task, Lane lane = Lane::kJobs);
  void Submit(std::function<void()> task);
  // Begins shutdown without waiting: stopping() turns true (running tuning ends early),
  // nothing new is accepted, queued tasks still run and see stopping(). Idempotent.
  void Cancel();
  // Cancel(), then joins the workers.
  void Shutdown();

  // Tasks waiting (not running) in `lane`.
  int queued(Lane lane = Lane::kJobs) const;
  // Tasks running now (both lanes), and the number of worker threads.
  int running() const { return running_.load(std::memory_order_relaxed); }
  int threads() const { return num_threads_; }
  bool full(Lane lane) const { return queued(lane) >= max_queued_; }
  int max_queued() const { return max_queued_; }
  // True once Shutdown has begun; running tasks should stop working.
  bool stopping() const { return stopping_flag_.load(std::memory_order_relaxed); }

 private:
  void Work();

  const int max_queued_;
  const int num_threads_;
  std::atomic<int> running_{0};
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> queues_[2] ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> stopping_flag_{false};
  std::vector<std::thread> threads_;
};

}  // namespace octopipe::planner

#endif  // OCTOPIPE_PLANNER_SERVICE_TUNING_POOL_H_
