// Pins the layout search (tuner/layout.h): what it chooses where the answer is known (free
// communication: pure data parallelism; memory too small for one replica per GPU: pipeline or
// tensor parallelism; DeepSeek-V3's experts: expert parallelism), that a fixed layout is kept,
// how ranks map to GPUs, and the errors naming the field.
#include "tuner/layout.h"

#include <cmath>

#include "core/clock.h"
#include "core/cluster.h"
#include "core/cluster_presets.h"
#include "core/cost_model.h"
#include "core/model_zoo.h"
#include "core/synthetic_model.h"
#include "gtest/gtest.h"

namespace octopipe {
namespace {

// The budget counted in clock reads (1e-4 s per read, ten times `plan --budget_clock=reads`), so
// that every machine and load gets the same search (a wall-clock budget let a loaded machine
// end DeepSeek-V3's search on 256 GPUs before it found a plan that fits).
TunerOptions Options(double budget = 2) {
  TunerOptions o;
  o.time_budget_s = budget;
  o.seed = 1;
  o.threads = 1;
  o.clock = std::make_shared<ReadCountingClock>(1e-4);
  return o;
}

const LayoutConsidered* Find(const LayoutResult& r, const std::string& layout) {
  for (const LayoutConsidered& c : r.considered) {
    if (c.layout.ToString() == layout) return &c;
  }
  return nullptr;
}

TEST(LayoutTest, FreeCommunicationAndMemoryGivePureDataParallelism) {
  // 8 identical unit layers (F = B = W = 1 s), 8 devices with free links and no memory limit,
  // 8 micro-batches per iteration: 8 replicas of one micro-batch each take 24 s, no bubble;
  // any pipeline has a bubble and any TP adds replicas' work to fewer ranks.
  absl::StatusOr<ModelGraph> model = ParseSyntheticModel("layers=8,f=1,b=1,w=1");
  ASSERT_TRUE(model.ok()) << model.status();
  LayoutRequest req;
  req.global_microbatches = 8;
  absl::StatusOr<LayoutResult> r = TuneLayout(*model, SyntheticCluster(8), CostModel(), Options(), req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->feasible);
  EXPECT_EQ("PP1 x TP1 x EP1 x DP8 (pp outer)", r->layout.ToString());
  EXPECT_EQ(1, r->microbatches);
  EXPECT_DOUBLE_EQ(24.0, r->iteration_time_s);
  EXPECT_EQ(0, r->dp_sync_s);
  ASSERT_EQ(1u, r->pipelines.size());
  EXPECT_EQ(8u, r->pipelines[0].replicas.size());
  // PP8 x DP1: 8 micro-batches through 8 stages; its bound (work 24 s per device) does not
  // beat 24 s, so it is pruned or tuned and loses.
  const LayoutConsidered* pp8 = Find(*r, "PP8 x TP1 x EP1 x DP1 (pp outer)");
  ASSERT_NE(pp8, nullptr);
  EXPECT_NE("chosen", pp8->outcome);
  EXPECT_GE(pp8->bound_s, 24.0);
}

Cluster SmallMemoryNode(double memory_bytes) {
  Cluster c = *ClusterPreset("h100-1node");
  for (HardwareSpec& h : c.hardware) h.memory_bytes = memory_bytes;
  return c;
}

TEST(LayoutTest, ModelThatDoesNotFitOnOneGpuIsSplitByPipelineOrTensorParallelism) {
  TrainingOptions t;
  t.num_microbatches = 16;
  absl::StatusOr<ModelGraph> model = ZooModel("llama3-8b", t);
  ASSERT_TRUE(model.ok()) << model.status();
  // 30 GB GPUs (26 GB usable): 8B parameters need 2 + 2 bytes each before any optimizer state.
  absl::StatusOr<LayoutResult> r =
      TuneLayout(*model, SmallMemoryNode(30e9), CostModel(), Options(3), LayoutRequest{});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->feasible);
  EXPECT_GE(r->layout.pp * r->layout.tp, 2) << r->layout.ToString();
  const LayoutConsidered* dp8 = Find(*r, "PP1 x TP1 x EP1 x DP8 (pp outer)");
  ASSERT_NE(dp8, nullptr);
  EXPECT_EQ("pruned: memory", dp8->outcome);
  EXPECT_GT(r->tokens_per_s, 0);
  // Every device of the chosen plan fits.
  for (const DeviceResult& d : r->pipelines[0].tune.predicted.devices) EXPECT_TRUE(d.fits_memory);
}

// The ordering estimate (1F1B over the layers' fastest costs) counts the recompute memory
// forces: 8 unit layers (F = B = W = 1 s) on PP8, 8 micro-batches: 24 / 8 x 15 = 45 s without
// recompute; every stage recomputing (asked for) adds F: 32 / 8 x 15 = 60 s; activations of
// 1 GB per layer and micro-batch on 6 GB devices (the first device holds 8 micro-batches of
// its one layer: 8 GB) need a quarter of the layers recomputed: (24 + 8 / 4) / 8 x 15 = 48.75 s.
TEST(LayoutTest, TheEstimateCountsTheRecomputeThatMemoryForces) {
  absl::StatusOr<ModelGraph> model = ParseSyntheticModel("layers=8,f=1,b=1,w=1");
  ASSERT_TRUE(model.ok()) << model.status();
  LayoutRequest req;
  req.pp = 8;
  req.tp = 1;
  req.dp = 1;
  req.global_microbatches = 8;
  auto estimate = [&](const ModelGraph& m, const Cluster& c, const TunerOptions& o) {
    absl::StatusOr<LayoutResult> r = TuneLayout(m, c, CostModel(), o, req);
    EXPECT_TRUE(r.ok()) << r.status();
    const LayoutConsidered* pp8 = r.ok() ? Find(*r, "PP8 x TP1 x EP1 x DP1 (pp outer)") : nullptr;
    EXPECT_NE(pp8, nullptr);
    return pp8 != nullptr ? pp8->estimate_s : -1.0;
  };
  EXPECT_DOUBLE_EQ(45.0, estimate(*model, SyntheticCluster(8), Options(0.5)));
  TunerOptions full = Options(0.5);
  full.constraints.require_recompute = true;
  EXPECT_DOUBLE_EQ(60.0, estimate(*model, SyntheticCluster(8), full));

  ModelGraph heavy = *model;
  for (Layer& l : heavy.layers) {
    l.measured.activation_bytes = 1e9;
    l.measured.input_bytes = 0;
  }
  Cluster small = SyntheticCluster(8);
  small.memory_reserve_bytes = 0;
  small.hardware[0].memory_bytes = 6e9;
  EXPECT_DOUBLE_EQ(48.75, estimate(heavy, small, Options(0.5)));
  // Without recompute allowed it cannot fit: ranked last.
  TunerOptions none = Options(0.5);
  none.constraints.allow_recompute = false;
  EXPECT_TRUE(std::isinf(estimate(heavy, small, none)));
}

TEST(LayoutTest, FixedLayoutIsKeptAndRanksMapToGpusInMegatronOrder) {
  absl::StatusOr<ModelGraph> model = ParseSyntheticModel("layers=8,f=1,b=1,w=1");
  ASSERT_TRUE(model.ok());
  LayoutRequest req;
  req.pp = 2;
  req.tp = 2;
  req.global_microbatches = 4;
  absl::StatusOr<LayoutResult> r = TuneLayout(*model, SyntheticCluster(8), CostModel(), Options(), req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(2, r->layout.pp);
  EXPECT_EQ(2, r->layout.tp);
  EXPECT_EQ(2, r->layout.dp);
  EXPECT_EQ(2, r->microbatches);
  EXPECT_EQ(2, r->model.training.tp_degree);
  EXPECT_EQ(2, r->model.training.zero_degree);  // optimizer sharded over DP
  ASSERT_EQ(1u, r->pipelines.size());
  const auto& gpus = r->pipelines[0].device_gpus;
  ASSERT_EQ(2u, gpus.size());
  if (r->layout.pp_outer) {
    // TP innermost, then DP, then PP: stage 1 of replica 0 is TP group 0 + DP(2) * 1 = 2.
    EXPECT_EQ((std::vector<int>{0, 1}), gpus[0]);
    EXPECT_EQ((std::vector<int>{4, 5}), gpus[1]);
  } else {
    EXPECT_EQ((std::vector<int>{0, 1}), gpus[0]);
    EXPECT_EQ((std::vector<int>{2, 3}), gpus[1]);
  }
}

// A split head runs only with TP 1 and replicas of one pipeline: a TP2 layout of a model with a
// large head keeps it whole (the plan file simulate and train load), and asking for the split
// with TP fixed at 2 is refused naming why.
TEST(LayoutTest, TensorParallelLayoutsKeepTheHeadWhole) {
  absl::StatusOr<ModelGraph> model = ZooModel("llama3-8b", TrainingOptions{});
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<Cluster> cluster = ClusterPreset("h100-4nodes");
  ASSERT_TRUE(cluster.ok());
  LayoutRequest req;  // as the free search chose it (the head was split before the fix)
  req.pp = 4;
  req.tp = 2;
  req.dp = 4;
  req.global_microbatches = 16;
  absl::StatusOr<LayoutResult> r = TuneLayout(*model, *cluster, CostModel(), Options(1), req);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->layout.tp, 2);
  for (const LayoutPipeline& p : r->pipelines) EXPECT_FALSE(p.tune.plan.vocab_parallel);
  EXPECT_TRUE(ValidateLayoutPlan(ToLayoutPlan(*r), model->num_layers()).ok());

  TunerOptions on = Options(1);
  on.vocab_parallel = VocabParallelMode::kOn;
  absl::StatusOr<LayoutResult> refused = TuneLayout(*model, *cluster, CostModel(), on, req);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("cannot split the head"), std::string::npos)
      << refused.status();
}

