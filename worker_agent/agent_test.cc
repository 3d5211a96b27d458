// The agent's policy against a scripted PlannerLink (no ranks are started here; the real
// planner and rank processes are exercised by tests:agent_e2e_test): registration and
// re-registration, back-off while the planner is unreachable, refusing a plan for devices the
// node does not have, leaving after a drain.
#include "worker_agent/agent.h"

#include <cstdlib>
#include <deque>

#include "gtest/gtest.h"

namespace octopipe::agent {
namespace {

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
  absl::StatusOr<std::vector<AgentEndpoint>> Agents() override {
    return std::vector<AgentEndpoint>{};
  }
  absl::Status ReportStageTimes(const std::string&, int64_t, const std::string&,
                                const std::vector<StageTimeReport>&,
                                const std::vector<LayerTimeReport>&,
                                const std::vector<DeviceBusyReport>&) override {
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
  std::vector<JobEventReport> events;
};

AgentOptions Options() {
  AgentOptions o;
  o.node = "node-a";
  o.num_devices = 2;
  o.work_dir = std::string(std::getenv("TEST_TMPDIR")) + "/work";
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

TEST(AgentTest, RegistersBacksOffWhileThePlannerIsDownAndRegistersAgainWhenForgotten) {
  FakeLink link;
  RankLauncher launcher("/bin/false");
  Agent agent(Options(), &link, &launcher);
  ASSERT_TRUE(agent.Init().ok());
  link.reachable = false;
  double now = 0;
  double wait = agent.Tick(now);
  EXPECT_EQ(agent.state(), AgentState::kRegistering);
  // Retries back off: over 10 simulated seconds far fewer attempts than ticks.
  int ticks = 0;
  for (; now < 10; now += 0.05, ++ticks) agent.Tick(now);
  EXPECT_LT(link.registers, 12) << "back-off, not one attempt per tick";
  EXPECT_GT(link.registers, 3) << "but it keeps retrying";
  (void)wait;
  link.reachable = true;
  for (double end = now + 6; now < end; now += 0.05) agent.Tick(now);
  EXPECT_EQ(agent.state(), AgentState::kWatching);
  EXPECT_EQ(link.registered_address, agent.store_address());
  const int registers = link.registers;
  link.forgotten = true;  // the planner declared the node failed
  for (double end = now + 2; now < end; now += 0.05) agent.Tick(now);
  EXPECT_EQ(link.registers, registers + 1);
  EXPECT_EQ(agent.state(), AgentState::kWatching);
}

TEST(AgentTest, RefusesAPlanForDevicesTheNodeDoesNotHaveOnce) {
  FakeLink link;
  link.jobs = {JobOn({{"node-a", 0}, {"node-a", 7}})};
  RankLauncher launcher("/bin/false");
  Agent agent(Options(), &link, &launcher);
  ASSERT_TRUE(agent.Init().ok());
  for (double now = 0; now < 2; now += 0.05) agent.Tick(now);
  ASSERT_EQ(link.events.size(), 1u);
  EXPECT_EQ(link.events[0].kind, "plan_refused");
  EXPECT_NE(link.events[0].message.find("device 7"), std::string::npos);
  EXPECT_FALSE(launcher.active());
  EXPECT_EQ(agent.state(), AgentState::kWatching);
}

TEST(AgentTest, LeavesAfterADrain) {
  FakeLink link;
  RankLauncher launcher("/bin/false");
  Agent agent(Options(), &link, &launcher);
  ASSERT_TRUE(agent.Init().ok());
  double now = 0;
  for (; now < 1; now += 0.05) agent.Tick(now);
  EXPECT_FALSE(agent.left());
  link.drained = true;
  for (double end = now + 2; now < end; now += 0.05) agent.Tick(now);
  EXPECT_TRUE(agent.left());
  std::atomic<bool> stop{false};
  agent.Run(stop);  // returns at once: the agent has left
}

}  // namespace
}  // namespace octopipe::agent
