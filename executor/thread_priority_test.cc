#include "executor/thread_priority.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include <thread>

#include "gtest/gtest.h"

namespace octopipe::executor {
namespace {

int PolicyOfThisThread() {
  int policy = -1;
  sched_param p{};
  pthread_getschedparam(pthread_self(), &policy, &p);
  return policy;
}

// Whether this process may use SCHED_FIFO at all (root, or RLIMIT_RTPRIO > 0).
bool RealtimeAllowed() {
  bool ok = false;
  std::thread([&] {
    sched_param p{};
    p.sched_priority = 1;
    ok = pthread_setschedparam(pthread_self(), SCHED_FIFO, &p) == 0;
  }).join();
  return ok;
}

TEST(ThreadPriorityTest, ScopeRaisesThreadsCreatedInsideAndRestoresTheCaller) {
  if (!RealtimeAllowed()) GTEST_SKIP() << "SCHED_FIFO not permitted to this process";
  unsetenv("OCTOPIPE_COMM_PRIORITY");
  std::thread([] {
    const int before = PolicyOfThisThread();
    int child_policy = -1;
    {
      ScopedCommunicationPriority raised;
      EXPECT_TRUE(raised.raised());
      EXPECT_EQ(PolicyOfThisThread(), SCHED_FIFO);
      std::thread([&] { child_policy = PolicyOfThisThread(); }).join();
    }
    EXPECT_EQ(child_policy, SCHED_FIFO);  // inherited, like Gloo's event loop
    EXPECT_EQ(PolicyOfThisThread(), before);
  }).join();
}

TEST(ThreadPriorityTest, EnvironmentTurnsItOff) {
  setenv("OCTOPIPE_COMM_PRIORITY", "normal", 1);
  std::thread([] {
    EXPECT_FALSE(CommunicationPriorityEnabled());
    EXPECT_FALSE(RaiseCommunicationThread());
    EXPECT_EQ(PolicyOfThisThread(), SCHED_OTHER);
  }).join();
  unsetenv("OCTOPIPE_COMM_PRIORITY");
  EXPECT_TRUE(CommunicationPriorityEnabled());
}

}  // namespace
}  // namespace octopipe::executor
