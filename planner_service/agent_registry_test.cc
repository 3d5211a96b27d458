// Pins the failure detector's contract on a fake clock: a silent node is reported exactly once
// when it passes the timeout, heartbeats keep it alive, a failed node's heartbeats are refused
// until it registers again (which reports a join), and concurrent callers are safe.
#include "planner_service/agent_registry.h"

#include <algorithm>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "core/clock.h"
#include "core/fake_clock.h"

namespace octopipe {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr double kTimeout = 10;

TEST(AgentRegistryTest, RegisterRecordsTheNodeAliveAtNow) {
  FakeClock clock(100);
  AgentRegistry registry(&clock, kTimeout);
  EXPECT_TRUE(registry.Register("node-a", 8, "10.0.0.1:7000"));
  absl::optional<AgentInfo> info = registry.Get("node-a");
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ("node-a", info->node_id);
  EXPECT_EQ(8, info->num_devices);
  EXPECT_EQ("10.0.0.1:7000", info->address);
  EXPECT_EQ(100, info->last_heartbeat_s);
  EXPECT_TRUE(info->alive);
  EXPECT_EQ(1, registry.AliveCount());
  EXPECT_FALSE(registry.Get("node-b").has_value());
}

TEST(AgentRegistryTest, SilentNodeIsReportedOnceAfterTheTimeout) {
  FakeClock clock;
  AgentRegistry registry(&clock, kTimeout);
  registry.Register("node-a", 8, "a:1");
  clock.Advance(kTimeout);  // exactly the timeout: not yet "older than" it
  EXPECT_THAT(registry.DetectFailures(), IsEmpty());
  clock.Advance(0.001);
  EXPECT_THAT(registry.DetectFailures(), ElementsAre("node-a"));
  EXPECT_THAT(registry.DetectFailures(), IsEmpty());
  clock.Advance(1000);
  EXPECT_THAT(registry.DetectFailures(), IsEmpty());
  EXPECT_FALSE(registry.Get("node-a")->alive);
  EXPECT_EQ(0, registry.AliveCount());
}

TEST(AgentRegistryTest, HeartbeatsKeepANodeAliveWhileASilentOneFails) {
  FakeClock clock;
  AgentRegistry registry(&clock, kTimeout);
  registry.Register("beating", 4, "b:1");
  registry.Register("silent", 4, "s:1");
  for (int i = 0; i < 10; ++i) {
    clock.Advance(kTimeout * 0.75);
    ASSERT_TRUE(registry.Heartbeat("beating").ok());
    const std::vector<std::string> failed = registry.DetectFailures();
    if (i == 1) {
      EXPECT_THAT(failed, ElementsAre("silent"));  // 15 s silent
    } else {
      EXPECT_THAT(failed, IsEmpty()) << "round " << i;
    }
  }
  EXPECT_TRUE(registry.Get("beating")->alive);
  EXPECT_DOUBLE_EQ(clock.NowSeconds(), registry.Get("beating")->last_heartbeat_s);
  EXPECT_EQ(1, registry.AliveCount());
}

TEST(AgentRegistryTest, SeveralFailuresComeBackSorted) {
  FakeClock clock;
  AgentRegistry registry(&clock, kTimeout);
  for (const char* id : {"n3", "n1", "n2"}) registry.Register(id, 1, "x");
  clock.Advance(kTimeout + 1);
  EXPECT_THAT(registry.DetectFailures(), ElementsAre("n1", "n2", "n3"));
}

TEST(AgentRegistryTest, LateHeartbeatBeforeDetectionKeepsTheNodeAlive) {
  FakeClock clock;
  AgentRegistry registry(&clock, kTimeout);
  registry.Register("node-a", 1, "a");
  clock.Advance(kTimeout * 3);
  ASSERT_TRUE(registry.Heartbeat("node-a").ok());
  EXPECT_THAT(registry.DetectFailures(), IsEmpty());
}

TEST(AgentRegistryTest, FailedNodeMustReRegisterAndThatIsAJoin) {
  FakeClock clock;
  AgentRegistry registry(&clock, kTimeout);
  EXPECT_TRUE(registry.Register("node-a", 8, "old:1"));
  EXPECT_FALSE(registry.Register("node-a", 8, "old:1")) << "already alive: not a join";
  clock.Advance(kTimeout + 1);
  ASSERT_THAT(registry.DetectFailures(), ElementsAre("node-a"));

  absl::Status beat = registry.Heartbeat("node-a");
  EXPECT_EQ(absl::StatusCode::kFailedPrecondition, beat.code());
  EXPECT_THAT(std::string(beat.message()), HasSubstr("'node-a'"));

  EXPECT_TRUE(registry.Register("node-a", 6, "new:2"));
  absl::optional<AgentInfo> info = registry.Get("node-a");
  ASSERT_TRUE(info.has_value());
  EXPECT_TRUE(info->alive);
  EXPECT_EQ(6, info->num_devices);
  EXPECT_EQ("new:2", info->address);
  EXPECT_EQ(clock.NowSeconds(), info->last_heartbeat_s);
  EXPECT_TRUE(registry.Heartbeat("node-a").ok());
  // A revived node gets a full timeout again and is reported again when it goes silent.
  clock.Advance(kTimeout);
  EXPECT_THAT(registry.DetectFailures(), IsEmpty());
  clock.Advance(1);
  EXPECT_THAT(registry.DetectFailures(), ElementsAre("node-a"));
}

TEST(AgentRegistryTest, UnknownNodeHeartbeatIsNotFoundNamingIt) {
  FakeClock clock;
  AgentRegistry registry(&clock, kTimeout);
  absl::Status beat = registry.Heartbeat("stranger");
  EXPECT_EQ(absl::StatusCode::kNotFound, beat.code());
  EXPECT_THAT(std::string(beat.message()), HasSubstr("'stranger'"));
}

TEST(AgentRegistryTest, ADrainedNodeStaysDrainedUntilItRegistersAgain) {
  FakeClock clock;
  AgentRegistry registry(&clock, kTimeout);
  registry.Register("node-a", 2, "a");
  EXPECT_FALSE(registry.IsDrained("node-a"));
  EXPECT_TRUE(registry.MarkDrained("node-a"));
  EXPECT_TRUE(registry.IsDrained("node-a"));
  EXPECT_FALSE(registry.Get("node-a")->alive);
  EXPECT_FALSE(registry.MarkDrained("node-a")) << "already dead";
  EXPECT_FALSE(registry.IsDrained("stranger"));
  EXPECT_TRUE(registry.Register("node-a", 2, "a"));
  EXPECT_FALSE(registry.IsDrained("node-a"));
}

TEST(AgentRegistryTest, MarkFailedIsIdempotentAndNotReportedAgainByDetection) {
  FakeClock clock;
  AgentRegistry registry(&clock, kTimeout);
  registry.Register("node-a", 8, "a");
  registry.Register("node-b", 8, "b");
  EXPECT_TRUE(registry.MarkFailed("node-a"));
  EXPECT_FALSE(registry.MarkFailed("node-a"));
  EXPECT_FALSE(registry.MarkFailed("stranger"));
  EXPECT_FALSE(registry.Get("stranger").has_value()) << "unknown nodes stay unknown";
  EXPECT_EQ(absl::StatusCode::kFailedPrecondition, registry.Heartbeat("node-a").code());
  clock.Advance(kTimeout + 1);
  EXPECT_THAT(registry.DetectFailures(), ElementsAre("node-b"));
  EXPECT_FALSE(registry.MarkFailed("node-b")) << "already declared by detection";
  EXPECT_TRUE(registry.Register("node-a", 8, "a"));
}

TEST(AgentRegistryTest, ListHasEveryNodeSortedWithItsState) {
  FakeClock clock;
  AgentRegistry registry(&clock, kTimeout);
  registry.Register("z", 2, "z:1");
  registry.Register("a", 4, "a:1");
  registry.MarkFailed("z");
  const std::vector<AgentInfo> list = registry.List();
  ASSERT_EQ(2u, list.size());
  EXPECT_EQ("a", list[0].node_id);
  EXPECT_TRUE(list[0].alive);
  EXPECT_EQ("z", list[1].node_id);
  EXPECT_FALSE(list[1].alive);
  EXPECT_EQ(1, registry.AliveCount());
}

TEST(AgentRegistryTest, ConcurrentHeartbeatsFromEightThreadsAreSafe) {
  FakeClock clock;
  AgentRegistry registry(&clock, kTimeout);
  constexpr int kThreads = 8;
  constexpr int kBeats = 2000;
  for (int t = 0; t < kThreads; ++t) registry.Register(absl::StrCat("node-", t), 1, "x");
  registry.Register("shared", 1, "x");
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::string own = absl::StrCat("node-", t);
      for (int i = 0; i < kBeats; ++i) {
        // The clock moves by far less than the timeout in all, so nothing may fail.
        clock.Advance(1e-6);
        if (!registry.Heartbeat(own).ok()) ++failures[t];
        if (!registry.Heartbeat("shared").ok()) ++failures[t];
        if (i % 100 == 0) {
          if (!registry.DetectFailures().empty()) ++failures[t];
          if (registry.List().size() != kThreads + 1) ++failures[t];
          if (registry.AliveCount() != kThreads + 1) ++failures[t];
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(0, failures[t]) << "thread " << t;
  EXPECT_EQ(kThreads + 1, registry.AliveCount());
  // Every node's last heartbeat is the final clock reading or before it.
  for (const AgentInfo& info : registry.List()) {
    EXPECT_LE(info.last_heartbeat_s, clock.NowSeconds());
  }
  clock.Advance(kTimeout + 1);
  EXPECT_EQ(static_cast<size_t>(kThreads + 1), registry.DetectFailures().size());
}

TEST(AgentRegistryTest, FakeClockSetAndAdvance) {
  FakeClock clock(5);
  EXPECT_EQ(5, clock.NowSeconds());
  clock.Advance(2.5);
  EXPECT_EQ(7.5, clock.NowSeconds());
  clock.Set(1);
  EXPECT_EQ(1, clock.NowSeconds());
}

TEST(AgentRegistryTest, RealClockIsMonotonicAndKeepsAFreshNodeAlive) {
  RealClock clock;
  const double before = clock.NowSeconds();
  AgentRegistry registry(&clock, /*heartbeat_timeout_s=*/3600);
  registry.Register("node-a", 1, "a");
  EXPECT_TRUE(registry.Heartbeat("node-a").ok());
  EXPECT_THAT(registry.DetectFailures(), IsEmpty());
  EXPECT_GE(registry.Get("node-a")->last_heartbeat_s, before);
  EXPECT_GE(clock.NowSeconds(), registry.Get("node-a")->last_heartbeat_s);
  EXPECT_GT(UnixMillis(), int64_t{1600000000000});  // after 2020: the wall clock, in ms
}

// Pages by node id: page_size at a time, the token the last node id, the last page without one;
// a bad size names page_size.
TEST(AgentRegistryTest, PagesOfAgentsCoverEveryNodeOnceInOrder) {
  std::vector<AgentInfo> agents;
  for (int i = 9; i >= 0; --i) agents.push_back({"node" + std::to_string(i), 1, "h:1", 0, true});
  std::vector<std::string> seen;
  std::string token;
  int pages = 0;
  do {
    absl::StatusOr<AgentPage> page = PageOfAgents(agents, 4, token);
    ASSERT_TRUE(page.ok()) << page.status();
    ASSERT_LE(page->agents.size(), 4u);
    for (const AgentInfo& a : page->agents) seen.push_back(a.node_id);
    token = page->next_page_token;
    ++pages;
  } while (!token.empty() && pages < 10);
  EXPECT_EQ(pages, 3);
  ASSERT_EQ(seen.size(), 10u);
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  EXPECT_EQ(PageOfAgents(agents, 0, "").value().agents.size(), 10u);  // default 500
  EXPECT_TRUE(PageOfAgents(agents, 0, "").value().next_page_token.empty());
  for (int bad : {-1, 5001}) {
    absl::StatusOr<AgentPage> page = PageOfAgents(agents, bad, "");
    EXPECT_EQ(page.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(page.status().message().find("page_size"), absl::string_view::npos);
  }
}

}  // namespace
}  // namespace octopipe
