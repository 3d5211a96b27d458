#include "planner_service/tuning_pool.h"

#include <algorithm>

namespace octopipe::planner {

TuningPool::TuningPool(int threads, int max_queued)
    : max_queued_(std::max(0, max_queued)), num_threads_(std::max(1, threads)) {
  for (int i = 0; i < num_threads_; ++i) threads_.emplace_back([this] { Work(); });
}

TuningPool::~TuningPool() { Shutdown(); }

bool TuningPool::TrySubmit(std::function<void()> task, Lane lane) {
  absl::MutexLock lock(&mu_);
  auto& queue = queues_[static_cast<int>(lane)];
  if (stopping_ || static_cast<int>(queue.size()) >= max_queued_) return false;
  queue.push_back(std::move(task));
  return true;
}

void TuningPool::Submit(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  queues_[static_cast<int>(Lane::kJobs)].push_back(std::move(task));
}

void TuningPool::Cancel() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
  stopping_flag_.store(true, std::memory_order_relaxed);
}

void TuningPool::Shutdown() {
  Cancel();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

int TuningPool::queued(Lane lane) const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(queues_[static_cast<int>(lane)].size());
}

void TuningPool::Work() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](TuningPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
            return p->stopping_ || !p->queues_[0].empty() || !p->queues_[1].empty();
          },
          this));
      // Jobs first: a job's re-plan never waits behind one-shot calls that are queued.
      auto& queue = !queues_[0].empty() ? queues_[0] : queues_[1];
      if (queue.empty()) return;  // stopping and drained
      task = std::move(queue.front());
      queue.pop_front();
      running_.fetch_add(1, std::memory_order_relaxed);
    }
    task();
    running_.fetch_sub(1, std::memory_order_relaxed);
  }
}

}  // namespace octopipe::planner
