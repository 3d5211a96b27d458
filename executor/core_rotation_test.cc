#include "executor/core_rotation.h"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <set>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace octopipe::executor {
namespace {

std::vector<int> ThreadCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  std::vector<int> out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) out.push_back(c);
  }
  return out;
}

TEST(CoreRotationTest, EachSlotTakesTheNextCpuEveryEpoch) {
  const std::vector<int> cpus = {0, 2, 5};
  EXPECT_EQ(RotationCpu(0, 0, cpus), 0);
  EXPECT_EQ(RotationCpu(1, 0, cpus), 2);
  EXPECT_EQ(RotationCpu(0, 1, cpus), 2);
  EXPECT_EQ(RotationCpu(2, 1, cpus), 0);
  EXPECT_EQ(RotationCpu(1, 7, cpus), 5);  // (1 + 7) mod 3 = 2
  EXPECT_EQ(RotationCpu(0, -1, cpus), 5);
  // Two slots never share a CPU in one epoch.
  for (int64_t e = 0; e < 6; ++e) EXPECT_NE(RotationCpu(0, e, cpus), RotationCpu(1, e, cpus));
  EXPECT_EQ(RotationCpu(0, 0, {}), -1);
  EXPECT_EQ(RotationCpu(-1, 0, cpus), -1);
}

TEST(CoreRotationTest, InactiveSaysWhy) {
  EXPECT_FALSE(CoreRotation(0, 2, 0).active());
  EXPECT_EQ(CoreRotation(0, 2, 0).reason(), "off");
  EXPECT_EQ(CoreRotation(0, 1, 0.01).reason(), "one rank on this machine");
  EXPECT_EQ(CoreRotation(3, 2, 0.01).reason(), "local rank 3 not in [0, 2)");
  const int n = static_cast<int>(AllowedCpus().size());
  CoreRotation too_many(0, n + 1, 0.01);
  EXPECT_FALSE(too_many.active());
  EXPECT_NE(too_many.reason().find("allowed CPUs"), std::string::npos) << too_many.reason();
  // An inactive rotation leaves the thread's CPU set alone.
  EXPECT_EQ(ThreadCpus(), AllowedCpus());
}

TEST(CoreRotationTest, PinsTheThreadToItsCpuAndGivesTheSetBack) {
  const std::vector<int> all = AllowedCpus();
  if (all.size() < 2) GTEST_SKIP() << "needs 2 CPUs, this process may use " << all.size();
  {
    // A period far longer than the test: the epoch does not change while it runs.
    CoreRotation r(1, 2, 1e6);
    ASSERT_TRUE(r.active()) << r.reason();
    const auto epoch = static_cast<int64_t>(
        std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
            .count() /
        1e6);
    EXPECT_EQ(ThreadCpus(), std::vector<int>{RotationCpu(1, epoch, all)});
    // A thread this one creates gets the process's set back when it asks.
    std::vector<int> released;
    std::thread([&] {
      CoreRotation::ReleaseCallingThread();
      released = ThreadCpus();
    }).join();
    EXPECT_EQ(released, all);
  }
  EXPECT_EQ(ThreadCpus(), all);
}

TEST(CoreRotationTest, MovesTheThreadAtEachBoundary) {
  const std::vector<int> all = AllowedCpus();
  if (all.size() < 2) GTEST_SKIP() << "needs 2 CPUs, this process may use " << all.size();
  CoreRotation r(0, 2, 0.005);
  ASSERT_TRUE(r.active()) << r.reason();
  // Wait (bounded) until the mover has made two more moves, and see the thread on a single CPU
  // of the allowed set each time it looks.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::set<int> seen;
  while ((r.moves() < 3 || seen.size() < 2) && std::chrono::steady_clock::now() < deadline) {
    const std::vector<int> now = ThreadCpus();
    ASSERT_EQ(now.size(), 1u);
    seen.insert(now[0]);
    std::this_thread::yield();
  }
  EXPECT_GE(r.moves(), 3);
  EXPECT_EQ(seen.size(), 2u) << "the thread stayed on one CPU";
}

}  // namespace
}  // namespace octopipe::executor