TEST(LayoutTest, RequestErrorsNameTheField) {
  absl::StatusOr<ModelGraph> model = ParseSyntheticModel("layers=8,f=1,b=1,w=1");
  ASSERT_TRUE(model.ok());
  LayoutRequest req;
  req.pp = 3;
  absl::StatusOr<LayoutResult> r = TuneLayout(*model, SyntheticCluster(8), CostModel(), Options(), req);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(absl::StatusCode::kInvalidArgument, r.status().code());
  EXPECT_EQ("layout.pp: 3 does not divide 8 GPUs", r.status().message());
  req = LayoutRequest{};
  req.ep = 2;  // no MoE layer
  r = TuneLayout(*model, SyntheticCluster(8), CostModel(), Options(), req);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("layout.ep: 2"), std::string::npos);
}

// Attention with 12 heads: TP 8 cannot split it. Asked for, it is an error naming the field;
// left free, the search never proposes it.
TEST(LayoutTest, TensorParallelismTheHeadsDoNotAllowIsRefusedAndNeverProposed) {
  TrainingOptions t;
  t.seq_len = 2048;
  t.micro_batch_size = 1;
  t.num_microbatches = 8;
  absl::StatusOr<ModelGraph> model = ZooModel("llama3-8b", t);
  ASSERT_TRUE(model.ok()) << model.status();
  for (Layer& l : model->layers) {
    if (l.kind == LayerKind::kAttention) l.dims.heads = l.dims.kv_heads = 12;
  }
  const Cluster cluster = *ClusterPreset("h100-1node");
  LayoutRequest req;
  req.tp = 8;
  absl::StatusOr<LayoutResult> r = TuneLayout(*model, cluster, CostModel(), Options(), req);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(r.status().message()).find("layout.tp"), std::string::npos) << r.status();
  EXPECT_NE(std::string(r.status().message()).find("heads = 12"), std::string::npos)
      << r.status();
  r = TuneLayout(*model, cluster, CostModel(), Options(), LayoutRequest{});
  ASSERT_TRUE(r.ok()) << r.status();
  for (const LayoutConsidered& c : r->considered) {
    EXPECT_NE(c.layout.tp, 8) << c.layout.ToString();
  }
}

