#include "planner_service/tuning_pool.h"

#include <algorithm>

namespace octopipe::planner {

TuningPool::TuningPool(int threads, int max_queued) : max_queued_(std::max(0, max_queued)) {
  for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { Work(); });
}

TuningPool::~TuningPool() { Shutdown(); }

bool TuningPool::TrySubmit(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  if (stopping_ || static_cast<int>(queue_.size()) >= max_queued_) return false;
  queue_.push_back(std::move(task));
  return true;
}

void TuningPool::Submit(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  queue_.push_back(std::move(task));
}

void TuningPool::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

int TuningPool::queued() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(queue_.size());
}

void TuningPool::Work() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](TuningPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
            return p->stopping_ || !p->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace octopipe::planner
