// TuningPool: the bounded worker pool that runs tuning off the RPC threads.
//
// TrySubmit refuses work when `max_queued` tasks already wait (the service answers
// RESOURCE_EXHAUSTED); Submit always queues (internal re-plans must not be dropped). Shutdown
// stops accepting, lets queued tasks finish and joins the workers. Thread-safe.
#ifndef OCTOPIPE_PLANNER_SERVICE_TUNING_POOL_H_
#define OCTOPIPE_PLANNER_SERVICE_TUNING_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace octopipe::planner {

class TuningPool {
 public:
  TuningPool(int threads, int max_queued);
  ~TuningPool();
  TuningPool(const TuningPool&) = delete;
  TuningPool& operator=(const TuningPool&) = delete;

  bool TrySubmit(std::function<void()> task);
  void Submit(std::function<void()> task);
  void Shutdown();

  int queued() const;
  int max_queued() const { return max_queued_; }

 private:
  void Work();

  const int max_queued_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace octopipe::planner

#endif  // OCTOPIPE_PLANNER_SERVICE_TUNING_POOL_H_