Cluster H100Nodes(int nodes) {
  Cluster c = *ClusterPreset("h100-1node");
  const Node node = c.nodes[0];
  c.nodes.clear();
  for (int i = 0; i < nodes; ++i) {
    c.nodes.push_back(node);
    c.nodes.back().name = "node" + std::to_string(i);
  }
  c.name = "h100-" + std::to_string(nodes) + "nodes";
  return c;
}

// The search screens up to 2 x max_tuned layouts, then tunes the fastest on: with max_tuned 1
// on 16 GPUs at most two layouts are tuned, and the chosen one is predicted no slower than any
// other screened.
TEST(LayoutTest, TwoLayoutsScreenedPerMaxTunedAndTheFastestTunedOn) {
  absl::StatusOr<ModelGraph> model = ZooModel("llama3-8b", TrainingOptions{});
  ASSERT_TRUE(model.ok()) << model.status();
  LayoutRequest req;
  req.global_microbatches = 64;
  req.max_tuned = 1;
  absl::StatusOr<LayoutResult> r =
      TuneLayout(*model, H100Nodes(2), CostModel(), Options(2), req);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->feasible);
  int tuned = 0;
  const LayoutConsidered* chosen = nullptr;
  for (const LayoutConsidered& c : r->considered) {
    if (c.outcome == "tuned" || c.outcome.rfind("chosen", 0) == 0) ++tuned;
    if (c.outcome.rfind("chosen", 0) == 0) chosen = &c;
  }
  EXPECT_EQ(tuned, 2);
  ASSERT_NE(chosen, nullptr);
  for (const LayoutConsidered& c : r->considered) {
    if (c.outcome == "tuned") {
      EXPECT_LE(chosen->iteration_s, c.iteration_s) << c.layout.ToString();
    }
  }
}

