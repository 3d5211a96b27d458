// How agents follow plan versions, with real rank processes (the octopipe-agent binary in rank
// mode, Gloo over TCP, rendezvous through node-a's store) and a scripted planner link, so that
// each node can be shown a different version at a chosen moment — the races a real planner
// produces only by chance:
//   * two re-plans ~50 ms apart: node-a starts the older version while node-b went straight to
//     the newer one; both must end up training the newest (no hang, no lost work);
//   * a rank process dies without a node loss (no new version follows): both agents restart
//     the version from its last checkpoint, and the job completes;
//   * a plan that splits the output layer by vocabulary runs (every rank its head shard) and
//     each node reports its device's S and T passes with the stage times.
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/convert.h"
#include "executor/checkpoint.h"
#include "executor/model_spec.h"
#include "executor/testing/random_plan.h"
#include "gtest/gtest.h"
#include "simulator/classic_pipeline.h"
#include "worker_agent/agent.h"
#include "core/test_dirs.h"

namespace octopipe::agent {
namespace {

using ::octopipe::testing::TestDir;

constexpr char kModel[] =
    "ref:pattern=M*-EM-,hidden=16,heads=2,ffn=24,experts=4,top_k=2,moe_ffn=12,state=4,seq=8,"
    "vocab=32,seed=5,microbatches=4";

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}


// The planner as each node sees it: per-node job lists set by the test.
class ScriptedPlanner {
 public:
  class Link : public PlannerLink {
   public:
    Link(ScriptedPlanner* p, std::string node) : p_(p), node_(std::move(node)) {}
    absl::StatusOr<double> Register(const std::string& node, int,
                                    const std::string& address) override {
      std::lock_guard<std::mutex> l(p_->mu_);
      p_->addresses_[node] = address;
      return 0.2;
    }
    absl::StatusOr<bool> Heartbeat(const std::string&) override { return false; }
    absl::StatusOr<std::vector<AgentJob>> AgentJobs() override {
      std::lock_guard<std::mutex> l(p_->mu_);
      return p_->jobs_[node_];
    }
    absl::StatusOr<std::vector<AgentEndpoint>> Agents() override {
      std::lock_guard<std::mutex> l(p_->mu_);
      std::vector<AgentEndpoint> out;
      for (const auto& [node, address] : p_->addresses_) out.push_back({node, address, true});
      return out;
    }
    absl::Status ReportStageTimes(const std::string&, int64_t, const std::string& node,
                                  const std::vector<StageTimeReport>& times,
                                  const std::vector<LayerTimeReport>&,
                                  const std::vector<DeviceBusyReport>& devices,
                                  const ProgressReport&) override {
      std::lock_guard<std::mutex> l(p_->mu_);
      std::vector<StageTimeReport>& all = p_->stage_times_[node];
      all.insert(all.end(), times.begin(), times.end());
      std::vector<DeviceBusyReport>& busy = p_->device_times_[node];
      busy.insert(busy.end(), devices.begin(), devices.end());
      return absl::OkStatus();
    }
    absl::Status ReportEvent(const std::string&, const JobEventReport& e) override {
      std::lock_guard<std::mutex> l(p_->mu_);
      p_->events_.push_back(e);
      return absl::OkStatus();
    }

   private:
    ScriptedPlanner* const p_;
    const std::string node_;
  };

  void Show(const std::string& node, std::vector<AgentJob> jobs) {
    std::lock_guard<std::mutex> l(mu_);
    jobs_[node] = std::move(jobs);
  }
  std::vector<JobEventReport> events() {
    std::lock_guard<std::mutex> l(mu_);
    return events_;
  }
  // Every stage time a node reported, in order.
  std::vector<StageTimeReport> stage_times(const std::string& node) {
    std::lock_guard<std::mutex> l(mu_);
    return stage_times_[node];
  }
  std::vector<DeviceBusyReport> device_times(const std::string& node) {
    std::lock_guard<std::mutex> l(mu_);
    return device_times_[node];
  }
  std::string EventLog() {
    std::string out;
    for (const JobEventReport& e : events()) {
      out += absl::StrCat(e.node, " v", e.plan_version, " ", JobEventKindName(e.kind), " it=", e.iteration, " ",
                          e.message, "\n");
    }
    return out;
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::vector<AgentJob>> jobs_;
  std::map<std::string, std::string> addresses_;
  std::vector<JobEventReport> events_;
  std::map<std::string, std::vector<StageTimeReport>> stage_times_;
  std::map<std::string, std::vector<DeviceBusyReport>> device_times_;
};

class CountingObserver : public AgentObserver {
 public:
  void OnRankRestart(const std::string&) override { ++restarts; }
  int restarts = 0;
};

// One node: its agent (in this process) and rank launcher (real rank processes).
struct Node {
  Node(ScriptedPlanner* planner, const std::string& name, const std::string& checkpoints,
       double transport_timeout_s)
      : link(planner, name),
        launcher(std::filesystem::absolute("worker_agent/octopipe-agent").string()),
        agent(Options(name, checkpoints, transport_timeout_s), &link, &launcher, &observer) {}

