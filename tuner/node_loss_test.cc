// Pins SurvivorOptions and CostSwitch (tuner/node_loss.h) on two 2-GPU nodes losing one:
// replicas within nodes leave "drop replicas" (the survivor takes the whole batch on its own
// GPUs, nothing crosses nodes); replicas across nodes leave "re-partition" (each broken replica
// shrinks to its GPU on the live node, fetching the layers it lacks over the inter-node link);
// an unchanged layout switches in restart_s alone; expert parallelism offers nothing; a request
// that does not describe the layout is an error naming the field.
#include "tuner/node_loss.h"

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cluster.h"
#include "core/cluster_presets.h"
#include "core/cost_model.h"
#include "core/layout_plan.h"
#include "core/model_graph.h"
#include "core/model_zoo.h"
#include "core/plan.h"
#include "gtest/gtest.h"
#include "simulator/schedules.h"
#include "tuner/layout_simulation.h"
#include "tuner/tuner.h"

namespace octopipe {
namespace {

ModelGraph Model() {
  absl::StatusOr<ModelGraph> m = ZooModel("mamba2-2.7b", TrainingOptions{});
  EXPECT_TRUE(m.ok()) << m.status();
  return *m;
}

// Two nodes "a" and "b" of two H100s each; `only_a`: node a alone (b lost).
Cluster TwoNodes(bool only_a) {
  absl::StatusOr<Cluster> c = ClusterPreset("h100-1node");
  EXPECT_TRUE(c.ok()) << c.status();
  Cluster out = *c;
  Node n = out.nodes.at(0);
  n.num_devices = 2;
  out.nodes.clear();
  for (const char* name : {"a", "b"}) {
    n.name = name;
    out.nodes.push_back(n);
    if (only_a) break;
  }
  out.inter_node_link = LinkSpec{25e9, 5e-6};
  return out;
}

// 1F1B over 2 devices, layers split evenly, `m` micro-batches.
Plan TwoStagePlan(const ModelGraph& model, int m) {
  absl::StatusOr<GeneratedSchedule> g = GenerateSchedule(ScheduleKind::k1F1B, 2, 1, m);
  EXPECT_TRUE(g.ok()) << g.status();
  Plan plan;
  plan.schedule_name = std::string(ScheduleKindName(ScheduleKind::k1F1B));
  plan.num_devices = 2;
  plan.num_microbatches = m;
  plan.stages = EvenPartition(model.num_layers(), g->num_stages);
  for (int s = 0; s < g->num_stages; ++s) plan.stages[s].device = g->stage_device[s];
  plan.schedule = g->schedule;
  return plan;
}

// PP2 x DP2 on ranks a0 a1 b0 b1: `within_nodes` puts replica r on node r (ranks 2r, 2r+1);
// otherwise replica r's device j is rank r + 2j (pp outer: each replica on both nodes).
NodeLossRequest Request(const ModelGraph& model, bool within_nodes, int ep = 1) {
  const int m = 4;
  NodeLossRequest req;
  LayoutPlan& l = req.current;
  l.layout = ParallelLayout{2, 1, ep, 2, !within_nodes};
  l.num_ranks = 4;
  l.global_microbatches = 2 * m;
  LayoutPipelinePlan p;
  p.plan = TwoStagePlan(model, m);
  for (int r = 0; r < 2; ++r) {
    PipelineReplica rep;
    rep.dp_rank = r;
    rep.first_microbatch = r * m;
    for (int j = 0; j < 2; ++j) rep.device_ranks.push_back(within_nodes ? 2 * r + j : r + 2 * j);
    p.replicas.push_back(rep);
  }
  l.pipelines.push_back(p);
  req.current_slots = {{"a", 0}, {"a", 1}, {"b", 0}, {"b", 1}};
  req.remaining_iterations = 100;
  req.restart_s = 2;
  return req;
}

TunerOptions Budget() {
  TunerOptions t;
  t.time_budget_s = 0.5;
  t.threads = 1;
  t.seed = 7;
  return t;
}

TEST(NodeLossTest, ReplicasWithinNodesLeaveDropReplicasOnTheSurvivorsOwnGpus) {
  const ModelGraph model = Model();
  const NodeLossRequest req = Request(model, /*within_nodes=*/true);
  ASSERT_TRUE(ValidateLayoutPlan(req.current, model.num_layers()).ok());
  absl::StatusOr<std::vector<NodeLossOption>> options =
      SurvivorOptions(model, TwoNodes(true), CostModel(), Budget(), req);
  ASSERT_TRUE(options.ok()) << options.status();
  ASSERT_EQ(options->size(), 1u);  // no broken replica kept a GPU: nothing to re-partition
  const NodeLossOption& o = options->front();
  EXPECT_EQ(o.kind, "drop replicas");
  EXPECT_NE(o.summary.find("1 of 2 replicas"), std::string::npos) << o.summary;
  EXPECT_EQ(o.plan.num_replicas(), 1);
  EXPECT_EQ(o.plan.global_microbatches, 8);
  ASSERT_EQ(o.plan.pipelines.size(), 1u);
  EXPECT_EQ(o.plan.pipelines[0].plan.num_microbatches, 8);  // the whole global batch
  EXPECT_EQ(o.slots, (std::vector<GpuSlot>{{"a", 0}, {"a", 1}}));
  ASSERT_EQ(o.cluster.nodes.size(), 1u);
  EXPECT_EQ(o.cluster.nodes[0].name, "a");
  ASSERT_EQ(o.tunes.size(), 1u);
  EXPECT_TRUE(o.tunes[0].feasible);
  EXPECT_GT(o.predicted.iteration_time_s, 0);
  // Every layer was on node a: at most a move between its two GPUs, never across nodes.
  EXPECT_GE(o.switch_s, req.restart_s);
  const LinkSpec intra = o.cluster.nodes[0].intra_node_link;
  EXPECT_LE(o.switch_s - req.restart_s, o.moved_bytes / intra.bandwidth + intra.latency_s + 1e-12);
  EXPECT_DOUBLE_EQ(o.total_s, o.switch_s + 100 * o.predicted.iteration_time_s);
}

TEST(NodeLossTest, ReplicasAcrossNodesLeaveReplicasRepartitionedOverTheirLiveGpus) {
  const ModelGraph model = Model();
  const NodeLossRequest req = Request(model, /*within_nodes=*/false);
  absl::StatusOr<std::vector<NodeLossOption>> options =
      SurvivorOptions(model, TwoNodes(true), CostModel(), Budget(), req);
  ASSERT_TRUE(options.ok()) << options.status();
  ASSERT_EQ(options->size(), 1u);  // no replica survived whole: nothing to drop
  const NodeLossOption& o = options->front();
  EXPECT_EQ(o.kind, "re-partition");
  EXPECT_EQ(o.plan.num_replicas(), 2);
  for (const LayoutPipelinePlan& p : o.plan.pipelines) EXPECT_EQ(p.plan.num_devices, 1);
  int total = 0;
  for (const LayoutPipelinePlan& p : o.plan.pipelines) {
    total += p.plan.num_microbatches * static_cast<int>(p.replicas.size());
  }
  EXPECT_EQ(total, 8);  // the global batch is kept
  EXPECT_EQ(o.slots, (std::vector<GpuSlot>{{"a", 0}, {"a", 1}}));
  // Node a held only the first stage's layers: the second stage's come over the inter-node
  // link (b's memory is gone: a peer's or a checkpoint).
  EXPECT_GT(o.moved_bytes, 0);
  const LinkSpec inter = TwoNodes(false).inter_node_link;
  EXPECT_GE(o.switch_s - req.restart_s, o.moved_bytes / inter.bandwidth * 0.999);
}

TEST(NodeLossTest, AnUnchangedLayoutSwitchesInTheRestartAlone) {
  const ModelGraph model = Model();
  const NodeLossRequest req = Request(model, /*within_nodes=*/true);
  NodeLossOption same;
  same.plan = req.current;
  same.slots = req.current_slots;
  same.predicted.iteration_time_s = 1.5;
  CostSwitch(model, TwoNodes(false), CostModel(), req, &same);
  EXPECT_EQ(same.moved_bytes, 0);
  EXPECT_EQ(same.switch_s, req.restart_s);
  EXPECT_DOUBLE_EQ(same.total_s, req.restart_s + 100 * 1.5);

  // The replicas swap nodes: every layer crosses the inter-node link.
  NodeLossOption swapped = same;
  swapped.slots = {{"b", 0}, {"b", 1}, {"a", 0}, {"a", 1}};
  CostSwitch(model, TwoNodes(false), CostModel(), req, &swapped);
  EXPECT_EQ(swapped.moved_bytes, 0);  // each node held both stages: a move within the node
  swapped.slots = {{"a", 1}, {"a", 0}, {"b", 1}, {"b", 0}};
  CostSwitch(model, TwoNodes(false), CostModel(), req, &swapped);
  EXPECT_GT(swapped.moved_bytes, 0);  // stages swap GPUs on each node
  const LinkSpec intra = TwoNodes(false).nodes[0].intra_node_link;
  EXPECT_NEAR(swapped.switch_s - req.restart_s, swapped.moved_bytes / intra.bandwidth +
                                                    intra.latency_s, 1e-9);
}

TEST(NodeLossTest, ExpertParallelismAndBadRequests) {
  const ModelGraph model = Model();
  NodeLossRequest req = Request(model, /*within_nodes=*/true);
  req.current_slots.pop_back();
  absl::StatusOr<std::vector<NodeLossOption>> bad =
      SurvivorOptions(model, TwoNodes(true), CostModel(), Budget(), req);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_NE(bad.status().message().find("current_slots: 3 slots for 4 ranks"), std::string::npos)
      << bad.status();

  // Expert parallelism: a lost replica takes its experts' shard with it; only a new layout.
  req = Request(model, /*within_nodes=*/true, /*ep=*/2);
  absl::StatusOr<std::vector<NodeLossOption>> ep =
      SurvivorOptions(model, TwoNodes(true), CostModel(), Budget(), req);
  ASSERT_TRUE(ep.ok()) << ep.status();
  EXPECT_TRUE(ep->empty());

  // Everything lost: nothing survives.
  req = Request(model, /*within_nodes=*/true);
  Cluster none = TwoNodes(true);
  none.nodes[0].name = "c";
  absl::StatusOr<std::vector<NodeLossOption>> empty =
      SurvivorOptions(model, none, CostModel(), Budget(), req);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->empty());
}

}  // namespace
}  // namespace octopipe
