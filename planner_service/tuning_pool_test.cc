// Pins TuningPool: the bound on waiting tasks (TrySubmit), unbounded internal submission
// (Submit), draining on Shutdown, and real parallelism across the worker threads.
//
// Workers are held busy by tasks that wait on an absl::Notification the test releases, and
// the test waits for them to start on a counter guarded by a mutex: no sleeps. Waits carry a
// generous timeout only so that a broken pool fails the test instead of hanging it.
#include "planner_service/tuning_pool.h"

#include <algorithm>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace octopipe::planner {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(30);

// Counts events; a test waits until the count reaches a value.
class Counter {
 public:
  void Increment() {
    absl::MutexLock lock(&mu_);
    ++n_;
  }
  // True when the count reached `n` within the timeout.
  bool AwaitAtLeast(int n) {
    absl::MutexLock lock(&mu_);
    auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return n_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), kTimeout);
  }
  int value() const {
    absl::MutexLock lock(&mu_);
    return n_;
  }

 private:
  mutable absl::Mutex mu_;
  int n_ ABSL_GUARDED_BY(mu_) = 0;
};

// Notifies `release` when it goes out of scope unless the test already did, so a failed
// assertion cannot leave workers blocked for the pool's destructor (which joins them). Declare
// it after the pool, and the pool after what its tasks use.
class ReleaseOnExit {
 public:
  explicit ReleaseOnExit(absl::Notification& release) : release_(release) {}
  ~ReleaseOnExit() {
    if (!release_.HasBeenNotified()) release_.Notify();
  }

 private:
  absl::Notification& release_;
};

// Occupies `threads` workers of `pool` until `release` is notified; returns once every one of
// them is running its blocking task (so the queue is empty).
void BlockWorkers(TuningPool& pool, int threads, absl::Notification& release, Counter& started) {
  for (int i = 0; i < threads; ++i) {
    pool.Submit([&release, &started] {
      started.Increment();
      release.WaitForNotification();
    });
  }
  ASSERT_TRUE(started.AwaitAtLeast(threads)) << "workers never picked up the blocking tasks";
  ASSERT_EQ(pool.queued(), 0);
}

TEST(TuningPoolTest, TrySubmitRefusesBeyondMaxQueuedWhileWorkersAreBusy) {
  absl::Notification release;
  Counter started, ran;
  bool refused_ran = false;
  TuningPool pool(/*threads=*/2, /*max_queued=*/3);
  ReleaseOnExit guard(release);
  EXPECT_EQ(pool.max_queued(), 3);
  BlockWorkers(pool, 2, release, started);

  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(pool.TrySubmit([&ran] { ran.Increment(); })) << "task " << i;
  }
  EXPECT_EQ(pool.queued(), 3);
  EXPECT_FALSE(pool.TrySubmit([&refused_ran] { refused_ran = true; }));
  EXPECT_EQ(pool.queued(), 3);

  release.Notify();
  ASSERT_TRUE(ran.AwaitAtLeast(3));
  // Once the queue has drained, there is room again.
  EXPECT_TRUE(pool.TrySubmit([&ran] { ran.Increment(); }));
  ASSERT_TRUE(ran.AwaitAtLeast(4));
  pool.Shutdown();
  EXPECT_EQ(ran.value(), 4);
  EXPECT_FALSE(refused_ran);
}

TEST(TuningPoolTest, ZeroMaxQueuedRefusesEveryTrySubmit) {
  bool ran = false;
  TuningPool pool(/*threads=*/1, /*max_queued=*/0);
  EXPECT_FALSE(pool.TrySubmit([&ran] { ran = true; }));
  pool.Shutdown();
  EXPECT_FALSE(ran);
}

TEST(TuningPoolTest, SubmitAlwaysQueuesEvenWhenTheBoundIsReached) {
  absl::Notification release;
  Counter started, ran;
  TuningPool pool(/*threads=*/1, /*max_queued=*/1);
  ReleaseOnExit guard(release);
  BlockWorkers(pool, 1, release, started);

  ASSERT_TRUE(pool.TrySubmit([&ran] { ran.Increment(); }));
  EXPECT_FALSE(pool.TrySubmit([&ran] { ran.Increment(); }));  // the bound is reached
  for (int i = 0; i < 5; ++i) pool.Submit([&ran] { ran.Increment(); });
  EXPECT_EQ(pool.queued(), 6);  // beyond max_queued: internal work is never dropped

  release.Notify();
  ASSERT_TRUE(ran.AwaitAtLeast(6));
  pool.Shutdown();
  EXPECT_EQ(ran.value(), 6);
}

