// StoreWatcher (planner_service/store_watch.h) on a real SQLite store: a watch gets the stored
// versions after the one it names at once, newer ones as they are stored (each once, in
// order), ends when the job is deleted, and nothing after Unwatch; an unknown job is NOT_FOUND.
#include "planner_service/store_watch.h"

#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "planner_service/sqlite_store.h"
#include "planner_service/store_test_util.h"

namespace octopipe::planner {
namespace {

using ::octopipe::testing::MakeJob;
using ::octopipe::testing::MakeVersion;
using ::octopipe::testing::TestDir;

struct Seen {
  absl::Mutex mu;
  std::vector<int64_t> versions ABSL_GUARDED_BY(mu);
  bool ended ABSL_GUARDED_BY(mu) = false;

  // Waits (up to 20 s: the poll is every 10 ms here) until `n` versions arrived.
  bool AwaitVersions(size_t n) {
    absl::MutexLock lock(&mu);
    auto have = [this, n]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return versions.size() >= n; };
    return mu.AwaitWithTimeout(absl::Condition(&have), absl::Seconds(20));
  }
  bool AwaitEnd() {
    absl::MutexLock lock(&mu);
    auto done = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return ended; };
    return mu.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(20));
  }
};

TEST(StoreWatcherTest, StoredThenNewVersionsInOrderThenTheEnd) {
  absl::StatusOr<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(TestDir() + "/s.db");
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->PutJob(MakeJob("j", 1)).ok());
  for (int v = 1; v <= 3; ++v) ASSERT_TRUE((*store)->PutPlanVersion(MakeVersion("j", v)).ok());
  StoreWatcher watcher(store->get(), absl::Milliseconds(10));

  EXPECT_TRUE(absl::IsNotFound(watcher.Watch("nope", 0, nullptr, nullptr).status()));

  Seen seen;
  absl::StatusOr<int64_t> id = watcher.Watch(
      "j", 1,
      [&](const proto::PlanVersion& v) {
        absl::MutexLock lock(&seen.mu);
        seen.versions.push_back(v.version());
      },
      [&] {
        absl::MutexLock lock(&seen.mu);
        seen.ended = true;
      });
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(seen.AwaitVersions(2));  // 2 and 3: after the one named
  ASSERT_TRUE((*store)->PutPlanVersion(MakeVersion("j", 4)).ok());
  ASSERT_TRUE(seen.AwaitVersions(3));
  {
    absl::MutexLock lock(&seen.mu);
    EXPECT_EQ(seen.versions, (std::vector<int64_t>{2, 3, 4}));
    EXPECT_FALSE(seen.ended);
  }
  ASSERT_TRUE((*store)->DeleteJob("j").ok());
  EXPECT_TRUE(seen.AwaitEnd());

  // After Unwatch nothing arrives.
  ASSERT_TRUE((*store)->PutJob(MakeJob("k", 2)).ok());
  Seen other;
  absl::StatusOr<int64_t> k = watcher.Watch(
      "k", 0,
      [&](const proto::PlanVersion& v) {
        absl::MutexLock lock(&other.mu);
        other.versions.push_back(v.version());
      },
      nullptr);
  ASSERT_TRUE(k.ok());
  ASSERT_TRUE((*store)->PutPlanVersion(MakeVersion("k", 1)).ok());
  ASSERT_TRUE(other.AwaitVersions(1));
  watcher.Unwatch(*k);
  ASSERT_TRUE((*store)->PutPlanVersion(MakeVersion("k", 2)).ok());
  // Two more polls pass (a third watch's first version arriving proves the thread ran on).
  ASSERT_TRUE((*store)->PutJob(MakeJob("m", 3)).ok());
  ASSERT_TRUE((*store)->PutPlanVersion(MakeVersion("m", 1)).ok());
  Seen probe;
  ASSERT_TRUE(watcher
                  .Watch("m", 0,
                         [&](const proto::PlanVersion& v) {
                           absl::MutexLock lock(&probe.mu);
                           probe.versions.push_back(v.version());
                         },
                         nullptr)
                  .ok());
  ASSERT_TRUE(probe.AwaitVersions(1));
  absl::MutexLock lock(&other.mu);
  EXPECT_EQ(other.versions, (std::vector<int64_t>{1}));
}

}  // namespace
}  // namespace octopipe::planner