  static AgentOptions Options(const std::string& name, const std::string& checkpoints,
                              double transport_timeout_s) {
    AgentOptions o;
    o.node = name;
    o.work_dir = TestDir("work-" + name);
    o.checkpoint_root = checkpoints;
    o.transport_timeout_s = transport_timeout_s;
    return o;
  }

  ScriptedPlanner::Link link;
  RankLauncher launcher;
  CountingObserver observer;
  Agent agent;
};

AgentJob TwoNodeJob(int64_t version, int iterations, int checkpoint_interval) {
  const executor::ModelSpec spec = *executor::ParseModelSpec(kModel);
  AgentJob j;
  j.job_id = "job-1";
  j.version = version;
  j.plan = *ClassicPlan(ScheduleKind::k1F1B, 2, 0, spec.microbatches,
                        executor::ToModelGraph(spec));
  j.slots = {{"node-a", 0}, {"node-b", 0}};
  j.reference_model = kModel;
  j.iterations = iterations;
  j.checkpoint_interval = checkpoint_interval;
  return j;
}

// Ticks both agents (one thread, as each agent's own loop would) until `done` or the timeout.
bool TickUntil(Node& a, Node& b, const std::function<bool()>& done, double timeout_s) {
  const double deadline = Now() + timeout_s;
  while (Now() < deadline) {
    a.agent.Tick();
    b.agent.Tick();
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

bool HasEvent(ScriptedPlanner& p, JobEventKind kind, int64_t version) {
  for (const JobEventReport& e : p.events()) {
    if (e.kind == kind && e.plan_version == version) return true;
  }
  return false;
}

TEST(AgentVersionsTest, TwoReplansMomentsApartConvergeOnTheNewestVersion) {
  ScriptedPlanner planner;
  const std::string checkpoints = TestDir("checkpoints-replans");
  // A long transport timeout: without leaving the superseded run at once, node-a's ranks would
  // wait this long for node-b's, far past the test's deadline.
  Node a(&planner, "node-a", checkpoints, 120);
  Node b(&planner, "node-b", checkpoints, 120);
  ASSERT_TRUE(a.agent.Init().ok());
  ASSERT_TRUE(b.agent.Init().ok());
  constexpr int kIterations = 60;
  // Both re-plans are out; node-a polled between them, node-b after the second.
  planner.Show("node-a", {TwoNodeJob(2, kIterations, 10)});
  planner.Show("node-b", {TwoNodeJob(3, kIterations, 10)});
  ASSERT_TRUE(TickUntil(a, b, [&] { return a.agent.running_version() == 2; }, 30));
  // node-a's v2 ranks wait for node-b's, which never come; node-b waits for node-a (plan
  // device 0) to publish v3's resume point.
  TickUntil(a, b, [] { return false; }, 0.5);
  EXPECT_EQ(a.agent.running_version(), 2) << planner.EventLog();
  EXPECT_EQ(b.agent.running_version(), 0) << planner.EventLog();
  planner.Show("node-a", {TwoNodeJob(3, kIterations, 10)});
  const double shown = Now();
  ASSERT_TRUE(TickUntil(a, b, [&] { return a.agent.running_version() == 3; }, 10))
      << "node-a did not leave the superseded v2 for v3\n" << planner.EventLog();
  EXPECT_LT(Now() - shown, 10);
  ASSERT_TRUE(TickUntil(a, b, [&] { return HasEvent(planner, JobEventKind::kCompleted, 3); }, 90))
      << planner.EventLog();
  EXPECT_FALSE(HasEvent(planner, JobEventKind::kRankFailed, 3)) << planner.EventLog();
  const executor::ModelSpec spec = *executor::ParseModelSpec(kModel);
  EXPECT_EQ(*executor::LatestCompleteCheckpoint(checkpoints + "/job-1", spec), kIterations);
}

TEST(AgentVersionsTest, ARankDyingWithoutANodeLossIsRestartedFromTheLastCheckpoint) {
  ScriptedPlanner planner;
  const std::string checkpoints = TestDir("checkpoints-restart");
  Node a(&planner, "node-a", checkpoints, 10);
  Node b(&planner, "node-b", checkpoints, 10);
  ASSERT_TRUE(a.agent.Init().ok());
  ASSERT_TRUE(b.agent.Init().ok());
  constexpr int kIterations = 400;
  planner.Show("node-a", {TwoNodeJob(1, kIterations, 10)});
  planner.Show("node-b", {TwoNodeJob(1, kIterations, 10)});
  const executor::ModelSpec spec = *executor::ParseModelSpec(kModel);
  const std::string job_checkpoints = checkpoints + "/job-1";
  auto latest = [&] {
    absl::StatusOr<int64_t> l = executor::LatestCompleteCheckpoint(job_checkpoints, spec);
    return l.ok() ? *l : 0;
  };
  ASSERT_TRUE(TickUntil(a, b, [&] { return latest() >= 20; }, 60)) << planner.EventLog();
  ASSERT_LT(latest(), kIterations) << "the run ended before the fault could be injected";
  // node-b's rank dies; the node (its agent) stays, and no new version follows.
  ASSERT_EQ(b.launcher.pids().size(), 1u);
  kill(b.launcher.pids()[0], SIGKILL);
  ASSERT_TRUE(TickUntil(a, b, [&] { return HasEvent(planner, JobEventKind::kCompleted, 1); }, 120))
      << planner.EventLog();
  EXPECT_TRUE(HasEvent(planner, JobEventKind::kRankFailed, 1)) << planner.EventLog();
  bool resumed = false;
  for (const JobEventReport& e : planner.events()) {
    resumed = resumed || (e.kind == JobEventKind::kResumed && e.plan_version == 1 && e.iteration >= 20 &&
                          e.message.find("restart 1") != std::string::npos);
  }
  EXPECT_TRUE(resumed) << planner.EventLog();
  EXPECT_EQ(a.observer.restarts, 1);
  EXPECT_EQ(b.observer.restarts, 1);
  EXPECT_EQ(latest(), kIterations);
}

TEST(AgentVersionsTest, AVocabParallelPlanRunsAndEachNodeReportsItsDevicesPasses) {
  ScriptedPlanner planner;
  const std::string checkpoints = TestDir("checkpoints-vocab");
  Node a(&planner, "node-a", checkpoints, 30);
  Node b(&planner, "node-b", checkpoints, 30);
  ASSERT_TRUE(a.agent.Init().ok());
  ASSERT_TRUE(b.agent.Init().ok());
  constexpr int kIterations = 24;
  // A seeded random plan (placement, partition, order) whose every rank also runs its head
  // shard's S and T passes.
  const executor::ModelSpec spec = *executor::ParseModelSpec(kModel);
  std::mt19937 rng(11);
  AgentJob job = TwoNodeJob(1, kIterations, 12);
  job.plan = executor::testing::RandomPlan(rng, static_cast<int>(spec.kinds.size()), 2, 3,
                                           spec.microbatches, /*split_backward=*/true,
                                           /*vocab_parallel=*/true);
  ASSERT_TRUE(job.plan.vocab_parallel);
  planner.Show("node-a", {job});
  planner.Show("node-b", {job});
  ASSERT_TRUE(TickUntil(a, b, [&] { return HasEvent(planner, JobEventKind::kCompleted, 1); }, 90))
      << planner.EventLog();
  EXPECT_FALSE(HasEvent(planner, JobEventKind::kRankFailed, 1)) << planner.EventLog();
  EXPECT_EQ(*executor::LatestCompleteCheckpoint(checkpoints + "/job-1", spec), kIterations);
  // Node d holds plan device d: its reports carry S and T of that device (stage = device),
  // measured, and its busy time includes them.
  for (const auto& [node, device] : {std::pair{"node-a", 0}, std::pair{"node-b", 1}}) {
    SCOPED_TRACE(node);
    std::map<std::string, int64_t> samples;
    double vocab_s = 0;
    for (const StageTimeReport& t : planner.stage_times(node)) {
      if (t.op_kind != "S" && t.op_kind != "T") continue;
      EXPECT_EQ(t.stage, device);
      EXPECT_GT(t.seconds, 0);
      samples[t.op_kind] += t.samples;
      vocab_s += t.seconds * t.samples;
    }
    // Every reported iteration (the first is a warm-up) ran one S and one T per micro-batch.
    EXPECT_GT(samples["S"], 0);
    EXPECT_EQ(samples["S"] % spec.microbatches, 0);
    EXPECT_EQ(samples["T"], samples["S"]);
    double busy = 0;
    int64_t iterations = 0;
    for (const DeviceBusyReport& d : planner.device_times(node)) {
      EXPECT_EQ(d.device, device);
      busy += d.busy_s * d.iterations;
      iterations += d.iterations;
    }
    EXPECT_EQ(iterations * spec.microbatches, samples["S"]);
    EXPECT_GT(busy, vocab_s);
  }
}

}  // namespace
}  // namespace octopipe::agent
