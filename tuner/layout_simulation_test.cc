// Pins SimulateLayout (tuner/layout_simulation.h): the overlapped DP all-reduces against
// closed forms (a heterogeneous layout whose all-reduces all wait for one rank; the stage the
// backward ends with), that a single pipeline is exactly the evaluator's, the MoE split under
// expert parallelism, a split head, the errors naming the field, determinism, and that
// TuneLayout's answer carries the prediction without changing its own figures.
#include "tuner/layout_simulation.h"

#include <algorithm>
#include <cmath>
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
#include "simulator/evaluator.h"
#include "simulator/problem_builder.h"
#include "simulator/schedules.h"
#include "tuner/layout.h"
#include "tuner/tuner.h"

namespace octopipe {
namespace {

ModelGraph Zoo(const std::string& name) {
  absl::StatusOr<ModelGraph> m = ZooModel(name, TrainingOptions{});
  EXPECT_TRUE(m.ok()) << m.status();
  return *m;
}

Cluster H100() {
  absl::StatusOr<Cluster> c = ClusterPreset("h100-1node");
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

// A plan of `kind` with `chunks` stages per device over an even partition.
Plan MakePlan(const ModelGraph& model, ScheduleKind kind, int devices, int chunks, int m) {
  absl::StatusOr<GeneratedSchedule> g = GenerateSchedule(kind, devices, chunks, m);
  EXPECT_TRUE(g.ok()) << g.status();
  Plan plan;
  plan.schedule_name = std::string(ScheduleKindName(kind));
  plan.num_devices = devices;
  plan.num_microbatches = m;
  plan.stages = EvenPartition(model.num_layers(), g->num_stages);
  for (int s = 0; s < g->num_stages; ++s) plan.stages[s].device = g->stage_device[s];
  plan.schedule = g->schedule;
  return plan;
}

// `dp` replicas of one pipeline, pp outer (replica r's device j on rank r + dp·j), TP 1.
LayoutPlan Replicated(const Plan& plan, int dp, int ep = 1) {
  LayoutPlan out;
  out.layout = ParallelLayout{plan.num_devices, 1, ep, dp, true};
  out.num_ranks = plan.num_devices * dp;
  out.global_microbatches = plan.num_microbatches * dp;
  LayoutPipelinePlan p;
  p.plan = plan;
  for (int r = 0; r < dp; ++r) {
    PipelineReplica rep;
    rep.dp_rank = r;
    rep.first_microbatch = r * plan.num_microbatches;
    for (int j = 0; j < plan.num_devices; ++j) rep.device_ranks.push_back(r + dp * j);
    p.replicas.push_back(rep);
  }
  out.pipelines.push_back(p);
  return out;
}

// Per layer: its gradient bytes on one rank under `layout`'s degrees.
std::vector<double> LayerParamBytes(const ModelGraph& model, const ParallelLayout& layout,
                                    const Cluster& cluster) {
  const ModelGraph m = ModelForLayout(model, layout, layout.ep);
  std::vector<double> out;
  for (const Layer& l : m.layers) {
    out.push_back(CostModel().Cost(l, m.training, cluster.hardware[0]).param_bytes);
  }
  return out;
}

TEST(LayoutSimulationTest, Pp2Dp2OverlapsTheAllReducesOfTheStagesFinishedEarly) {
  const ModelGraph model = Zoo("llama3-8b");
  const Cluster cluster = H100();
  // Interleaved 1F1B, 4 stages on 2 devices: device 0 holds stages 0 and 2. Stage 2's last
  // backward ends while stage 0 still has backwards to run, so its all-reduces hide; stage 0's
  // cannot (its last backward is the iteration's last op).
  const Plan plan = MakePlan(model, ScheduleKind::kInterleaved, 2, 2, 8);
  const LayoutPlan layout = Replicated(plan, 2);
  absl::StatusOr<LayoutSimulation> sim = SimulateLayout(model, cluster, CostModel(), layout);
  ASSERT_TRUE(sim.ok()) << sim.status();
  absl::StatusOr<LayoutSimulation> single =
      SimulateLayout(model, cluster, CostModel(), SinglePipelineLayout(plan));
  ASSERT_TRUE(single.ok()) << single.status();

  ASSERT_EQ(1u, sim->pipeline_iteration_s.size());
  EXPECT_DOUBLE_EQ(single->iteration_time_s, sim->pipeline_time_s);
  EXPECT_GE(sim->iteration_time_s, sim->pipeline_time_s);
  EXPECT_DOUBLE_EQ(sim->iteration_time_s - sim->pipeline_time_s, sim->dp_sync_exposed_s);

  // The non-overlapped figure (DpSyncSeconds): each device's bytes in one ring after the
  // pipeline; and each device's per-layer all-reduces, summed.
  const LinkSpec nvlink = cluster.nodes[0].intra_node_link;
  const std::vector<double> bytes = LayerParamBytes(model, layout.layout, cluster);
  std::vector<double> device_bytes(2, 0.0), device_sync(2, 0.0);
  double stage0_sync = 0;
  for (int s = plan.num_stages() - 1; s >= 0; --s) {
    const StageAssignment& st = plan.stages[s];
    for (int l = st.last_layer; l >= st.first_layer; --l) {
      device_bytes[st.device] += bytes[l];
      device_sync[st.device] += RingAllReduceSeconds(bytes[l], 2, nvlink);
      if (s == 0) stage0_sync += RingAllReduceSeconds(bytes[l], 2, nvlink);
    }
  }
  const double not_overlapped = std::max(RingAllReduceSeconds(device_bytes[0], 2, nvlink),
                                         RingAllReduceSeconds(device_bytes[1], 2, nvlink));
  EXPECT_GT(sim->dp_sync_exposed_s, 0);
  EXPECT_LT(sim->dp_sync_exposed_s, 0.75 * not_overlapped)
      << "exposed " << sim->dp_sync_exposed_s << " s of " << not_overlapped << " s";
  // What stays exposed is exactly stage 0's all-reduces, after the last backward.
  EXPECT_NEAR(stage0_sync, sim->dp_sync_exposed_s, 1e-9 * stage0_sync);
  EXPECT_NEAR(std::max(device_sync[0], device_sync[1]), sim->dp_sync_total_s,
              1e-9 * sim->dp_sync_total_s);

  EXPECT_NEAR(16 * model.tokens_per_microbatch() / sim->iteration_time_s, sim->tokens_per_s,
              1e-9 * sim->tokens_per_s);
  ASSERT_EQ(4u, sim->peak_memory_bytes.size());
  // Ranks 0 and 1 are device 0 of the two replicas, ranks 2 and 3 device 1.
  EXPECT_EQ(sim->peak_memory_bytes[0], sim->peak_memory_bytes[1]);
  EXPECT_EQ(sim->peak_memory_bytes[2], sim->peak_memory_bytes[3]);
  EXPECT_GT(sim->bubble_ratio, single->bubble_ratio);  // the same busy time, a longer iteration
  EXPECT_LT(sim->bubble_ratio, 1);

  // A link whose all-reduce runs slower beside compute (a measured CPU cluster): stage 2's
  // all-reduces, which run while device 0 still computes stage 0, take longer; the iteration
  // can only grow, and by no more than every all-reduce at the slower rate.
  Cluster measured = cluster;
  LinkSpec& link = measured.nodes[0].intra_node_link;
  link.allreduce_bandwidth = 40e9;
  link.allreduce_latency_s = 20e-6;
  absl::StatusOr<LayoutSimulation> idle = SimulateLayout(model, measured, CostModel(), layout);
  ASSERT_TRUE(idle.ok()) << idle.status();
  link.allreduce_overlapped_bandwidth = 40e9;  // the same figures: the same prediction
  link.allreduce_overlapped_latency_s = 20e-6;
  absl::StatusOr<LayoutSimulation> same = SimulateLayout(model, measured, CostModel(), layout);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_DOUBLE_EQ(idle->iteration_time_s, same->iteration_time_s);
  EXPECT_DOUBLE_EQ(idle->dp_sync_total_s, same->dp_sync_total_s);
  link.allreduce_overlapped_bandwidth = 10e9;
  absl::StatusOr<LayoutSimulation> busy = SimulateLayout(model, measured, CostModel(), layout);
  ASSERT_TRUE(busy.ok()) << busy.status();
  EXPECT_DOUBLE_EQ(idle->pipeline_time_s, busy->pipeline_time_s);
  EXPECT_GT(busy->dp_sync_total_s, idle->dp_sync_total_s);
  EXPECT_GE(busy->iteration_time_s, idle->iteration_time_s);
  LinkSpec all_slow = link;
  all_slow.allreduce_bandwidth = all_slow.allreduce_overlapped_bandwidth;
  double slowest = 0;
  for (int d = 0; d < 2; ++d) {
    double s = 0;
    for (int st = 0; st < plan.num_stages(); ++st) {
      if (plan.stages[st].device != d) continue;
      for (int l = plan.stages[st].first_layer; l <= plan.stages[st].last_layer; ++l) {
        s += RingAllReduceSeconds(bytes[l], 2, all_slow);
      }
    }
    slowest = std::max(slowest, s);
  }
  EXPECT_LT(busy->dp_sync_total_s, slowest);
  EXPECT_LE(busy->iteration_time_s - idle->iteration_time_s, slowest - idle->dp_sync_total_s);
}

// Replica 0: a 2-device pipeline on ranks 0, 1; replica 1: the whole model on rank 2.
LayoutPlan Heterogeneous(const ModelGraph& model) {
  LayoutPlan out;
  out.layout = ParallelLayout{2, 1, 1, 2, true};
  out.num_ranks = 3;
  out.global_microbatches = 8;
  LayoutPipelinePlan two;
  two.plan = MakePlan(model, ScheduleKind::k1F1B, 2, 1, 4);
  two.replicas.push_back(PipelineReplica{0, 0, {0, 1}});
  LayoutPipelinePlan one;
  one.plan = MakePlan(model, ScheduleKind::k1F1B, 1, 1, 4);
  one.replicas.push_back(PipelineReplica{1, 4, {2}});
  out.pipelines = {two, one};
  return out;
}

TEST(LayoutSimulationTest, HeterogeneousReplicasWaitForTheRankHoldingEveryLayer) {
  const ModelGraph model = Zoo("llama3-8b");
  const Cluster cluster = H100();
  const LayoutPlan layout = Heterogeneous(model);
  absl::StatusOr<LayoutSimulation> sim = SimulateLayout(model, cluster, CostModel(), layout);
  ASSERT_TRUE(sim.ok()) << sim.status();
  ASSERT_EQ(2u, sim->pipeline_iteration_s.size());
  // One device with 4 micro-batches of the whole model is the slower pipeline.
  EXPECT_GT(sim->pipeline_iteration_s[1], sim->pipeline_iteration_s[0]);
  EXPECT_DOUBLE_EQ(sim->pipeline_iteration_s[1], sim->pipeline_time_s);
  // Rank 2 is in every layer's DP group ({0, 2} for stage 0's layers, {1, 2} for stage 1's),
  // and its layers are ready only at its end: every all-reduce runs after it, one at a time.
  const LinkSpec nvlink = cluster.nodes[0].intra_node_link;
  const std::vector<double> bytes = LayerParamBytes(model, layout.layout, cluster);
  double serial = 0;
  for (int l = model.num_layers() - 1; l >= 0; --l) {
    serial += RingAllReduceSeconds(bytes[l], 2, nvlink);
  }
  EXPECT_NEAR(serial, sim->dp_sync_total_s, 1e-9 * serial);
  EXPECT_NEAR(serial, sim->dp_sync_exposed_s, 1e-9 * serial);
  EXPECT_NEAR(sim->pipeline_time_s + serial, sim->iteration_time_s, 1e-9 * serial);
  EXPECT_EQ(3u, sim->peak_memory_bytes.size());
  EXPECT_NEAR(8 * model.tokens_per_microbatch() / sim->iteration_time_s, sim->tokens_per_s,
              1e-9 * sim->tokens_per_s);

  // Where the node's link gives an all-reduce bus bandwidth (a measured cluster), every
  // all-reduce runs at it instead of the link's bandwidth.
  Cluster measured = cluster;
  measured.nodes[0].intra_node_link.allreduce_bandwidth = 40e9;
  measured.nodes[0].intra_node_link.allreduce_latency_s = 20e-6;
  absl::StatusOr<LayoutSimulation> slow = SimulateLayout(model, measured, CostModel(), layout);
  ASSERT_TRUE(slow.ok()) << slow.status();
  double serial_slow = 0;
  for (int l = model.num_layers() - 1; l >= 0; --l) {
    serial_slow += RingAllReduceSeconds(bytes[l], 2, measured.nodes[0].intra_node_link);
  }
  EXPECT_GT(serial_slow, 5 * serial);
  EXPECT_NEAR(serial_slow, slow->dp_sync_total_s, 1e-9 * serial_slow);
  EXPECT_NEAR(slow->pipeline_time_s + serial_slow, slow->iteration_time_s, 1e-9 * serial_slow);
  // They all start after rank 2's compute ends: a slower rate beside compute changes nothing.
  measured.nodes[0].intra_node_link.allreduce_overlapped_bandwidth = 1e9;
  absl::StatusOr<LayoutSimulation> beside = SimulateLayout(model, measured, CostModel(), layout);
  ASSERT_TRUE(beside.ok()) << beside.status();
  EXPECT_DOUBLE_EQ(slow->iteration_time_s, beside->iteration_time_s);
  EXPECT_DOUBLE_EQ(slow->dp_sync_total_s, beside->dp_sync_total_s);
}

TEST(LayoutSimulationTest, SinglePipelineIsExactlyTheEvaluators) {
  const ModelGraph model = Zoo("llama3-8b");
  const Cluster cluster = H100();
  for (ScheduleKind kind : {ScheduleKind::k1F1B, ScheduleKind::kInterleaved,
                            ScheduleKind::kZbH1}) {
    const Plan plan = MakePlan(model, kind, 4, DefaultChunks(kind), 8);
    for (bool contention : {false, true}) {
      absl::StatusOr<PipelineProblem> problem = BuildProblem(model, cluster, CostModel(), plan);
      ASSERT_TRUE(problem.ok()) << problem.status();
      problem->link_contention = contention;
      absl::StatusOr<SimResult> want = Simulate(*problem, plan.schedule);
      ASSERT_TRUE(want.ok()) << want.status();
      absl::StatusOr<LayoutSimulation> got = SimulateLayout(
          model, cluster, CostModel(), SinglePipelineLayout(plan), contention);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(want->iteration_time_s, got->iteration_time_s) << ScheduleKindName(kind);
      EXPECT_EQ(want->iteration_time_s, got->pipeline_time_s);
      EXPECT_EQ(0, got->dp_sync_exposed_s);
      EXPECT_EQ(0, got->dp_sync_total_s);
      EXPECT_NEAR(want->bubble_ratio, got->bubble_ratio, 1e-12);
      EXPECT_EQ(want->fits_memory, got->fits);
      ASSERT_EQ(4u, got->peak_memory_bytes.size());
      for (int d = 0; d < 4; ++d) {
        EXPECT_EQ(want->devices[d].peak_memory_bytes, got->peak_memory_bytes[d]);
      }
    }
  }
}

// A plan that splits the head (and the embedding) over the devices, from the tuner.
Plan VocabParallelPlan(const ModelGraph& model, const Cluster& cluster) {
  TunerOptions o;
  o.num_devices = 2;
  o.num_microbatches = 4;
  o.time_budget_s = 0.5;
  o.threads = 1;
  o.vocab_parallel = VocabParallelMode::kOn;
  absl::StatusOr<TuneResult> r = Tune(model, cluster, CostModel(), o);
  EXPECT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->plan.vocab_parallel);
  return r->plan;
}

TEST(LayoutSimulationTest, SplitHeadIsExactAloneAndItsShardsWaitForTheRanksEnd) {
  const ModelGraph model = Zoo("llama3-8b");
  const Cluster cluster = H100();
  const Plan plan = VocabParallelPlan(model, cluster);
  absl::StatusOr<PipelineProblem> problem = BuildProblem(model, cluster, CostModel(), plan);
  ASSERT_TRUE(problem.ok()) << problem.status();
  absl::StatusOr<SimResult> want = Simulate(*problem, plan.schedule);
  ASSERT_TRUE(want.ok()) << want.status();
  absl::StatusOr<LayoutSimulation> alone =
      SimulateLayout(model, cluster, CostModel(), SinglePipelineLayout(plan));
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_EQ(want->iteration_time_s, alone->iteration_time_s);

  // Two replicas: the head's shard is every rank's first all-reduce (the highest layer) and
  // is ready only at the rank's end, so nothing overlaps: the rank that ends last runs all of
  // its all-reduces after the pipeline.
  const LayoutPlan layout = Replicated(plan, 2);
  absl::StatusOr<LayoutSimulation> sim = SimulateLayout(model, cluster, CostModel(), layout);
  ASSERT_TRUE(sim.ok()) << sim.status();
  const LinkSpec nvlink = cluster.nodes[0].intra_node_link;
  const std::vector<double> bytes = LayerParamBytes(model, layout.layout, cluster);
  const std::vector<int64_t>& columns = plan.vocab_shard_columns;
  ASSERT_EQ(2u, columns.size());
  const double vocab = static_cast<double>(columns[0] + columns[1]);
  const int L = model.num_layers();
  std::vector<double> device_sync(2, 0.0);
  for (int d = 0; d < 2; ++d) {
    device_sync[d] += RingAllReduceSeconds(bytes[L - 1] * columns[d] / vocab, 2, nvlink);
    device_sync[d] += RingAllReduceSeconds(bytes[0] * columns[d] / vocab, 2, nvlink);
  }
  for (const StageAssignment& st : plan.stages) {
    for (int l = std::max(1, st.first_layer); l <= std::min(L - 2, st.last_layer); ++l) {
      device_sync[st.device] += RingAllReduceSeconds(bytes[l], 2, nvlink);
    }
  }
  EXPECT_NEAR(std::max(device_sync[0], device_sync[1]), sim->dp_sync_total_s,
              1e-9 * sim->dp_sync_total_s);
  EXPECT_GE(sim->dp_sync_exposed_s, std::min(device_sync[0], device_sync[1]) * (1 - 1e-9));
}

TEST(LayoutSimulationTest, ExpertParallelismSumsExpertsOverTheirEpRankOnly) {
  const ModelGraph model = Zoo("mixtral-8x7b");
  const Cluster cluster = H100();
  const Plan plan = MakePlan(model, ScheduleKind::k1F1B, 2, 1, 8);
  // DP4: EP 1 sums every layer over 4 ranks; EP 2 sums the experts (half of them per rank)
  // over the 2 replicas with the same EP rank and the rest (attention, router, norm) over 4.
  absl::StatusOr<LayoutSimulation> ep1 =
      SimulateLayout(model, cluster, CostModel(), Replicated(plan, 4, 1));
  ASSERT_TRUE(ep1.ok()) << ep1.status();
  const LayoutPlan layout = Replicated(plan, 4, 2);
  absl::StatusOr<LayoutSimulation> ep2 = SimulateLayout(model, cluster, CostModel(), layout);
  ASSERT_TRUE(ep2.ok()) << ep2.status();
  EXPECT_LT(ep2->dp_sync_total_s, 0.6 * ep1->dp_sync_total_s);

  const LinkSpec nvlink = cluster.nodes[0].intra_node_link;
  const std::vector<double> bytes = LayerParamBytes(model, layout.layout, cluster);
  const double e = 2;  // bf16
  std::vector<double> device_sync(2, 0.0);
  for (const StageAssignment& st : plan.stages) {
    for (int l = st.last_layer; l >= st.first_layer; --l) {
      const Layer& layer = model.layers[l];
      if (layer.kind == LayerKind::kMoe) {
        const LayerDims& d = layer.dims;
        const double experts = 3.0 * d.hidden * d.moe_ffn * d.experts / 2 * e;  // EP 2
        device_sync[st.device] += RingAllReduceSeconds(bytes[l] - experts, 4, nvlink) +
                                  RingAllReduceSeconds(experts, 2, nvlink);
      } else {
        device_sync[st.device] += RingAllReduceSeconds(bytes[l], 4, nvlink);
      }
    }
  }
  EXPECT_NEAR(std::max(device_sync[0], device_sync[1]), ep2->dp_sync_total_s,
              1e-6 * ep2->dp_sync_total_s);
}

TEST(LayoutSimulationTest, BadLayoutsNameTheField) {
  const ModelGraph model = Zoo("llama3-8b");
  const Cluster cluster = H100();
  const Plan plan = MakePlan(model, ScheduleKind::k1F1B, 2, 1, 4);
  auto error = [&](const LayoutPlan& layout, const Cluster& c) {
    absl::StatusOr<LayoutSimulation> s = SimulateLayout(model, c, CostModel(), layout);
    EXPECT_FALSE(s.ok());
    if (s.ok()) return std::string();
    EXPECT_EQ(absl::StatusCode::kInvalidArgument, s.status().code()) << s.status();
    return std::string(s.status().message());
  };
  {
    LayoutPlan bad = Replicated(plan, 2);
    bad.layout.dp = 3;
    EXPECT_NE(std::string::npos, error(bad, cluster).find("layout.dp"));
  }
  {
    Cluster small = cluster;
    small.nodes[0].num_devices = 2;
    EXPECT_NE(std::string::npos, error(Replicated(plan, 2), small).find("num_ranks"));
  }
  {
    // TP 3 does not divide the 32 heads.
    LayoutPlan bad = SinglePipelineLayout(MakePlan(model, ScheduleKind::k1F1B, 1, 1, 4));
    bad.layout.tp = 3;
    bad.num_ranks = 3;
    EXPECT_NE(std::string::npos, error(bad, cluster).find("layout.tp"));
  }
  {
    // Two nodes of 3 GPUs: PP3 x TP2 puts TP group 2..3 across them.
    Cluster two_nodes = cluster;
    two_nodes.nodes[0].num_devices = 3;
    two_nodes.nodes.push_back(two_nodes.nodes[0]);
    two_nodes.nodes[1].name = "node1";
    LayoutPlan bad = SinglePipelineLayout(MakePlan(model, ScheduleKind::k1F1B, 3, 1, 4));
    bad.layout.tp = 2;
    bad.num_ranks = 6;
    bad.pipelines[0].replicas[0].device_ranks = {0, 2, 4};
    const std::string e = error(bad, two_nodes);
    EXPECT_NE(std::string::npos, e.find("pipelines[0].replicas[0].device_ranks[1]")) << e;
  }
  {
    LayoutPlan bad = Replicated(plan, 2);
    bad.pipelines[0].plan.schedule.ops[1].pop_back();  // an op missing
    const std::string e = error(bad, cluster);
    EXPECT_NE(std::string::npos, e.find("pipelines[0].plan")) << e;
  }
}

TEST(LayoutSimulationTest, Deterministic) {
  const ModelGraph model = Zoo("llama3-8b");
  const Cluster cluster = H100();
  const LayoutPlan layout = Heterogeneous(model);
  absl::StatusOr<LayoutSimulation> a = SimulateLayout(model, cluster, CostModel(), layout);
  absl::StatusOr<LayoutSimulation> b = SimulateLayout(model, cluster, CostModel(), layout);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->iteration_time_s, b->iteration_time_s);
  EXPECT_EQ(a->pipeline_time_s, b->pipeline_time_s);
  EXPECT_EQ(a->dp_sync_exposed_s, b->dp_sync_exposed_s);
  EXPECT_EQ(a->dp_sync_total_s, b->dp_sync_total_s);
  EXPECT_EQ(a->tokens_per_s, b->tokens_per_s);
  EXPECT_EQ(a->bubble_ratio, b->bubble_ratio);
  EXPECT_EQ(a->pipeline_iteration_s, b->pipeline_iteration_s);
  EXPECT_EQ(a->peak_memory_bytes, b->peak_memory_bytes);
  EXPECT_EQ(a->fits, b->fits);
}

TEST(LayoutSimulationTest, TuneLayoutCarriesThePredictionOfItsChoice) {
  const ModelGraph model = Zoo("llama3-8b");
  const Cluster cluster = H100();
  TunerOptions o;
  o.time_budget_s = 2;
  o.threads = 1;
  LayoutRequest req;
  req.pp = 2;
  req.dp = 4;
  req.global_microbatches = 16;
  absl::StatusOr<LayoutResult> r = TuneLayout(model, cluster, CostModel(), o, req);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->simulation_error.empty()) << r->simulation_error;
  const LayoutSimulation& s = r->simulated;
  // The slowest pipeline is the tuner's own prediction; the overlap hides some of the DP sync.
  EXPECT_DOUBLE_EQ(r->pipeline_time_s, s.pipeline_time_s);
  EXPECT_GE(s.iteration_time_s, s.pipeline_time_s);
  EXPECT_LE(s.iteration_time_s, r->iteration_time_s * 1.001);
  EXPECT_EQ(8u, s.peak_memory_bytes.size());
  EXPECT_GT(s.tokens_per_s, 0);
}

}  // namespace
}  // namespace octopipe
