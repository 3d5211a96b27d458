// The agent's policy against a scripted PlannerLink, on a FakeClock (the real planner and rank
// processes are exercised by tests:agent_e2e_test): registration and re-registration, back-off
// while the planner is unreachable, refusing a plan for devices the node does not have, leaving
// after a drain, and the bounded wait for peers' checkpoint layers after a clean stop (with a
// scripted rank that stops at once). Time moves only when a test moves the clock.
#include "worker_agent/agent.h"

#include <chrono>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/fake_clock.h"
#include "core/test_dirs.h"
#include "gtest/gtest.h"
#include "executor/tcp_store.h"
#include "worker_agent/run_files.h"

namespace octopipe::agent {
namespace {

using ::octopipe::testing::TestDir;
using ::octopipe::testing::TestPath;

class FakeLink : public PlannerLink {
 public:
  absl::StatusOr<double> Register(const std::string& node, int num_devices,
                                  const std::string& address) override {
    ++registers;
    if (!reachable) return absl::UnavailableError("planner down");
    registered_address = address;
    return 0.5;
  }
  absl::StatusOr<bool> Heartbeat(const std::string& node) override {
    ++heartbeats;
    if (!reachable) return absl::UnavailableError("planner down");
    if (forgotten) {
      forgotten = false;
      return absl::FailedPreconditionError("node declared failed");
    }
    return drained;
  }
  absl::StatusOr<std::vector<AgentJob>> AgentJobs() override {
    if (!reachable) return absl::UnavailableError("planner down");
    return jobs;
  }
  absl::StatusOr<std::vector<AgentEndpoint>> Agents() override { return agents; }
  absl::Status ReportStageTimes(const std::string&, int64_t, const std::string&,
                                const std::vector<StageTimeReport>&,
                                const std::vector<LayerTimeReport>&,
                                const std::vector<DeviceBusyReport>&,
                                const ProgressReport&) override {
    return absl::OkStatus();
  }
  absl::Status ReportEvent(const std::string& job_id, const JobEventReport& e) override {
    events.push_back(e);
    return absl::OkStatus();
  }