// With TP filling each node, a layout's two rank orders put its DP and PP traffic on the same
// links: nothing before tuning tells them apart, so only the first is tuned.
TEST(LayoutTest, TheOtherRankOrderOfALayoutAlikeInEverythingIsNotTunedAgain) {
  absl::StatusOr<ModelGraph> model = ZooModel("llama3-8b", TrainingOptions{});
  ASSERT_TRUE(model.ok()) << model.status();
  LayoutRequest req;
  req.global_microbatches = 16;
  req.pp = 2;
  req.tp = 8;
  req.dp = 2;
  absl::StatusOr<LayoutResult> r =
      TuneLayout(*model, H100Nodes(4), CostModel(), Options(1), req);
  ASSERT_TRUE(r.ok()) << r.status();
  const LayoutConsidered* outer = Find(*r, "PP2 x TP8 x EP1 x DP2 (pp outer)");
  const LayoutConsidered* inner = Find(*r, "PP2 x TP8 x EP1 x DP2 (pp inner)");
  ASSERT_NE(outer, nullptr);
  ASSERT_NE(inner, nullptr);
  EXPECT_EQ(outer->estimate_s, inner->estimate_s);
  EXPECT_EQ(outer->outcome.rfind("chosen", 0), 0u) << outer->outcome;
  EXPECT_EQ(inner->outcome, "not tuned: as the other rank order");
}

TEST(LayoutTest, DeepSeekV3GetsAFeasiblePlanOn256GpusThroughExpertParallelism) {
  absl::StatusOr<ModelGraph> model = ZooModel("deepseek-v3", TrainingOptions{});
  ASSERT_TRUE(model.ok()) << model.status();
  LayoutRequest req;
  req.global_microbatches = 1024;
  req.max_tuned = 1;
  absl::StatusOr<LayoutResult> r =
      TuneLayout(*model, H100Nodes(32), CostModel(), Options(3), req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->feasible) << r->layout.ToString();
  EXPECT_EQ(256, r->layout.gpus());
  // Expert parallelism is what makes the expert weights fit without TP: PP32 x DP8 does not
  // fit with every expert on every rank, and does with them split over two.
  const LayoutConsidered* ep1 = Find(*r, "PP32 x TP1 x EP1 x DP8 (pp outer)");
  const LayoutConsidered* ep2 = Find(*r, "PP32 x TP1 x EP2 x DP8 (pp outer)");
  ASSERT_NE(ep1, nullptr);
  ASSERT_NE(ep2, nullptr);
  EXPECT_EQ("pruned: memory", ep1->outcome);
  EXPECT_NE("pruned: memory", ep2->outcome);
  // Every TP1 x EP1 layout is too big.
  for (const LayoutConsidered& c : r->considered) {
    if (c.layout.ep == 1 && c.layout.tp == 1) {
      EXPECT_EQ("pruned: memory", c.outcome) << c.layout.ToString();
    }
  }
}