TEST(TuningPoolTest, ShutdownRunsTheQueuedTasksThenJoinsAndRefusesNewOnes) {
  absl::Notification release;
  Counter started;
  std::vector<int> order;  // written only by the worker thread; read after the join
  bool ran = false;
  TuningPool pool(/*threads=*/1, /*max_queued=*/10);
  ReleaseOnExit guard(release);
  BlockWorkers(pool, 1, release, started);

  // Queued behind the busy worker; run in order on the one thread.
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(pool.TrySubmit([&order, i] { order.push_back(i); }));
  ASSERT_EQ(pool.queued(), 5);

  // Shutdown on another thread, while the worker is still busy: it must wait for the queued
  // tasks rather than drop them.
  absl::Notification stopped;
  std::thread stopper([&pool, &stopped] {
    pool.Shutdown();
    stopped.Notify();
  });
  release.Notify();
  stopper.join();
  ASSERT_TRUE(stopped.HasBeenNotified());
  // The worker has been joined, so its writes are visible here without a lock.
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(pool.queued(), 0);

  // Stopped: nothing is accepted any more, and shutting down twice is harmless.
  EXPECT_FALSE(pool.TrySubmit([&ran] { ran = true; }));
  pool.Submit([&ran] { ran = true; });
  EXPECT_EQ(pool.queued(), 0);
  pool.Shutdown();
  EXPECT_FALSE(ran);
}

TEST(TuningPoolTest, TasksRunConcurrentlyOnAllThreads) {
  constexpr int kThreads = 4;
  // A barrier: each task arrives, then waits until all kThreads tasks have arrived. It can
  // only open if kThreads tasks run at the same time.
  absl::Mutex mu;
  int arrived = 0;
  int passed = 0;
  std::vector<std::thread::id> ids;
  TuningPool pool(kThreads, /*max_queued=*/kThreads);
  for (int i = 0; i < kThreads; ++i) {
    ASSERT_TRUE(pool.TrySubmit([&] {
      absl::MutexLock lock(&mu);
      ++arrived;
      ids.push_back(std::this_thread::get_id());
      auto all_arrived = [&arrived] { return arrived == kThreads; };
      if (mu.AwaitWithTimeout(absl::Condition(&all_arrived), kTimeout)) ++passed;
    }));
  }
  pool.Shutdown();
  absl::MutexLock lock(&mu);
  EXPECT_EQ(arrived, kThreads);
  EXPECT_EQ(passed, kThreads) << "the tasks did not all run at the same time";
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(std::unique(ids.begin(), ids.end()) - ids.begin(), kThreads);
}

// One-shot calls fill their own queue without touching the jobs lane, and an idle worker
// takes every queued job task before any queued one-shot task.
TEST(TuningPoolTest, LanesAreBoundedSeparatelyAndJobsGoFirst) {
  absl::Notification release;
  Counter started;
  absl::Mutex order_mu;
  std::vector<char> order;
  auto record = [&](char c) {
    return [&order_mu, &order, c] {
      absl::MutexLock lock(&order_mu);
      order.push_back(c);
    };
  };
  TuningPool pool(/*threads=*/1, /*max_queued=*/2);
  ReleaseOnExit guard(release);
  BlockWorkers(pool, 1, release, started);
  EXPECT_TRUE(pool.TrySubmit(record('o'), TuningPool::Lane::kOneShot));
  EXPECT_TRUE(pool.TrySubmit(record('o'), TuningPool::Lane::kOneShot));
  EXPECT_FALSE(pool.TrySubmit(record('x'), TuningPool::Lane::kOneShot));
  EXPECT_TRUE(pool.full(TuningPool::Lane::kOneShot));
  EXPECT_FALSE(pool.full(TuningPool::Lane::kJobs));
  EXPECT_TRUE(pool.TrySubmit(record('j'), TuningPool::Lane::kJobs));
  pool.Submit(record('j'));
  EXPECT_EQ(pool.queued(TuningPool::Lane::kJobs), 2);
  EXPECT_EQ(pool.queued(TuningPool::Lane::kOneShot), 2);
  release.Notify();
  pool.Shutdown();
  EXPECT_EQ(std::string(order.begin(), order.end()), "jjoo");
}

// Cancel turns stopping() on at once; queued tasks still run (and can see it); nothing new is
// accepted.
TEST(TuningPoolTest, CancelSignalsRunningTasksAndRefusesNewWork) {
  absl::Notification release;
  Counter started;
  bool saw_stopping = false;
  TuningPool pool(/*threads=*/1, /*max_queued=*/4);
  ReleaseOnExit guard(release);
  BlockWorkers(pool, 1, release, started);
  EXPECT_TRUE(pool.TrySubmit([&] { saw_stopping = pool.stopping(); }));
  EXPECT_FALSE(pool.stopping());
  pool.Cancel();
  EXPECT_TRUE(pool.stopping());
  EXPECT_FALSE(pool.TrySubmit([] {}, TuningPool::Lane::kOneShot));
  release.Notify();
  pool.Shutdown();
  EXPECT_TRUE(saw_stopping);
}

}  // namespace
}  // namespace octopipe::planner