  bool reachable = true;
  bool forgotten = false;
  bool drained = false;
  int registers = 0, heartbeats = 0;
  std::string registered_address;
  std::vector<AgentJob> jobs;
  std::vector<AgentEndpoint> agents;  // the other nodes' agents
  std::vector<JobEventReport> events;
};

AgentOptions Options(const Clock* clock) {
  AgentOptions o;
  o.clock = clock;
  o.node = "node-a";
  o.num_devices = 2;
  o.work_dir = TestPath("work");
  o.checkpoint_root = o.work_dir + "/checkpoints";
  return o;
}

AgentJob JobOn(std::vector<DeviceSlot> slots) {
  AgentJob j;
  j.job_id = "job-1";
  j.version = 1;
  j.plan.num_devices = static_cast<int>(slots.size());
  j.slots = std::move(slots);
  j.reference_model = "ref:pattern=M-";
  j.iterations = 3;
  return j;
}

TEST(LocalRanksTest, MapsThisNodesSlotsAndRefusesMissingDevices) {
  auto ranks = LocalRanksOf(JobOn({{"node-b", 0}, {"node-a", 1}, {"node-a", 0}}), "node-a", 2);
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  ASSERT_EQ(ranks->size(), 2u);
  EXPECT_EQ((*ranks)[0].rank, 1);
  EXPECT_EQ((*ranks)[0].local_device, 1);
  EXPECT_EQ((*ranks)[1].rank, 2);
  auto refused = LocalRanksOf(JobOn({{"node-a", 0}, {"node-a", 5}}), "node-a", 2);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("device 5 of node node-a, which has 2"),
            std::string::npos)
      << refused.status();
}

// Ticks every `step` seconds of the fake clock for `seconds`.
void TickFor(Agent& agent, FakeClock& clock, double seconds, double step = 0.05) {
  for (double end = clock.NowSeconds() + seconds; clock.NowSeconds() < end; clock.Advance(step)) {
    agent.Tick();
  }
}

TEST(AgentTest, RegistersBacksOffWhileThePlannerIsDownAndRegistersAgainWhenForgotten) {
  FakeClock clock;
  FakeLink link;
  RankLauncher launcher("/bin/false");
  Agent agent(Options(&clock), &link, &launcher);
  ASSERT_TRUE(agent.Init().ok());
  link.reachable = false;
  agent.Tick();
  EXPECT_EQ(agent.state(), AgentState::kRegistering);
  EXPECT_EQ(link.registers, 1);
  // The first retry waits 0.1 s of the agent's clock, then the waits double: 0.1, 0.2, 0.4, ...
  clock.Advance(0.099);
  agent.Tick();
  EXPECT_EQ(link.registers, 1) << "retried before the back-off ran out";
  clock.Advance(0.002);
  agent.Tick();
  EXPECT_EQ(link.registers, 2);
  // Over 10 seconds far fewer attempts than ticks: the waits double up to 1 s (the default
  // --max_backoff_s), then one attempt a second.
  TickFor(agent, clock, 10);
  EXPECT_LE(link.registers, 2 + 4 + 10) << "back-off, not one attempt per tick";
  EXPECT_GT(link.registers, 3) << "but it keeps retrying";
  link.reachable = true;
  TickFor(agent, clock, 6);
  EXPECT_EQ(agent.state(), AgentState::kWatching);
  EXPECT_EQ(link.registered_address, agent.store_address());
  const int registers = link.registers;
  link.forgotten = true;  // the planner declared the node failed
  TickFor(agent, clock, 2);
  EXPECT_EQ(link.registers, registers + 1);
  EXPECT_EQ(agent.state(), AgentState::kWatching);
}

TEST(AgentTest, RefusesAPlanForDevicesTheNodeDoesNotHaveOnce) {
  FakeLink link;
  link.jobs = {JobOn({{"node-a", 0}, {"node-a", 7}})};
  FakeClock clock;
  RankLauncher launcher("/bin/false");
  Agent agent(Options(&clock), &link, &launcher);
  ASSERT_TRUE(agent.Init().ok());
  TickFor(agent, clock, 2);
  ASSERT_EQ(link.events.size(), 1u);
  EXPECT_EQ(link.events[0].kind, JobEventKind::kPlanRefused);
  EXPECT_NE(link.events[0].message.find("device 7"), std::string::npos);
  EXPECT_FALSE(launcher.active());
  EXPECT_EQ(agent.state(), AgentState::kWatching);
}

TEST(AgentTest, LeavesAfterADrain) {
  FakeClock clock;
  FakeLink link;
  RankLauncher launcher("/bin/false");
  Agent agent(Options(&clock), &link, &launcher);
  ASSERT_TRUE(agent.Init().ok());
  TickFor(agent, clock, 1);
  EXPECT_FALSE(agent.left());
  link.drained = true;
  TickFor(agent, clock, 2);
  EXPECT_TRUE(agent.left());
  std::atomic<bool> stop{false};
  agent.Run(stop);  // returns at once: the agent has left
}

// After its ranks stopped cleanly at iteration 2 for a plan switch, the agent holding plan
// device 0 holds the next version back while the peers' layers of that checkpoint may still be
// on their way — for 3 s of its clock, not longer: the decision is the clock's, so the test
// moves a FakeClock across the bound instead of sleeping. The rank is a script that reports a
// clean stop at iteration 2 and exits (no checkpoint is written, so the wait cannot end early).
// A rank program that ends at once with `outcome` as its result (in `dir`).
std::string RankScriptEndingWith(const std::string& dir, const RankOutcome& outcome) {
  EXPECT_TRUE(WriteFileAtomically(dir + "/outcome.json", RankOutcomeJson(outcome)).ok());
  const std::string script = dir + "/rank.sh";
  {
    std::ofstream out(script);
    out << "#!/bin/sh\n"
        << "for a in \"$@\"; do case \"$a\" in\n"
        << "  --rank_run_dir=*) run=\"${a#--rank_run_dir=}\" ;;\n"
        << "  --rank=*) rank=\"${a#--rank=}\" ;;\n"
        << "esac; done\n"
        << "cp '" << dir << "/outcome.json' \"$run/rank-$rank.result.json\"\n";
  }
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  return script;
}

// Ticks until the run's ranks have exited (in real time, bounded: the fake clock stands still).
void TickUntilTheRunEnds(Agent& agent) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (agent.state() == AgentState::kRunning && std::chrono::steady_clock::now() < give_up) {
    agent.Tick();
    std::this_thread::yield();
  }
}

