#include "planner_service/store_watch.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace octopipe::planner {

StoreWatcher::StoreWatcher(Store* store, absl::Duration period)
    : store_(store), period_(period), thread_([this] { Loop(); }) {}

StoreWatcher::~StoreWatcher() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

absl::StatusOr<int64_t> StoreWatcher::Watch(const std::string& job_id, int64_t after_version,
                                            OnVersion on_version, OnEnd on_end) {
  absl::StatusOr<JobRecord> job = store_->LoadJob(job_id);
  if (!job.ok()) return job.status();
  absl::MutexLock lock(&mu_);
  const int64_t id = next_id_++;
  watches_[id] = Entry{job_id, after_version, std::move(on_version), std::move(on_end)};
  wake_ = true;  // what is stored already, at once (and from the one thread: in order)
  return id;
}

void StoreWatcher::Unwatch(int64_t id) {
  absl::MutexLock lock(&mu_);
  watches_.erase(id);
}

void StoreWatcher::Poll(int64_t id, Entry entry) {
  absl::StatusOr<JobRecord> job = store_->LoadJob(entry.job_id);
  if (absl::IsNotFound(job.status())) {
    {
      absl::MutexLock lock(&mu_);
      if (watches_.erase(id) == 0) return;  // unwatched meanwhile
    }
    if (entry.on_end) entry.on_end();
    return;
  }
  if (!job.ok()) return;  // the store is unreachable now: the next pass tries again
  absl::StatusOr<std::vector<proto::PlanVersion>> versions = store_->LoadPlanVersions(entry.job_id);
  if (!versions.ok()) return;
  int64_t last = entry.last_version;
  for (const proto::PlanVersion& v : *versions) {
    if (v.version() <= last) continue;
    {
      absl::MutexLock lock(&mu_);
      auto it = watches_.find(id);
      if (it == watches_.end()) return;  // unwatched meanwhile
      it->second.last_version = v.version();
    }
    last = v.version();
    entry.on_version(v);
  }
}

void StoreWatcher::Loop() {
  for (;;) {
    std::map<int64_t, Entry> watches;
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(
                               +[](StoreWatcher* w) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                                 return w->stopping_ || w->wake_;
                               },
                               this),
                           period_);
      if (stopping_) return;
      wake_ = false;
      watches = watches_;
    }
    for (auto& [id, entry] : watches) Poll(id, std::move(entry));
  }
}

}  // namespace octopipe::planner
