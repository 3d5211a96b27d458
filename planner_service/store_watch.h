// StoreWatcher: a job's plan versions as a follower replica sees them — read from the store,
// where the leader writes every version before it announces it. Each watch first gets the
// stored versions after the one it names, then every newer one as it appears: one thread polls
// the store every `period` for the jobs being watched. When the job is no longer stored (it
// was deleted), the watch ends (on_end) and is dropped.
//
// The callbacks run on the polling thread (in order: one thread delivers every version), never
// with the watcher's lock held. Thread-safe.
#ifndef OCTOPIPE_PLANNER_SERVICE_STORE_WATCH_H_
#define OCTOPIPE_PLANNER_SERVICE_STORE_WATCH_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "planner_service/store.h"
#include "proto/planner.pb.h"

namespace octopipe::planner {

class StoreWatcher {
 public:
  using OnVersion = std::function<void(const proto::PlanVersion&)>;
  using OnEnd = std::function<void()>;

  StoreWatcher(Store* store, absl::Duration period);
  ~StoreWatcher();  // stops and joins the polling thread
  StoreWatcher(const StoreWatcher&) = delete;
  StoreWatcher& operator=(const StoreWatcher&) = delete;

  // Calls on_version with each stored version newer than `after_version`, now and as they are
  // stored. kNotFound naming the job when it is not stored; the store's errors as they are.
  absl::StatusOr<int64_t> Watch(const std::string& job_id, int64_t after_version,
                                OnVersion on_version, OnEnd on_end);
  // Stops a watch (no callback of it starts afterwards). Unknown ids are ignored.
  void Unwatch(int64_t id);

 private:
  struct Entry {
    std::string job_id;
    int64_t last_version = 0;
    OnVersion on_version;
    OnEnd on_end;
  };
  // New versions of `entry` (and whether its job is gone), read from the store.
  void Poll(int64_t id, Entry entry);
  void Loop();

  Store* const store_;
  const absl::Duration period_;
  absl::Mutex mu_;
  std::map<int64_t, Entry> watches_ ABSL_GUARDED_BY(mu_);
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;  // a new watch: poll now
  std::thread thread_;
};

}  // namespace octopipe::planner

#endif  // OCTOPIPE_PLANNER_SERVICE_STORE_WATCH_H_
