// Worker agents end to end, losing nodes: the real octopipe-planner and two octopipe-agent processes ("node-a",
// "node-b", one device each; ranks rendezvous through node-a's TCP store; no shared run or
// checkpoint directory: the agents copy checkpoint layers to each other) train a job on the
// reference model. kill -9 of node-b's agent (its ranks die with
// it) makes node-a's ranks fail naming the lost peer; the planner drops node-b on its heartbeat
// timeout and re-plans on node-a alone, which resumes from the last checkpoint; node-b's agent
// comes back, the job is re-planned onto it; a drain of node-b moves the job back to node-a at
// an iteration boundary without losing work; the final weights equal an uninterrupted run's.
// Also: one checkpoint replica per layer file, and a DP4 x EP2 job whose broken expert group is
// dropped while the other goes on from memory. Shared set-up: tests/agent_e2e_fixture.h.
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
#include "executor/checkpoint.h"
#include "executor/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/agent_e2e_fixture.h"

namespace octopipe::agent_e2e {
namespace {

using ::octopipe::testing::MetricValue;
using ::octopipe::testing::ScrapeMetrics;
using ::octopipe::testing::TestDir;

TEST_F(AgentE2ETest, NodeLossResumeRejoinDrainAndFinalWeightsEqualAnUninterruptedRun) {
  // No shared storage: each node keeps its own checkpoint directory; agents copy the layer
  // files to each other (worker_agent/checkpoint_replicator.h).
  const std::string checkpoints = TestDir("checkpoints-a");
  const std::string checkpoints_b = TestDir("checkpoints-b");
  AgentProcess a("node-a", TestDir("node-a"), checkpoints);
  AgentProcess b("node-b", TestDir("node-b"), checkpoints_b);
  ASSERT_TRUE(a.Start(planner_.address())) << a.log();
  ASSERT_TRUE(b.Start(planner_.address())) << b.log();

  proto::Job job;
  {
    auto ctx = Ctx();
    grpc::Status s = stub_->CreateJob(ctx.get(), AgentJob(), &job);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  job_id_ = job.id();
  const executor::ModelSpec spec = *executor::ParseModelSpec(kModel);
  const std::string job_checkpoints = checkpoints + "/" + job_id_;
  // A scheduler watching the job sees its versions and, asked for, its events as they happen.
  grpc::ClientContext watch_ctx;
  std::mutex watched_mu;
  std::vector<proto::PlanVersion> watched;
  std::thread watcher([&] {
    proto::WatchPlanRequest req;
    req.set_job_id(job_id_);
    req.set_include_events(true);
    auto reader = stub_->WatchPlan(&watch_ctx, req);
    proto::PlanVersion m;
    while (reader->Read(&m)) {
      std::lock_guard<std::mutex> l(watched_mu);
      watched.push_back(m);
    }
    reader->Finish();
  });
  struct StopWatching {
    grpc::ClientContext* ctx;
    std::thread* t;
    ~StopWatching() {
      ctx->TryCancel();
      t->join();
    }
  } stop_watching{&watch_ctx, &watcher};

  // 1. Both nodes train; wait for a few checkpoints (complete on node-a: node-b's layers are
  // copied to it).
  ASSERT_NE(WaitEvent([](const proto::JobEvent& e) { return e.kind() == "started"; }, 0, 60),
            nullptr)
      << Events() << a.log() << b.log();
  ASSERT_GE(WaitForCheckpoint(job_checkpoints, spec, 3 * kCheckpointInterval, 60),
            3 * kCheckpointInterval);
  // And the other way: node-a's layers reach node-b's own directory (copies are asynchronous;
  // wait for one before the kill, so the final check below does not race the kill).
  const std::string b_checkpoints = checkpoints_b + "/" + job_id_;
  WaitUntil([&] { return executor::LatestCompleteCheckpoint(b_checkpoints, spec).ok(); }, 60,
            /*poll_ms=*/20);
  // Live metrics on node-a's /metrics (prometheus-cpp).
  const std::string metrics = ScrapeMetrics(a.metrics_port());
  for (const char* name :
       {"octopipe_agent_iteration_seconds{", "octopipe_agent_bubble_ratio{",
        "octopipe_agent_pipeline_bubble_ratio{", "octopipe_agent_stage_op_seconds{",
        "octopipe_agent_tokens_per_second{", "octopipe_agent_checkpoint_seconds{",
        "octopipe_agent_plan_version{", "octopipe_agent_state{",
        "octopipe_agent_overhead_ratio{"}) {
    EXPECT_NE(metrics.find(name), std::string::npos) << name << " missing from\n" << metrics;
  }
  // The planner's pipeline-wide measured bubble ratio, from both agents' per-device reports.
  const std::string measured_bubble =
      absl::StrCat("octopipe_measured_bubble_ratio{job_id=\"", job_id_, "\"}");
  std::optional<double> bubble;
  WaitUntil([&] {
    bubble = MetricValue(ScrapeMetrics(planner_.metrics_port()), measured_bubble);
    return bubble.has_value();
  }, 30);
  ASSERT_TRUE(bubble.has_value()) << ScrapeMetrics(planner_.metrics_port());
  EXPECT_GT(*bubble, 0);
  EXPECT_LT(*bubble, 1);
  const int events_before_kill = Get().job().events_size();

  // 2. kill -9 node-b's agent (its ranks die with it).
  const double killed_at = Now();
  b.Kill(SIGKILL);
  int failed_index = 0;
  const proto::JobEvent* failed = WaitEvent(
      [](const proto::JobEvent& e) { return e.kind() == "rank_failed" && e.node_id() == "node-a"; },
      events_before_kill, 30, &failed_index);
  ASSERT_NE(failed, nullptr) << Events() << a.log();
  EXPECT_NE(failed->message().find("rank 1"), std::string::npos)
      << "the error names the lost peer: " << failed->message();
  const double failed_after_s = failed->unix_ms() / 1e3 - killed_at;
  const int64_t failed_iteration = failed->iteration();  // (WaitEvent reuses the pointer)
  EXPECT_LT(failed_after_s, 5 + 3) << "within the transport timeout";

  // 3. The planner drops node-b and re-plans on node-a alone, which resumes from a checkpoint.
  int64_t survivor_version = 0;
  ASSERT_TRUE(WaitJob(
      [&](const proto::GetJobResponse& r) {
        survivor_version = r.current().version();
        return r.job().excluded_nodes_size() == 1 && r.current().reason_kind() == proto::PLAN_REASON_NODE_FAILURE;
      },
      30))
      << Events() << a.log();
  const proto::JobEvent* resumed = WaitEvent(
      [&](const proto::JobEvent& e) {
        return e.kind() == "resumed" && e.node_id() == "node-a" &&
               e.plan_version() >= survivor_version;
      },
      failed_index, 60);
  ASSERT_NE(resumed, nullptr) << Events() << a.log();
  EXPECT_GT(resumed->iteration(), 0);
  const int64_t resumed_iteration = resumed->iteration();
  const double kill_to_training_s = resumed->unix_ms() / 1e3 - killed_at;
  // Recovered from the survivor's memory, not rolled back to the last checkpoint: node-a's
  // rank saved the state of its last completed iteration as it failed, and that is where the
  // survivor version resumed — at most the interrupted iteration is lost.
  const proto::JobEvent* saved = WaitEvent(
      [](const proto::JobEvent& e) { return e.kind() == "state_saved" && e.node_id() == "node-a"; },
      events_before_kill, 1);
  ASSERT_NE(saved, nullptr) << Events();
  EXPECT_EQ(resumed_iteration, saved->iteration()) << Events();
  EXPECT_LE(failed_iteration - resumed_iteration, 1) << Events();
  EXPECT_LT(kill_to_training_s, 2 /*heartbeat timeout*/ + 3 + 10 /*loaded machine*/);
  std::printf("kill -9 -> ranks failed: %.2f s; kill -9 -> training again on node-a: %.2f s "
              "(plan v%lld, resumed from iteration %lld)\n",
              failed_after_s, kill_to_training_s, static_cast<long long>(survivor_version),
              static_cast<long long>(resumed_iteration));

  // 4. node-b's agent comes back: the job is re-planned onto both nodes.
  const int events_before_join = Get().job().events_size();
  ASSERT_TRUE(b.Start(planner_.address())) << b.log();
  int64_t joined_version = 0;
  ASSERT_TRUE(WaitJob(
      [&](const proto::GetJobResponse& r) {
        joined_version = r.current().version();
        return r.job().excluded_nodes_size() == 0 && joined_version > survivor_version;
      },
      30))
      << Events();
  const proto::JobEvent* rejoined = WaitEvent(
      [&](const proto::JobEvent& e) {
        return (e.kind() == "resumed" || e.kind() == "completed") &&
               e.plan_version() >= joined_version;
      },
      events_before_join, 60);
  ASSERT_NE(rejoined, nullptr) << Events() << a.log() << b.log();

  // 5. Drain node-b: the switch happens at an iteration boundary (a "stopped", no failure).
  if (rejoined->kind() == "resumed") {
    const int events_before_drain = Get().job().events_size();
    proto::NodeRequest drain;
    drain.set_node_id("node-b");
    drain.set_reason("maintenance");
    proto::NodeResponse drained;
    {
      auto ctx = Ctx();
      ASSERT_TRUE(stub_->DrainNode(ctx.get(), drain, &drained).ok());
    }
    const proto::JobEvent* after_drain = WaitEvent(
        [&](const proto::JobEvent& e) {
          return e.kind() == "stopped" || e.kind() == "rank_failed" || e.kind() == "completed";
        },
        events_before_drain, 60);
    ASSERT_NE(after_drain, nullptr) << Events();
    EXPECT_NE(after_drain->kind(), "rank_failed") << Events();
  }

  // 6. The job completes; its final checkpoint (complete in node-a's own directory, whichever
  // node wrote which layers) equals the uninterrupted run's weights.
  ASSERT_NE(WaitEvent([](const proto::JobEvent& e) { return e.kind() == "completed"; }, 0, 180),
            nullptr)
      << Events() << a.log() << b.log();
  std::printf("events:\n%s", Events().c_str());
  ASSERT_EQ(WaitForCheckpoint(job_checkpoints, spec, kIterations, 30), kIterations);
  // node-b, which never trained every layer, holds complete checkpoints too (copied to it).
  absl::StatusOr<int64_t> on_b = executor::LatestCompleteCheckpoint(b_checkpoints, spec);
  ASSERT_TRUE(on_b.ok()) << on_b.status();
  EXPECT_GT(*on_b, 0);
  ExpectUninterruptedWeights(job_checkpoints);

  // The agent's own cost (bookkeeping in the ranks per iteration second) and its last plan
  // switch, as node-a exports them (figures for the record; loaded machine).
  std::istringstream final_metrics(ScrapeMetrics(a.metrics_port()));
  for (std::string line; std::getline(final_metrics, line);) {
    if (line.rfind("octopipe_agent_overhead_ratio{", 0) == 0 ||
        line.rfind("octopipe_agent_plan_switch_seconds{", 0) == 0) {
      std::printf("node-a: %s\n", line.c_str());
    }
    if (line.rfind("octopipe_agent_overhead_ratio{", 0) == 0) {
      // Measured, with a bound that only catches bookkeeping dominating the iteration: on this
      // tiny model (iterations of a few ms) the per-iteration record is ~20% of it (the 1%
      // target holds only for iterations ~20x longer; see docs/architecture.md).
      const double ratio = std::stod(line.substr(line.rfind(' ') + 1));
      EXPECT_GT(ratio, 0) << line;
      EXPECT_LT(ratio, 0.5) << line;
    }
  }

  // The watch stream carried the versions and, in between, the events GetJob shows.
  std::lock_guard<std::mutex> l(watched_mu);
  bool saw_failed = false, saw_resumed = false, saw_completed = false;
  int64_t last_version = 0, versions = 0;
  for (const proto::PlanVersion& m : watched) {
    if (!m.has_event()) {
      EXPECT_GT(m.version(), last_version);
      last_version = m.version();
      ++versions;
      continue;
    }
    EXPECT_EQ(m.version(), 0);
    EXPECT_EQ(m.job_id(), job_id_);
    const proto::JobEvent& e = m.event();
    saw_failed = saw_failed || (e.kind() == "rank_failed" && e.node_id() == "node-a");
    saw_resumed = saw_resumed || (e.kind() == "resumed" && e.iteration() > 0 &&
                                  e.plan_version() <= last_version);
    saw_completed = saw_completed || e.kind() == "completed";
  }
  EXPECT_GE(versions, 3) << "initial, node_failure, node_join at least";
  EXPECT_TRUE(saw_failed && saw_resumed && saw_completed)
      << "events on the watch stream: failed " << saw_failed << ", resumed " << saw_resumed
      << ", completed " << saw_completed;
}

// Each checkpoint layer file on one peer only (--checkpoint_replicas=1; three nodes, the ring of
// sorted names a -> b -> c -> a). The cluster lists node-a, node-c, node-b, so plan device 0 is
// on node-a and, once node-a is lost, on node-c. node-a's ranks write the checkpoints (this
// small model's plans keep every layer on device 0) and copy them to node-b only; node-c holds
// none. kill -9 of node-a: node-c, now holding plan device 0, gathers the newest checkpoint
// from node-b, the survivors resume from it, and the job ends with the uninterrupted run's
// weights.
TEST_F(AgentE2ETest, OneReplicaPerCheckpointFileStillResumesAfterANodeLoss) {
  std::map<std::string, std::string> checkpoints;
  std::map<std::string, std::unique_ptr<AgentProcess>> agents;
  for (const std::string node : {"node-a", "node-b", "node-c"}) {
    checkpoints[node] = TestDir("k1-checkpoints-" + node);
    agents[node] = std::make_unique<AgentProcess>(node, TestDir("k1-" + node), checkpoints[node],
                                                  std::vector<std::string>{
                                                      "--checkpoint_replicas=1"});
    ASSERT_TRUE(agents[node]->Start(planner_.address())) << agents[node]->log();
  }
  proto::CreateJobRequest request = AgentJob(kIterations, 3);
  request.mutable_cluster()->mutable_nodes(1)->set_name("node-c");
  request.mutable_cluster()->mutable_nodes(2)->set_name("node-b");
  proto::Job job;
  {
    auto ctx = Ctx();
    grpc::Status s = stub_->CreateJob(ctx.get(), request, &job);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  job_id_ = job.id();
  auto job_dir = [&](const std::string& node) { return checkpoints[node] + "/" + job_id_; };
  ASSERT_NE(WaitEvent([](const proto::JobEvent& e) { return e.kind() == "started"; }, 0, 60),
            nullptr)
      << Events() << agents["node-a"]->log();
  const proto::PlanVersion first = Get().current();
  ASSERT_EQ(first.device_slots(0).node_id(), "node-a");
  for (const proto::StageSpec& st : first.result().plan().stages()) {
    std::printf("layers %d-%d on %s\n", st.first_layer(), st.last_layer(),
                first.device_slots(st.device()).node_id().c_str());
  }
  // A few complete checkpoints copied to node-b before the kill.
  const executor::ModelSpec spec = *executor::ParseModelSpec(kModel);
  const int64_t on_b = WaitForCheckpoint(job_dir("node-b"), spec, 3 * kCheckpointInterval, 60);
  ASSERT_GE(on_b, 3 * kCheckpointInterval) << Events();
  // Not every node stores every layer: node-c has none of node-a's (node-b is node-a's replica).
  std::set<std::string> writers;
  for (const proto::StageSpec& st : first.result().plan().stages()) {
    writers.insert(first.device_slots(st.device()).node_id());
  }
  if (writers == std::set<std::string>{"node-a"}) {
    EXPECT_TRUE(executor::ListLayerCheckpoints(job_dir("node-c")).empty());
  }
  const int events_before_kill = Get().job().events_size();
  agents["node-a"]->Kill(SIGKILL);

  // The planner drops node-a; plan device 0 moves to node-c, which resumes from a checkpoint.
  int64_t survivor_version = 0;
  ASSERT_TRUE(WaitJob(
      [&](const proto::GetJobResponse& r) {
        survivor_version = r.current().version();
        return r.job().excluded_nodes_size() == 1 && r.current().reason_kind() == proto::PLAN_REASON_NODE_FAILURE;
      },
      30))
      << Events();
  ASSERT_EQ(Get().current().device_slots(0).node_id(), "node-c");
  const proto::JobEvent* resumed = WaitEvent(
      [&](const proto::JobEvent& e) {
        return (e.kind() == "resumed" || e.kind() == "started") &&
               e.plan_version() >= survivor_version;
      },
      events_before_kill, 90);
  ASSERT_NE(resumed, nullptr) << Events() << agents["node-c"]->log();
  EXPECT_EQ(resumed->kind(), "resumed") << Events();
  EXPECT_GE(resumed->iteration(), on_b) << Events();
  std::printf("one replica per file: node-c resumed from iteration %lld after losing node-a\n",
              static_cast<long long>(resumed->iteration()));
  ASSERT_NE(WaitEvent([](const proto::JobEvent& e) { return e.kind() == "completed"; },
                      events_before_kill, 180),
            nullptr)
      << Events() << agents["node-b"]->log() << agents["node-c"]->log();
  WaitForCheckpoint(job_dir("node-c"), spec, kIterations, 30);
  ExpectUninterruptedWeights(job_dir("node-c"));
}

// A new layout must be predicted 50% quicker than keeping the survivors' replicas to replace
// them after a node loss (the re-plan margin): on the same GPUs none is, so the survivors'
// option is what runs.
class AgentExpertParallelE2ETest : public AgentE2ETest {
 protected:
  std::vector<std::string> ExtraPlannerArgs() const override {
    return {"--replan_min_gain=0.5"};
  }
};

// Expert parallelism under agents, through a node loss: four agents of one device each run the
// reference model (its MoE layer has 4 experts) as DP4 x EP2, fixed — EP group 0 is ranks 0, 1
// on node-a, node-b, group 1 ranks 2, 3 on node-c, node-d, each group holding every expert
// between its two ranks. kill -9 of node-b breaks group 0: the planner drops that whole group
// (node-a's rank holds only half the experts, so it cannot go on alone) and publishes "drop
// replicas" — group 1 alone, DP2 x EP2 on node-c and node-d, each rank with the expert shard it
// held, the global batch of 4 micro-batches split 2/2. The survivors resume from the state
// they saved from memory (no rollback: at most the interrupted iteration lost), and the final
// weights equal the uninterrupted single-process run's.
TEST_F(AgentExpertParallelE2ETest, LosingANodeDropsItsExpertGroupAndTheOtherGoesOnFromMemory) {
  const std::vector<std::string> nodes = {"node-a", "node-b", "node-c", "node-d"};
  std::map<std::string, std::string> checkpoints;
  std::map<std::string, std::unique_ptr<AgentProcess>> agents;
  for (const std::string& node : nodes) {
    checkpoints[node] = TestDir("ep-checkpoints-" + node);
    agents[node] = std::make_unique<AgentProcess>(node, TestDir("ep-" + node), checkpoints[node]);
    ASSERT_TRUE(agents[node]->Start(planner_.address())) << agents[node]->log();
  }
  auto logs = [&] {
    std::string out;
    for (const std::string& node : nodes) out += node + ":\n" + agents[node]->log();
    return out;
  };
  proto::CreateJobRequest request = AgentJob(kIterations, 4);
  request.mutable_options()->set_choose_layout(true);
  request.mutable_options()->set_layout_pp(1);
  request.mutable_options()->set_layout_tp(1);
  request.mutable_options()->set_layout_dp(4);
  request.mutable_options()->set_layout_ep(2);
  proto::Job job;
  {
    auto ctx = Ctx();
    grpc::Status s = stub_->CreateJob(ctx.get(), request, &job);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  job_id_ = job.id();
  ASSERT_NE(WaitEvent([](const proto::JobEvent& e) { return e.kind() == "started"; }, 0, 60),
            nullptr)
      << Events() << logs();
  const proto::PlanVersion v1 = Get().current();
  ASSERT_TRUE(v1.result().has_layout_plan()) << v1.result().DebugString();
  const proto::LayoutPlan& l1 = v1.result().layout_plan();
  ASSERT_EQ(l1.layout().dp(), 4);
  ASSERT_EQ(l1.layout().ep(), 2);
  // The expert shard (EP rank) each node's GPU holds.
  std::map<std::string, int> ep_rank_of;
  for (const proto::RankRole& role : l1.ranks()) {
    ep_rank_of[v1.device_slots(role.rank()).node_id()] = role.ep_rank();
  }
  ASSERT_EQ(ep_rank_of.size(), 4u);
  // Training under EP for a while: a few complete checkpoints on node-c.
  const executor::ModelSpec spec = *executor::ParseModelSpec(kModel);
  auto job_dir = [&](const std::string& node) { return checkpoints[node] + "/" + job_id_; };
  ASSERT_GE(WaitForCheckpoint(job_dir("node-c"), spec, 2 * kCheckpointInterval, 60),
            2 * kCheckpointInterval)
      << Events() << logs();

  const int events_before_kill = Get().job().events_size();
  agents["node-b"]->Kill(SIGKILL);
  int64_t survivor_version = 0;
  ASSERT_TRUE(WaitJob(
      [&](const proto::GetJobResponse& r) {
        survivor_version = r.current().version();
        return r.job().excluded_nodes_size() == 1 &&
               r.current().reason_kind() == proto::PLAN_REASON_NODE_FAILURE;
      },
      30))
      << Events() << logs();
  const proto::PlanVersion v2 = Get().current();
  const proto::NodeLossOption* chosen = nullptr;
  for (const proto::NodeLossOption& o : v2.result().node_loss_options()) {
    std::printf("node-loss option %s: %s, total %.3f s%s%s\n", o.kind().c_str(),
                o.summary().c_str(), o.total_s(), o.chosen() ? " [chosen]" : "",
                o.not_offered().empty() ? "" : (" not offered: " + o.not_offered()).c_str());
    if (o.chosen()) chosen = &o;
  }
  ASSERT_NE(chosen, nullptr) << v2.result().DebugString();
  EXPECT_EQ(chosen->kind(), "drop replicas");
  EXPECT_THAT(chosen->summary(), ::testing::HasSubstr("(1 of 2 EP2 groups) go on"));
  EXPECT_EQ(chosen->moved_bytes(), 0);
  const proto::LayoutPlan& l2 = v2.result().layout_plan();
  EXPECT_EQ(l2.layout().ep(), 2);
  EXPECT_EQ(l2.layout().dp(), 2);
  EXPECT_EQ(l2.global_microbatches(), 4);
  ASSERT_EQ(v2.device_slots_size(), 2);
  for (const proto::RankRole& role : l2.ranks()) {
    const std::string& node = v2.device_slots(role.rank()).node_id();
    EXPECT_TRUE(node == "node-c" || node == "node-d") << node;
    EXPECT_EQ(role.ep_rank(), ep_rank_of[node]) << "rank " << role.rank() << " on " << node;
  }

  // The survivors resume from the state they saved from memory.
  const proto::JobEvent* resumed = WaitEvent(
      [&](const proto::JobEvent& e) {
        return e.kind() == "resumed" && e.plan_version() >= survivor_version;
      },
      events_before_kill, 90);
  ASSERT_NE(resumed, nullptr) << Events() << logs();
  const int64_t resumed_iteration = resumed->iteration();
  const proto::JobEvent* saved = WaitEvent(
      [](const proto::JobEvent& e) {
        return e.kind() == "state_saved" && (e.node_id() == "node-c" || e.node_id() == "node-d");
      },
      events_before_kill, 1);
  ASSERT_NE(saved, nullptr) << Events();
  EXPECT_EQ(resumed_iteration, saved->iteration()) << Events();
  EXPECT_GT(resumed_iteration, 2 * kCheckpointInterval) << Events();
  std::printf("EP2 group 1 went on from iteration %lld (from memory) on node-c, node-d\n",
              static_cast<long long>(resumed_iteration));

  ASSERT_NE(WaitEvent([](const proto::JobEvent& e) { return e.kind() == "completed"; },
                      events_before_kill, 180),
            nullptr)
      << Events() << logs();
  std::printf("events:\n%s", Events().c_str());
  WaitForCheckpoint(job_dir("node-c"), spec, kIterations, 30);
  ExpectUninterruptedWeights(job_dir("node-c"));
}

}  // namespace
}  // namespace octopipe::agent_e2e