TEST(LayoutTest, MixedClusterIsNotOneDeepPipelineAndEveryReplicaIsAccountedFor) {
  TrainingOptions t;
  t.num_microbatches = 32;
  absl::StatusOr<ModelGraph> model = ZooModel("nemotron-h-8b", t);
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<LayoutResult> r = TuneLayout(*model, *ClusterPreset("mixed-h100-a100"),
                                              CostModel(), Options(3), LayoutRequest{});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->feasible);
  EXPECT_EQ(32, r->layout.gpus());
  EXPECT_LT(r->layout.pp, 32) << r->layout.ToString();
  int replicas = 0;
  for (const LayoutPipeline& p : r->pipelines) {
    replicas += static_cast<int>(p.replicas.size());
    ASSERT_EQ(static_cast<size_t>(r->layout.pp), p.device_gpus.size());
    for (const auto& g : p.device_gpus) EXPECT_EQ(static_cast<size_t>(r->layout.tp), g.size());
    EXPECT_EQ(r->layout.pp, p.cluster.num_devices());
  }
  EXPECT_EQ(r->layout.dp, replicas);
  EXPECT_EQ(32, r->microbatches * r->layout.dp);
  EXPECT_NEAR(r->iteration_time_s, r->pipeline_time_s + r->dp_sync_s, 1e-12);
}

// Two nodes of two GPUs each (the synthetic cluster's device, split over nodes).
Cluster TwoNodesOfTwo() {
  Cluster c = SyntheticCluster(4);
  Node node = c.nodes[0];
  node.num_devices = 2;
  c.nodes = {node, node};
  c.nodes[0].name = "a";
  c.nodes[1].name = "b";
  return c;
}

TEST(LayoutTest, ReplicasWithinNodesFollowsTheRankOrder) {
  const Cluster c = TwoNodesOfTwo();
  // PP2 x DP2: pp inner puts replica r on GPUs {2r, 2r + 1} (one node); pp outer puts stage j
  // of every replica on one node, so each replica spans both.
  EXPECT_TRUE(ReplicasWithinNodes(c, ParallelLayout{2, 1, 1, 2, /*pp_outer=*/false}));
  EXPECT_FALSE(ReplicasWithinNodes(c, ParallelLayout{2, 1, 1, 2, /*pp_outer=*/true}));
  EXPECT_TRUE(ReplicasWithinNodes(c, ParallelLayout{1, 1, 1, 4, true}));   // a GPU each
  EXPECT_TRUE(ReplicasWithinNodes(c, ParallelLayout{1, 2, 1, 2, true}));   // a TP pair each
  EXPECT_FALSE(ReplicasWithinNodes(c, ParallelLayout{4, 1, 1, 1, true}));  // one replica: none left
  EXPECT_FALSE(ReplicasWithinNodes(c, ParallelLayout{2, 2, 1, 1, true}));
  EXPECT_FALSE(ReplicasWithinNodes(c, ParallelLayout{2, 1, 1, 4, false}));  // more GPUs than c has
  EXPECT_FALSE(ReplicasWithinNodes(c, ParallelLayout{1, 1, 2, 4, true}));   // EP shards: no copies
  EXPECT_FALSE(ReplicasWithinNodes(SyntheticCluster(4), ParallelLayout{1, 1, 1, 4, true}));  // one node
}

TEST(LayoutTest, NodeLocalToleranceChoosesReplicasWithinNodesWhenNoSlower) {
  // Without communication costs both rank orders of PP2 x DP2 predict the same; the fastest
  // is then the first enumerated (pp outer: replicas across nodes). With a tolerance the
  // node-local order is chosen.
  absl::StatusOr<ModelGraph> model = ParseSyntheticModel("layers=8,f=1,b=1,w=1");
  ASSERT_TRUE(model.ok()) << model.status();
  LayoutRequest req;
  req.pp = 2;
  req.dp = 2;
  req.global_microbatches = 4;
  absl::StatusOr<LayoutResult> fastest =
      TuneLayout(*model, TwoNodesOfTwo(), CostModel(), Options(1), req);
  ASSERT_TRUE(fastest.ok()) << fastest.status();
  EXPECT_TRUE(fastest->layout.pp_outer);
  req.node_local_tolerance = 0.05;
  absl::StatusOr<LayoutResult> local =
      TuneLayout(*model, TwoNodesOfTwo(), CostModel(), Options(1), req);
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ("PP2 x TP1 x EP1 x DP2 (pp inner)", local->layout.ToString());
  EXPECT_NEAR(local->iteration_time_s, fastest->iteration_time_s, 1e-9);
  const LayoutConsidered* chosen = Find(*local, "PP2 x TP1 x EP1 x DP2 (pp inner)");
  ASSERT_NE(chosen, nullptr);
  EXPECT_EQ(0u, chosen->outcome.find("chosen")) << chosen->outcome;
}

}  // namespace
}  // namespace octopipe