TEST(AgentTest, WaitsForPeersCheckpointLayersUntilItsClockPassesTheBound) {
  RankOutcome stopped;
  stopped.ok = true;
  stopped.stopped = true;
  stopped.completed_iterations = 2;
  const std::string script = RankScriptEndingWith(TestDir("stopping-rank"), stopped);

  FakeClock clock(100);
  FakeLink link;
  link.jobs = {JobOn({{"node-a", 0}})};
  RankLauncher launcher(script);
  Agent agent(Options(&clock), &link, &launcher);
  ASSERT_TRUE(agent.Init().ok());
  agent.Tick();  // registers, polls the jobs, starts v1's rank
  ASSERT_EQ(agent.state(), AgentState::kRunning);
  ASSERT_EQ(agent.running_version(), 1);
  TickUntilTheRunEnds(agent);
  ASSERT_EQ(agent.state(), AgentState::kWatching);
  ASSERT_FALSE(link.events.empty());
  EXPECT_EQ(link.events.back().kind, JobEventKind::kStopped);
  EXPECT_EQ(link.events.back().iteration, 2);

  // Version 2 uses this node: held back while the clock is within 3 s of the stop.
  link.jobs = {JobOn({{"node-a", 0}})};
  link.jobs[0].version = 2;
  TickFor(agent, clock, 2.9, 0.1);  // polls the jobs (every 0.2 s), tries v2 on every pass
  EXPECT_LT(clock.NowSeconds(), 103);
  EXPECT_EQ(agent.state(), AgentState::kWatching);
  EXPECT_EQ(agent.running_version(), 0);
  EXPECT_FALSE(launcher.active());
  // Past the bound it starts v2 from the newest checkpoint it has (none: iteration 0).
  clock.Set(103.01);
  agent.Tick();
  EXPECT_EQ(agent.state(), AgentState::kRunning);
  EXPECT_EQ(agent.running_version(), 2);
  EXPECT_EQ(link.events.back().kind, JobEventKind::kStarted);
  EXPECT_EQ(link.events.back().plan_version, 2);
}

// A run whose ranks failed is restarted only once the agent of every other node of the plan
// answers: node-b's agent, still listed alive (the planner has not noticed its loss yet), does
// not, so the restart is held (it would fail again at once) until node-b's agent answers, or
// until a newer version arrives, which runs at once.
TEST(AgentTest, HoldsARestartWhileAnotherNodesAgentDoesNotAnswer) {
  RankOutcome failed;
  failed.ok = false;
  failed.error = "peer rank 1 (node-b): connection reset";
  failed.completed_iterations = 1;
  const std::string script = RankScriptEndingWith(TestDir("failing-rank"), failed);
  auto closed_address = [] {
    auto server = executor::TcpStoreServer::Start("127.0.0.1", 0);
    EXPECT_TRUE(server.ok()) << server.status();
    return "127.0.0.1:" + std::to_string((*server)->port());
  };  // the server is gone when it returns: nothing listens there

  FakeClock clock(100);
  FakeLink link;
  link.agents = {{"node-b", closed_address(), /*alive=*/true}};
  link.jobs = {JobOn({{"node-a", 0}, {"node-b", 0}})};
  RankLauncher launcher(script);
  Agent agent(Options(&clock), &link, &launcher);
  ASSERT_TRUE(agent.Init().ok());
  agent.Tick();  // a first run is not held (its ranks wait for their peers)
  ASSERT_EQ(agent.state(), AgentState::kRunning);
  TickUntilTheRunEnds(agent);
  ASSERT_EQ(agent.state(), AgentState::kWatching);
  ASSERT_FALSE(link.events.empty());
  EXPECT_EQ(link.events.back().kind, JobEventKind::kRankFailed);
  EXPECT_NE(link.events.back().message.find("restarting"), std::string::npos)
      << link.events.back().message;

  const size_t events = link.events.size();
  TickFor(agent, clock, 2, 0.1);
  EXPECT_EQ(agent.state(), AgentState::kWatching) << "held while node-b's agent is down";
  EXPECT_FALSE(launcher.active());
  EXPECT_EQ(link.events.size(), events);

  // node-b's agent answers (registered again, at a new address): the restart runs.
  auto node_b = executor::TcpStoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(node_b.ok()) << node_b.status();
  link.agents = {{"node-b", "127.0.0.1:" + std::to_string((*node_b)->port()), true}};
  agent.Tick();
  ASSERT_EQ(agent.state(), AgentState::kRunning);
  EXPECT_EQ(agent.running_version(), 1);
  EXPECT_EQ(link.events.back().kind, JobEventKind::kStarted);
  EXPECT_NE(link.events.back().message.find("restart 1"), std::string::npos)
      << link.events.back().message;
  TickUntilTheRunEnds(agent);

  // Its ranks fail again and node-b is gone again: held, until version 2 (without node-b)
  // arrives and runs at once.
  node_b->reset();
  ASSERT_EQ(link.events.back().kind, JobEventKind::kRankFailed);
  TickFor(agent, clock, 1, 0.1);
  EXPECT_FALSE(launcher.active());
  link.jobs = {JobOn({{"node-a", 0}})};
  link.jobs[0].version = 2;
  TickFor(agent, clock, 0.5, 0.1);  // the next job poll
  EXPECT_EQ(agent.state(), AgentState::kRunning);
  EXPECT_EQ(agent.running_version(), 2);
  TickUntilTheRunEnds(agent);
}

}  // namespace
}  // namespace octopipe::agent
