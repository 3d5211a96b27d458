// Worker agents end to end with the planner under them: training goes on while the only planner
// restarts (same port and state) and through a leader fail-over among three replicas on a real
// etcd; a vocabulary-parallel job's measured passes re-plan it and the agents follow. Shared
// set-up: tests/agent_e2e_fixture.h.
#include <signal.h>

#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/cluster.h"
#include "core/convert.h"
#include "etcd/etcd_cluster.h"
#include "executor/checkpoint.h"
#include "executor/model_spec.h"
#include "gtest/gtest.h"
#include "tests/agent_e2e_fixture.h"

namespace octopipe::agent_e2e {
namespace {

using ::octopipe::testing::MetricValue;
using ::octopipe::testing::PlannerProcess;
using ::octopipe::testing::ScrapeMetrics;
using ::octopipe::testing::TestDir;

TEST_F(AgentE2ETest, TrainingContinuesWhileThePlannerRestarts) {
  const std::string checkpoints = TestDir("checkpoints-restart");
  AgentProcess a("node-a", TestDir("restart-a"), checkpoints);
  AgentProcess b("node-b", TestDir("restart-b"), checkpoints);
  ASSERT_TRUE(a.Start(planner_.address())) << a.log();
  ASSERT_TRUE(b.Start(planner_.address())) << b.log();
  constexpr int kRestartIterations = 1500;
  proto::Job job;
  {
    auto ctx = Ctx();
    ASSERT_TRUE(stub_->CreateJob(ctx.get(), AgentJob(kRestartIterations), &job).ok());
  }
  job_id_ = job.id();
  const executor::ModelSpec spec = *executor::ParseModelSpec(kModel);
  const std::string job_checkpoints = checkpoints + "/" + job_id_;
  auto latest = [&] { return LatestCheckpoint(job_checkpoints, spec); };
  auto wait_checkpoint = [&](int64_t at_least, double timeout_s) {
    return WaitForCheckpoint(job_checkpoints, spec, at_least, timeout_s);
  };
  ASSERT_GE(wait_checkpoint(kCheckpointInterval, 60), kCheckpointInterval) << a.log() << b.log();

  // The planner goes away: the ranks keep training (checkpoints keep coming).
  const int port = planner_.port();
  planner_.Kill(SIGKILL);
  const int64_t at_kill = latest();
  EXPECT_GE(wait_checkpoint(at_kill + 3 * kCheckpointInterval, 60), at_kill + 3 * kCheckpointInterval)
      << "training stopped without the planner\n" << a.log();

  // It comes back on the same port and state: the agents reconnect; the job finishes.
  PlannerProcess restarted(kPlanner);
  std::vector<std::string> args = PlannerArgs();
  args.push_back("--port=" + std::to_string(port));
  ASSERT_TRUE(restarted.Start(args).ok()) << restarted.log();
  EXPECT_EQ(wait_checkpoint(kRestartIterations, 120), kRestartIterations) << a.log() << b.log();
  const bool both_alive = WaitUntil([&] {
    proto::ListAgentsResponse agents;
    auto ctx = Ctx();
    if (!stub_->ListAgents(ctx.get(), proto::ListAgentsRequest(), &agents).ok()) return false;
    int alive = 0;
    for (const proto::AgentStatus& s : agents.agents()) alive += s.alive() ? 1 : 0;
    return alive == 2;
  }, 30);
  EXPECT_TRUE(both_alive) << restarted.log();
  const proto::GetJobResponse final_job = Get();
  for (const proto::JobEvent& e : final_job.job().events()) {
    EXPECT_NE(e.kind(), "rank_failed") << e.message();
  }
}

// Three planner replicas on a real etcd: the agents know them all (--planner=A,B,C). The
// leader is killed mid-training: the ranks keep training, the agents find the new leader, no
// node is declared failed (the new leader gives them a heartbeat timeout's grace), and the job
// completes on plan version 1.
TEST_F(AgentE2ETest, TrainingContinuesThroughALeaderFailOver) {
  absl::StatusOr<std::unique_ptr<etcd::EtcdCluster>> etcd = etcd::EtcdCluster::Start(3);
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  std::vector<std::unique_ptr<PlannerProcess>> replicas;
  std::vector<std::string> addresses;
  for (int i = 0; i < 3; ++i) {
    replicas.push_back(std::make_unique<PlannerProcess>(kPlanner));
    std::vector<std::string> args = PlannerArgs();
    args.push_back("--store=etcd:" + (*etcd)->endpoints());
    args.push_back("--leader_ttl_s=2");
    ASSERT_TRUE(replicas[i]->Start(args).ok()) << replicas[i]->log();
    addresses.push_back(replicas[i]->address());
  }
  std::vector<std::unique_ptr<proto::Planner::Stub>> stubs;
  for (const std::string& a : addresses) {
    stubs.push_back(proto::Planner::NewStub(grpc::CreateChannel(a, grpc::InsecureChannelCredentials())));
  }
  auto leader_among = [&](int except) {
    int found = -1;
    WaitUntil([&] {
      for (int i = 0; i < 3; ++i) {
        if (i == except || !replicas[i]->running()) continue;
        if (testing::LeadsPlanners(addresses[i])) {
          found = i;
          return true;
        }
      }
      return false;
    }, 30, /*poll_ms=*/20);
    return found;
  };
  const int first = leader_among(-1);
  ASSERT_GE(first, 0);
  const std::string all = absl::StrJoin(addresses, ",");
  const std::string checkpoints = TestDir("checkpoints-failover");
  AgentProcess a("node-a", TestDir("failover-a"), checkpoints);
  AgentProcess b("node-b", TestDir("failover-b"), checkpoints);
  ASSERT_TRUE(a.Start(all)) << a.log();
  ASSERT_TRUE(b.Start(all)) << b.log();
  constexpr int kFailoverIterations = 1500;
  proto::Job job;
  {
    auto ctx = Ctx();
    ASSERT_TRUE(stubs[first]->CreateJob(ctx.get(), AgentJob(kFailoverIterations), &job).ok());
  }
  job_id_ = job.id();
  const executor::ModelSpec spec = *executor::ParseModelSpec(kModel);
  const std::string job_checkpoints = checkpoints + "/" + job_id_;
  auto latest = [&] { return LatestCheckpoint(job_checkpoints, spec); };
  auto wait_checkpoint = [&](int64_t at_least, double timeout_s) {
    return WaitForCheckpoint(job_checkpoints, spec, at_least, timeout_s);
  };
  ASSERT_GE(wait_checkpoint(kCheckpointInterval, 60), kCheckpointInterval) << a.log() << b.log();

  replicas[first]->Kill(SIGKILL);
  EXPECT_LT(latest(), kFailoverIterations - 10 * kCheckpointInterval)
      << "training ended before the fail-over; the test would prove nothing";
  const int second = leader_among(first);
  ASSERT_GE(second, 0);
  stub_ = std::move(stubs[second]);  // Get() asks the new leader
  EXPECT_EQ(wait_checkpoint(kFailoverIterations, 120), kFailoverIterations) << a.log() << b.log();
  const proto::GetJobResponse final_job = Get();
  EXPECT_EQ(final_job.job().current_version(), 1) << "re-planned during the fail-over";
  for (const proto::JobEvent& e : final_job.job().events()) {
    EXPECT_NE(e.kind(), "rank_failed") << e.message();
    EXPECT_NE(e.kind(), "node_lost") << e.message();
  }
  EXPECT_TRUE(WaitUntil([&] { return Get().job().phase() == proto::JOB_PHASE_COMPLETED; }, 30))
      << replicas[second]->log();
}

// Measured-time re-plans soon (every 4 s at most), adopted when predicted 2% faster.
class AgentVocabE2ETest : public AgentE2ETest {
 protected:
  std::vector<std::string> ExtraPlannerArgs() const override {
    return {"--replan_cooldown_s=4", "--replan_min_gain=0.02"};
  }
};

// A job whose plans split the output layer by vocabulary (vocab_parallel "on"; a heavy head on
// a synthetic cluster of the agents' two nodes, so the split is the faster plan; no MoE layer,
// whose token permutation, costed by bytes moved, would outweigh the head at the slow memory
// below): both agents run the split plan and report over gRPC their device's S and T passes
// with the stage times; the planner calibrates the head with them (its log's
// vocab_deviation), re-plans on the measured costs, and the agents switch to the new version
// and finish the job.
TEST_F(AgentVocabE2ETest, VocabParallelJobReportsItsPassesAndIsReplannedAndCompleted) {
  constexpr char kVocabModel[] =
      "ref:pattern=M*-M,hidden=32,heads=2,ffn=64,seq=32,vocab=16384,seed=5,microbatches=4";
  constexpr int kVocabIterations = 150;  // long enough to see the re-planned version run
  const std::string checkpoints = TestDir("checkpoints-vocab");
  AgentProcess a("node-a", TestDir("vocab-a"), checkpoints);
  AgentProcess b("node-b", TestDir("vocab-b"), checkpoints);
  ASSERT_TRUE(a.Start(planner_.address())) << a.log();
  ASSERT_TRUE(b.Start(planner_.address())) << b.log();
  Cluster c = SyntheticCluster(1);
  c.nodes[0].name = "node-a";
  c.nodes.push_back(c.nodes[0]);
  c.nodes[1].name = "node-b";
  // A slow memory makes the embedding (costed by bytes moved) the heaviest layer in the
  // predictions, so the first plan is shaped around a cost the measured passes do not show and
  // the measured re-plan has a different, faster plan to adopt.
  c.hardware[0].memory_bandwidth = 1e9;
  proto::CreateJobRequest request;
  request.set_name("vocab");
  *request.mutable_cluster() = ClusterToProto(c);
  request.mutable_options()->set_time_budget_s(1);
  request.mutable_options()->set_seed(1);
  request.mutable_options()->set_vocab_parallel(proto::VOCAB_PARALLEL_ON);
  // One pipeline over both devices (a layout would be DP2, which splits no vocabulary).
  request.mutable_options()->set_num_devices(2);
  proto::AgentTraining* t = request.mutable_training();
  t->set_reference_model(kVocabModel);
  t->set_iterations(kVocabIterations);
  t->set_checkpoint_interval(10);
  proto::Job job;
  {
    auto ctx = Ctx();
    grpc::Status s = stub_->CreateJob(ctx.get(), request, &job);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  job_id_ = job.id();
  ASSERT_TRUE(WaitJob([](const proto::GetJobResponse& r) { return r.current().version() >= 1; },
                      30))
      << planner_.log();
  const proto::GetJobResponse v1 = Get();
  ASSERT_EQ(v1.current().version(), 1);
  ASSERT_TRUE(v1.current().result().vocab_parallel()) << "the split is the faster plan here";
  ASSERT_EQ(v1.current().device_slots_size(), 2);

  // Reports of the split plan's measured passes re-plan the job.
  ASSERT_TRUE(WaitJob([](const proto::GetJobResponse& r) {
    return r.current().version() >= 2 && r.current().reason_kind() == proto::PLAN_REASON_MEASURED;
  }, 60)) << Events() << planner_.log() << a.log() << b.log();
  // The planner fitted the vocabulary passes (its log line for every report).
  const std::string log = planner_.log();
  bool vocab_fitted = false;
  const std::string key = "vocab_deviation";
  for (size_t at = log.find(key); at != std::string::npos; at = log.find(key, at + 1)) {
    const size_t value = log.find_first_of("0123456789", at + key.size());
    if (value != std::string::npos && value <= at + key.size() + 3) {
      vocab_fitted = vocab_fitted || std::strtod(log.c_str() + value, nullptr) > 0;
    }
  }
  EXPECT_TRUE(vocab_fitted) << log;
  // node-a's /metrics: its S and T passes are labelled stage="vocab" with their device, its
  // stages' ops with their stage and device (the label set is the same).
  const std::string metrics = ScrapeMetrics(a.metrics_port());
  int vocab_series = 0, stage_series = 0;
  std::istringstream lines(metrics);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("octopipe_agent_stage_op_seconds{", 0) != 0) continue;
    EXPECT_NE(line.find("device=\""), std::string::npos) << line;
    EXPECT_EQ(line.find("device=\"\""), std::string::npos) << line;
    const bool vocab_pass = line.find("kind=\"S\"") != std::string::npos ||
                            line.find("kind=\"T\"") != std::string::npos;
    EXPECT_EQ(line.find("stage=\"vocab\"") != std::string::npos, vocab_pass) << line;
    ++(vocab_pass ? vocab_series : stage_series);
  }
  EXPECT_GE(vocab_series, 2) << metrics;
  EXPECT_GE(stage_series, 1) << metrics;

  // The agents switch to the newest version and finish the job.
  const executor::ModelSpec spec = *executor::ParseModelSpec(kVocabModel);
  ASSERT_NE(WaitEvent([](const proto::JobEvent& e) { return e.kind() == "completed"; }, 0, 120),
            nullptr)
      << Events() << a.log() << b.log();
  EXPECT_EQ(WaitForCheckpoint(checkpoints + "/" + job_id_, spec, kVocabIterations, 30),
            kVocabIterations);
  int64_t newest_run = 0;
  const proto::GetJobResponse final_job = Get();
  for (const proto::JobEvent& e : final_job.job().events()) {
    EXPECT_NE(e.kind(), "rank_failed") << e.message();
    if (e.kind() == "resumed" || e.kind() == "started") {
      newest_run = std::max<int64_t>(newest_run, e.plan_version());
    }
  }
  EXPECT_GE(newest_run, 2) << "a re-planned version ran\n" << Events();
}

}  // namespace
}  // namespace octopipe::agent_e2e
