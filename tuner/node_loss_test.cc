// Pins SurvivorOptions and CostSwitch (tuner/node_loss.h) on two 2-GPU nodes losing one:
// replicas within nodes leave "drop replicas" (the survivor takes the whole batch on its own
// GPUs, nothing crosses nodes); replicas across nodes leave "re-partition" (each broken replica
// shrinks to its GPU on the live node, fetching the layers it lacks over the inter-node link);
// an unchanged layout switches in restart_s alone; a request that does not describe the layout
// is an error naming the field. With expert parallelism (a Mixtral cut to two blocks, replicas
// of one GPU each on nodes of one GPU): "drop replicas" keeps the complete EP groups, each
// replica with its EP rank (nothing moves), and a valid layout SimulateLayout predicts; one EP
// group (DP2 x EP2) or no complete group left offers nothing.
#include "tuner/node_loss.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
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

// 1F1B over `devices` devices, layers split evenly, `m` micro-batches.
Plan EvenPlan(const ModelGraph& model, int devices, int m) {
  absl::StatusOr<GeneratedSchedule> g = GenerateSchedule(ScheduleKind::k1F1B, devices, 1, m);
  EXPECT_TRUE(g.ok()) << g.status();
  Plan plan;
  plan.schedule_name = std::string(ScheduleKindName(ScheduleKind::k1F1B));
  plan.num_devices = devices;
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
  p.plan = EvenPlan(model, 2, m);
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

// Mixtral 8x7B cut to its embedding, two blocks (attention + MoE of 8 experts) and head: MoE
// layers whose experts EP shards, small enough for one H100 per replica.
ModelGraph MoeModel() {
  absl::StatusOr<ModelGraph> m = ZooModel("mixtral-8x7b", TrainingOptions{});
  EXPECT_TRUE(m.ok()) << m.status();
  ModelGraph out = *m;
  out.layers.assign(m->layers.begin(), m->layers.begin() + 5);
  out.layers.push_back(m->layers.back());
  return out;
}

// Nodes "n0" .. "n<count-1>" of one H100 each.
Cluster OneGpuNodes(int count) {
  Cluster out = TwoNodes(false);
  Node n = out.nodes.at(0);
  n.num_devices = 1;
  out.nodes.clear();
  for (int i = 0; i < count; ++i) {
    n.name = absl::StrCat("n", i);
    out.nodes.push_back(n);
  }
  return out;
}

// `cluster` without the nodes named in `lost`.
Cluster Without(Cluster cluster, const std::vector<std::string>& lost) {
  std::vector<Node> kept;
  for (const Node& n : cluster.nodes) {
    if (std::find(lost.begin(), lost.end(), n.name) == lost.end()) kept.push_back(n);
  }
  cluster.nodes = kept;
  return cluster;
}

// PP1 x DP`dp` x EP`ep` of `model`: replica r on rank r, the GPU of node "n<r>", `m`
// micro-batches each (EP groups: replicas [g·ep, (g+1)·ep)).
NodeLossRequest ExpertRequest(const ModelGraph& model, int dp, int ep, int m) {
  NodeLossRequest req;
  LayoutPlan& l = req.current;
  l.layout = ParallelLayout{1, 1, ep, dp, true};
  l.num_ranks = dp;
  l.global_microbatches = dp * m;
  LayoutPipelinePlan p;
  p.plan = EvenPlan(model, 1, m);
  for (int r = 0; r < dp; ++r) {
    PipelineReplica rep;
    rep.dp_rank = r;
    rep.first_microbatch = r * m;
    rep.device_ranks = {r};
    p.replicas.push_back(rep);
    req.current_slots.push_back({absl::StrCat("n", r), 0});
  }
  l.pipelines.push_back(p);
  req.remaining_iterations = 100;
  req.restart_s = 2;
  return req;
}

// The "drop replicas" option of `options`, or null.
const NodeLossOption* DropReplicas(const std::vector<NodeLossOption>& options) {
  for (const NodeLossOption& o : options) {
    if (o.kind == "drop replicas") return &o;
  }
  return nullptr;
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

  // Expert parallelism with one EP group (DP2 x EP2, replica 1's node lost): the lost replica
  // takes its experts' shard with it and no complete group is left; only a new layout.
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

TEST(NodeLossTest, ExpertParallelismDropsTheBrokenEpGroupAndKeepsTheCompleteOne) {
  const ModelGraph model = MoeModel();
  // DP4 x EP2: EP groups {0, 1} on n0, n1 and {2, 3} on n2, n3. Node n0 (replica 0) is lost:
  // group 0 goes (replica 1's GPU stays idle), group 1 goes on as dp ranks 0 and 1.
  const NodeLossRequest req = ExpertRequest(model, /*dp=*/4, /*ep=*/2, /*m=*/2);
  ASSERT_TRUE(ValidateLayoutPlan(req.current, model.num_layers()).ok());
  const Cluster left = Without(OneGpuNodes(4), {"n0"});
  absl::StatusOr<std::vector<NodeLossOption>> options =
      SurvivorOptions(model, left, CostModel(), Budget(), req);
  ASSERT_TRUE(options.ok()) << options.status();
  ASSERT_EQ(options->size(), 1u);  // re-partition is never offered with EP
  const NodeLossOption* o = DropReplicas(*options);
  ASSERT_NE(o, nullptr);
  EXPECT_NE(o->summary.find("2 of 4 replicas (1 of 2 EP2 groups)"), std::string::npos)
      << o->summary;
  EXPECT_EQ(o->plan.layout.ep, 2);
  EXPECT_EQ(o->plan.layout.dp, 2);
  EXPECT_EQ(o->plan.num_replicas(), 2);
  EXPECT_EQ(o->slots, (std::vector<GpuSlot>{{"n2", 0}, {"n3", 0}}));  // group 1's GPUs
  // The global batch is kept, split evenly: 4 micro-batches per replica (one pipeline).
  EXPECT_EQ(o->plan.global_microbatches, 8);
  int total = 0;
  for (const LayoutPipelinePlan& p : o->plan.pipelines) {
    total += p.plan.num_microbatches * static_cast<int>(p.replicas.size());
  }
  EXPECT_EQ(total, 8);
  ASSERT_EQ(o->plan.pipelines.size(), 1u);
  EXPECT_EQ(o->plan.pipelines[0].plan.num_microbatches, 4);
  // Each replica keeps its EP rank (old replicas 2 and 3: EP ranks 0 and 1), so its experts'
  // shard: nothing moves, the switch is the restart alone.
  const std::vector<RankRole> roles = RankRoles(o->plan);
  ASSERT_EQ(roles.size(), 2u);
  EXPECT_EQ(roles[0].ep_rank, 0);
  EXPECT_EQ(roles[1].ep_rank, 1);
  EXPECT_EQ(o->moved_bytes, 0);
  EXPECT_EQ(o->switch_s, req.restart_s);
  ASSERT_EQ(o->tunes.size(), 1u);
  EXPECT_TRUE(o->tunes[0].feasible);
  EXPECT_GT(o->predicted.iteration_time_s, 0);
  EXPECT_DOUBLE_EQ(o->total_s, o->switch_s + 100 * o->predicted.iteration_time_s);

  // Deterministic for the seed.
  absl::StatusOr<std::vector<NodeLossOption>> again =
      SurvivorOptions(model, left, CostModel(), Budget(), req);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->size(), 1u);
  EXPECT_EQ(again->front().predicted.iteration_time_s, o->predicted.iteration_time_s);

  // A node of each group lost: no complete EP group survives, nothing to drop.
  absl::StatusOr<std::vector<NodeLossOption>> none = SurvivorOptions(
      model, Without(OneGpuNodes(4), {"n0", "n3"}), CostModel(), Budget(), req);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
}

TEST(NodeLossTest, ExpertParallelismWithOneEpGroupOffersNoDropReplicas) {
  const ModelGraph model = MoeModel();
  // DP2 x EP2: one EP group, the experts not replicated. Losing n1 breaks the only group.
  const NodeLossRequest req = ExpertRequest(model, /*dp=*/2, /*ep=*/2, /*m=*/4);
  ASSERT_TRUE(ValidateLayoutPlan(req.current, model.num_layers()).ok());
  absl::StatusOr<std::vector<NodeLossOption>> options =
      SurvivorOptions(model, Without(OneGpuNodes(2), {"n1"}), CostModel(), Budget(), req);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(DropReplicas(*options), nullptr);
  EXPECT_TRUE(options->empty());
}

TEST(NodeLossTest, ExpertParallelismDropReplicasPlanValidatesAndSimulates) {
  const ModelGraph model = MoeModel();
  // DP6 x EP2, one micro-batch per replica (global 6): n2 (replica 2, group 1) is lost.
  // Groups 0 and 2 go on; the 3 micro-batches per EP rank split 2/1 over them, so group 0's
  // replicas take 2 each and group 2's (now dp ranks 2 and 3) 1 each: two pipelines.
  const NodeLossRequest req = ExpertRequest(model, /*dp=*/6, /*ep=*/2, /*m=*/1);
  const Cluster left = Without(OneGpuNodes(6), {"n2"});
  absl::StatusOr<std::vector<NodeLossOption>> options =
      SurvivorOptions(model, left, CostModel(), Budget(), req);
  ASSERT_TRUE(options.ok()) << options.status();
  const NodeLossOption* o = DropReplicas(*options);
  ASSERT_NE(o, nullptr);
  const LayoutPlan& plan = o->plan;
  EXPECT_TRUE(ValidateLayoutPlan(plan, model.num_layers()).ok())
      << ValidateLayoutPlan(plan, model.num_layers());
  EXPECT_TRUE(CheckLayoutAgainstModel(plan.layout, model).ok());
  EXPECT_EQ(plan.layout.ep, 2);
  EXPECT_EQ(plan.layout.dp, 4);
  EXPECT_EQ(plan.layout.dp % plan.layout.ep, 0);
  EXPECT_EQ(o->slots, (std::vector<GpuSlot>{{"n0", 0}, {"n1", 0}, {"n4", 0}, {"n5", 0}}));
  ASSERT_EQ(plan.pipelines.size(), 2u);
  std::vector<int> share_of_dp(4, 0);
  for (const LayoutPipelinePlan& p : plan.pipelines) {
    for (const PipelineReplica& rep : p.replicas) {
      share_of_dp[rep.dp_rank] = p.plan.num_microbatches;
    }
  }
  EXPECT_EQ(share_of_dp, (std::vector<int>{2, 2, 1, 1}));
  // Every rank keeps its GPU and its EP rank: nothing moves.
  const std::vector<RankRole> roles = RankRoles(plan);
  for (int r = 0; r < plan.num_ranks; ++r) EXPECT_EQ(roles[r].ep_rank, r % 2) << r;
  EXPECT_EQ(o->moved_bytes, 0);
  EXPECT_EQ(o->switch_s, req.restart_s);
  // SimulateLayout predicts the option as it was assembled.
  absl::StatusOr<LayoutSimulation> sim = SimulateLayout(model, o->cluster, CostModel(), plan);
  ASSERT_TRUE(sim.ok()) << sim.status();
  EXPECT_EQ(sim->iteration_time_s, o->predicted.iteration_time_s);
  EXPECT_GT(sim->iteration_time_s, 0);
  EXPECT_GT(sim->dp_sync_total_s, 0);  // experts summed over each EP rank's two replicas
}

}  // namespace
}  // namespace octopipe
