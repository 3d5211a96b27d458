// Pins the split input embedding of vocabulary parallelism (simulator/vocab_parallel.h) by
// hand-computed cases: the wait of stage 0's first F for the reduced embedding, the other
// devices' lookups before their first op and scatter-adds after the last gradient's broadcast,
// the iteration times and busy times that include them, the list scheduler's agreement, the
// builder's shards (memory per device, stage 0's share, the chains' costs) and validation.
#include "core/plan.h"
#include "gtest/gtest.h"
#include "simulator/evaluator.h"
#include "simulator/list_scheduler.h"
#include "simulator/pipeline_rules.h"
#include "simulator/problem.h"
#include "simulator/problem_builder.h"
#include "simulator/vocab_test_problems.h"
#include "simulator/vocab_parallel.h"

namespace octopipe {
namespace {

Op F(int s, int m) { return Op{OpKind::kF, s, m}; }
Op B(int s, int m) { return Op{OpKind::kB, s, m}; }
Op W(int s, int m) { return Op{OpKind::kW, s, m}; }
Op S(int d, int m) { return Op{OpKind::kS, d, m}; }
Op T(int d, int m) { return Op{OpKind::kT, d, m}; }

// vocab_parallel_test's two devices (stage d on device d; messages 0.1 + bytes / 1000 s):
//   stage 0: F 1, B 2, W 1      stage 1: F 2, B 3, W 1
//   shard 0: S 0.5, T 0.3       shard 1: S 0.4, T 0.4      all-reduce 0.25 s
// with the embedding split: device 1 looks up for 0.6 s before its first op and scatter-adds
// for 1.5 s after the last gradient; stage 0 waits 0.5 s for the first reduced embedding; a
// gradient's broadcast takes 0.2 s.
PipelineProblem TwoDevices() {
  PipelineProblem pb = UniformProblem({0, 1}, 2, 1, 1, 2, 1);
  pb.forward_s = {1, 2};
  pb.backward_input_s = {2, 3};
  pb.weight_grad_s = {1, 1};
  pb.output_bytes = {100, 0};
  pb.link_latency_s = {0, 0.1, 0.1, 0};
  pb.link_inv_bandwidth = {0, 1e-3, 1e-3, 0};
  pb.vocab_parallel = true;
  pb.vocab_s_s = {0.5, 0.4};
  pb.vocab_t_s = {0.3, 0.4};
  pb.vocab_activation_bytes = {10, 20};
  pb.vocab_input_bytes = 100;
  pb.vocab_allreduce_s = 0.25;
  pb.embed_split = true;
  pb.embed_prologue_s = {0, 0.6};
  pb.embed_epilogue_s = {0, 1.5};
  pb.embed_ready_s = 0.5;
  pb.embed_broadcast_s = 0.2;
  return pb;
}

Schedule TwoDeviceOrder() {
  Schedule s;
  s.ops = {{F(0, 0), S(0, 0), B(0, 0), W(0, 0), T(0, 0)},
           {F(1, 0), S(1, 0), B(1, 0), W(1, 0), T(1, 0)}};
  return s;
}

TEST(VocabEmbeddingTest, StageZeroWaitsForTheReduceAndTheOthersScatterAfterTheBroadcast) {
  EvalOptions timeline;
  timeline.timeline = true;
  for (bool contention : {false, true}) {
    PipelineProblem pb = TwoDevices();
    pb.link_contention = contention;
    absl::StatusOr<SimResult> r = Simulate(pb, TwoDeviceOrder(), timeline);
    ASSERT_TRUE(r.ok()) << r.status();
    // Without the split (vocab_parallel_test): device 0 runs F0 0-1, S0 3.4-3.9, B0 7.35-9.35,
    // W0 -10.35, T0 -10.65; device 1 F1 1.2-3.2, S1 -3.6, B1 4.15-7.15, W1 -8.15, T1 -8.55.
    // Stage 0's first F now starts at 0.5 and everything follows it by 0.5 (device 1's lookups
    // end at 0.6, before its input arrives at 1.7).
    const std::vector<double> start0 = {0.5, 3.9, 7.85, 9.85, 10.85};
    const std::vector<double> start1 = {1.7, 3.7, 4.65, 7.65, 8.65};
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_NEAR(r->op_start_s[0][i], start0[i], 1e-12) << "device 0 op " << i;
      EXPECT_NEAR(r->op_start_s[1][i], start1[i], 1e-12) << "device 1 op " << i;
    }
    // Device 0 ends with T0 at 11.15. Device 1's ops end at 9.05, the gradient of B0 (ends
    // 9.85) reaches it at 10.05, its scatter-adds end at 11.55: the iteration's end.
    EXPECT_NEAR(r->iteration_time_s, 11.55, 1e-12);
    // Steady state: device 1's period is its ops' span plus its lookups and scatter-adds,
    // 9.05 - 1.7 + 0.6 + 1.5 = 9.45; device 0's next first F waits for B0's gradient to reach
    // device 1 (10.05), its scatter-adds (11.55) and the next lookup and reduce (12.05): a
    // period of 12.05 - 0.5, longer than its ops' 0.5 to 11.15.
    EXPECT_NEAR(r->steady_state_iteration_time_s, 11.55, 1e-12);
    // Busy: device 1's ops (2 + 0.4 + 3 + 1 + 0.4) plus its lookups and scatter-adds.
    EXPECT_NEAR(r->devices[1].busy_s, 6.8 + 0.6 + 1.5, 1e-12);
    EXPECT_NEAR(r->devices[0].busy_s, 4.8, 1e-12);
    absl::StatusOr<Evaluator::Summary> sum = Evaluator().EvaluateSummary(pb, TwoDeviceOrder());
    ASSERT_TRUE(sum.ok()) << sum.status();
    EXPECT_NEAR(sum->iteration_time_s, 11.55, 1e-12);
    EXPECT_NEAR(sum->steady_state_iteration_time_s, 11.55, 1e-12);
  }
}

TEST(VocabEmbeddingTest, LongLookupsDelayTheDevicesFirstOp) {
  PipelineProblem pb = TwoDevices();
  pb.embed_prologue_s = {0, 2.5};
  EvalOptions timeline;
  timeline.timeline = true;
  absl::StatusOr<SimResult> r = Simulate(pb, TwoDeviceOrder(), timeline);
  ASSERT_TRUE(r.ok()) << r.status();
  // F1's input arrives at 1.7, but device 1 looks up until 2.5.
  EXPECT_NEAR(r->op_start_s[1][0], 2.5, 1e-12);
  // Without the split the same order on the same ops ends at 10.65.
  PipelineProblem off = TwoDevices();
  off.embed_split = false;
  absl::StatusOr<SimResult> plain = Simulate(off, TwoDeviceOrder());
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_NEAR(plain->iteration_time_s, 10.65, 1e-12);
  EXPECT_GT(r->iteration_time_s, plain->iteration_time_s + 0.5);
}

TEST(VocabEmbeddingTest, RulesSayWhereEachDevicesPartBeginsAndEnds) {
  PipelineProblem pb = TwoDevices();
  EXPECT_DOUBLE_EQ(DeviceEarliestStart(pb, 0), 0.5);  // r0: the first reduced embedding
  EXPECT_DOUBLE_EQ(DeviceEarliestStart(pb, 1), 0.6);  // its lookups
  EXPECT_DOUBLE_EQ(DeviceEnd(pb, 0, 7.0, 6.0), 7.0);  // r0 scatter-adds in W
  EXPECT_DOUBLE_EQ(DeviceEnd(pb, 1, 7.0, 6.0), 7.0 + 1.5);
  EXPECT_DOUBLE_EQ(DeviceEnd(pb, 1, 6.0, 6.5), 6.5 + 0.2 + 1.5);
  EXPECT_DOUBLE_EQ(DevicePeriod(pb, 1, 1.0, 6.0, 6.5), 5.0 + 0.6 + 1.5);
  EXPECT_DOUBLE_EQ(DevicePeriod(pb, 0, 0.5, 7.0, 4.0), 7.0 - 0.5);  // its ops end later
  EXPECT_DOUBLE_EQ(DevicePeriod(pb, 0, 0.5, 7.0, 6.5), 6.5 + 0.2 + 1.5 + 0.5 - 0.5);
  pb.stage_device = {1, 0};  // stage 0 on device 1: device 0 is the one that waits
  pb.embed_prologue_s = {0.6, 0};
  pb.embed_epilogue_s = {1.5, 0};
  EXPECT_DOUBLE_EQ(DeviceEarliestStart(pb, 1), 0.5);
  EXPECT_DOUBLE_EQ(DeviceEnd(pb, 0, 6.0, 6.5), 6.5 + 0.2 + 1.5);
  pb.embed_split = false;
  EXPECT_DOUBLE_EQ(DeviceEarliestStart(pb, 0), 0);
  EXPECT_DOUBLE_EQ(DeviceEnd(pb, 0, 6.0, 6.5), 6.0);
  EXPECT_DOUBLE_EQ(DevicePeriod(pb, 0, 1.0, 6.0, 6.5), 5.0);
}

TEST(VocabEmbeddingTest, ListSchedulerTimingMatchesTheEvaluator) {
  PipelineProblem pb = ThreeUnequalVocabDevices();
  pb.embed_split = true;
  pb.embed_prologue_s = {0, 1.3, 0.4};
  pb.embed_epilogue_s = {0, 0.7, 2.9};  // device 2's scatter-adds end the iteration
  pb.embed_ready_s = 0.35;
  pb.embed_broadcast_s = 0.12;
  for (bool split : {true, false}) {
    ListSchedulerOptions options;
    options.split_backward = split;
    absl::StatusOr<ListScheduleResult> ls = ListSchedule(pb, WeightedPolicy{}, options);
    ASSERT_TRUE(ls.ok()) << ls.status();
    EXPECT_EQ(ls->schedule.ops[0].front(), F(0, 0));
    EvalOptions timeline;
    timeline.timeline = true;
    absl::StatusOr<SimResult> r = Simulate(pb, ls->schedule, timeline);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_NEAR(r->iteration_time_s, ls->iteration_time_s, 1e-9) << "split " << split;
    EXPECT_NEAR(r->op_start_s[0][0], 0.35, 1e-12);
    EXPECT_GE(r->op_start_s[1][0], 1.3 - 1e-12);
    // Device 2's part ends 2.9 after the later of its last op and the last gradient.
    double b0_end = 0;
    for (size_t i = 0; i < ls->schedule.ops[0].size(); ++i) {
      const Op op = ls->schedule.ops[0][i];
      if (op.stage == 0 && IsBackward(op.kind)) b0_end = std::max(b0_end, r->op_end_s[0][i]);
    }
    const double device2 =
        std::max(r->op_end_s[2].back(), b0_end + 0.12) + 2.9;
    EXPECT_NEAR(r->iteration_time_s, std::max(device2, r->op_end_s[0].back()), 1e-9);
  }
}

TEST(VocabEmbeddingTest, EmbeddingFieldsAreValidated) {
  PipelineProblem pb = TwoDevices();
  pb.embed_epilogue_s.pop_back();
  absl::StatusOr<SimResult> r = Simulate(pb, TwoDeviceOrder());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("embed_epilogue_s has 1 entries for 2 devices"),
            absl::string_view::npos)
      << r.status();
  pb = TwoDevices();
  pb.embed_ready_s = -1;
  r = Simulate(pb, TwoDeviceOrder());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("embed_ready_s must be finite and >= 0"),
            absl::string_view::npos)
      << r.status();
  pb = TwoDevices();
  pb.vocab_parallel = false;
  EXPECT_FALSE(ValidateVocabParallel(pb).ok());
  EXPECT_NE(ValidateVocabParallel(pb).message().find("embed_split"), std::string::npos);
}

TEST(VocabEmbeddingTest, ChainsUseTheSlowestLinkTowardOrFromTheRoot) {
  // Three devices, root 1. The reduce runs 0 -> 2 -> 1 (links 0->2 and 2->1), the broadcast
  // 1 -> 2 -> 0 (links 1->2 and 2->0). 300 bytes.
  std::vector<double> latency(9, 0.01), inv_bw(9, 1e-3);
  latency[0 * 3 + 2] = 0.03;  // on the reduce's chain
  inv_bw[2 * 3 + 1] = 2e-3;   // on the reduce's chain
  inv_bw[2 * 3 + 0] = 4e-3;   // on the broadcast's chain
  inv_bw[1 * 3 + 0] = 9.0;    // on neither
  EXPECT_NEAR(ChainSeconds(3, latency, inv_bw, 300, 1, /*toward_root=*/true),
              2 * 0.03 + 300 * 2e-3, 1e-12);
  EXPECT_NEAR(ChainSeconds(3, latency, inv_bw, 300, 1, /*toward_root=*/false),
              2 * 0.01 + 300 * 4e-3, 1e-12);
  EXPECT_EQ(ChainSeconds(1, {0}, {0}, 300, 0, true), 0);
}

// embedding, two MLP layers, head (vocabulary 1000 for both), measured costs in fp32: every
// layer 400 parameter bytes (1600 static bytes: weights, gradients, Adam's two moments) but the
// embedding's 4000 (16000 static bytes).
ModelGraph ModelWithEmbedding() {
  ModelGraph g;
  g.name = "with-embedding";
  g.training.num_microbatches = 4;
  g.training.precision = Precision::kFp32;
  for (int l = 0; l < 4; ++l) {
    Layer layer;
    layer.name = "L" + std::to_string(l);
    layer.kind = l == 0 ? LayerKind::kEmbedding : l == 3 ? LayerKind::kHead : LayerKind::kMlp;
    if (l == 0 || l == 3) layer.dims.vocab = 1000;
    MeasuredCosts& m = layer.measured;
    m.forward_s = l == 3 ? 0.008 : l == 0 ? 0.002 : 0.001;
    m.backward_input_s = l == 3 ? 0.008 : l == 0 ? 0.0 : 0.002;
    m.weight_grad_s = l == 3 ? 0.004 : l == 0 ? 0.003 : 0.001;
    m.recompute_s = l == 0 ? 0.002 : 0.001;
    m.activation_bytes = 1000;
    m.activation_bytes_w = 400;
    m.input_bytes = l == 0 ? 8 : 100;
    m.output_bytes = l == 3 ? 0 : l == 0 ? 300 : 100;
    m.param_bytes = l == 0 ? 4000 : 400;
    g.layers.push_back(layer);
  }
  return g;
}

Cluster TwoCpus() {
  Cluster c;
  c.name = "two";
  c.hardware.push_back(HardwareSpec{"cpu", 1e10, 1e9, 1e10, /*op_overhead_s=*/0.0002});
  c.nodes.push_back(Node{"n", "cpu", 2, LinkSpec{1e8, 5e-5}});
  c.inter_node_link = LinkSpec{1e8, 5e-5};
  return c;
}

TEST(VocabEmbeddingTest, BuilderSplitsTheEmbeddingByTheHeadsColumns) {
  const ModelGraph model = ModelWithEmbedding();
  ASSERT_TRUE(SplitsEmbedding(model));
  absl::StatusOr<ProblemBuilder> plain = ProblemBuilder::Create(model, TwoCpus(), CostModel(), 2);
  absl::StatusOr<ProblemBuilder> split =
      ProblemBuilder::Create(model, TwoCpus(), CostModel(), 2, {}, /*vocab_parallel=*/true);
  ASSERT_TRUE(plain.ok() && split.ok()) << split.status();
  EXPECT_FALSE(plain->split_embedding());
  EXPECT_TRUE(split->split_embedding());
  EXPECT_EQ(split->vocab_shard_columns(), (std::vector<int64_t>{500, 500}));
  EXPECT_NEAR(plain->Work(0, 0, 0), 0.005, 1e-12);
  EXPECT_EQ(split->Work(0, 0, 0), 0);
  EXPECT_EQ(split->StaticBytes(0, 0, 0), 0);
  EXPECT_NEAR(plain->StaticBytes(0, 0, 0), 16000, 1e-9);

  const std::vector<StageAssignment> stages = {StageAssignment{0, 1, 0, false},
                                               StageAssignment{2, 3, 1, false}};
  PipelineProblem p, q;
  plain->BuildInto(stages, 4, &p);
  split->BuildInto(stages, 4, &q);
  // Memory per device. Whole: device 0 holds the embedding and L1 (16000 + 1600), device 1 L2
  // and the head (3200). Split: each holds its layer, half the head and half the embedding.
  EXPECT_NEAR(p.static_bytes[0], 17600, 1e-9);
  EXPECT_NEAR(p.static_bytes[1], 3200, 1e-9);
  EXPECT_NEAR(q.static_bytes[0], 1600 + 8000 + 800, 1e-9);
  EXPECT_NEAR(q.static_bytes[1], 1600 + 8000 + 800, 1e-9);
  // Stage 0 runs device 0's half of the embedding: F 0.001 + 0.002 / 2 (+ the op overhead),
  // W 0.001 + 0.003 / 2, R 0.001 + 0.002 / 2; B unchanged (the embedding has none).
  EXPECT_NEAR(p.forward_s[0], 0.003 + 0.0002, 1e-12);
  EXPECT_NEAR(q.forward_s[0], 0.002 + 0.0002, 1e-12);
  EXPECT_NEAR(q.weight_grad_s[0], 0.0025 + 0.0002, 1e-12);
  EXPECT_NEAR(q.recompute_s[0], 0.002 + 0.0002, 1e-12);
  EXPECT_NEAR(q.backward_input_s[0], p.backward_input_s[0], 1e-12);
  EXPECT_NEAR(q.forward_s[1], p.forward_s[1] - 0.008, 1e-15);  // the head is split as before
  // Stage 0 keeps its token ids as activations; its input under recompute is the reduced
  // embedding (300 bytes), not the token ids (8).
  EXPECT_EQ(q.activation_bytes[0], p.activation_bytes[0]);
  EXPECT_EQ(p.input_bytes[0], 8);
  EXPECT_EQ(q.input_bytes[0], 300);
  // Device 1 looks up its half for each of the 4 micro-batches first and scatter-adds after.
  ASSERT_TRUE(q.embed_split);
  EXPECT_NEAR(q.embed_prologue_s[0], 0, 1e-15);
  EXPECT_NEAR(q.embed_prologue_s[1], 4 * 0.001, 1e-15);
  EXPECT_NEAR(q.embed_epilogue_s[0], 0, 1e-15);
  EXPECT_NEAR(q.embed_epilogue_s[1], 4 * 0.0015, 1e-15);
  // Stage 0's first F waits for device 1's first lookup and the reduce of 300 bytes over the
  // link 1 -> 0 (5e-5 + 300 / 1e8); a gradient's broadcast takes the same over 0 -> 1.
  EXPECT_NEAR(q.embed_ready_s, 0.001 + 5e-5 + 300 / 1e8, 1e-15);
  EXPECT_NEAR(q.embed_broadcast_s, 5e-5 + 300 / 1e8, 1e-15);
  EXPECT_FALSE(p.embed_split);

  // Stage 0 on device 1: device 0 looks up and scatter-adds, device 1 holds the wait.
  const std::vector<StageAssignment> swapped = {StageAssignment{0, 1, 1, false},
                                                StageAssignment{2, 3, 0, false}};
  split->BuildInto(swapped, 4, &q);
  EXPECT_NEAR(q.embed_prologue_s[0], 4 * 0.001, 1e-15);
  EXPECT_NEAR(q.embed_prologue_s[1], 0, 1e-15);
  EXPECT_NEAR(DeviceEarliestStart(q, 1), q.embed_ready_s, 1e-15);

  // A plan's own unequal columns size both splits.
  Plan plan;
  plan.num_devices = 2;
  plan.num_microbatches = 4;
  plan.vocab_parallel = true;
  plan.stages = stages;
  plan.vocab_shard_columns = {250, 750};
  absl::StatusOr<PipelineProblem> own = split->Build(plan);
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_NEAR(own->static_bytes[0], 1600 + 4000 + 400, 1e-9);
  EXPECT_NEAR(own->static_bytes[1], 1600 + 12000 + 1200, 1e-9);
  EXPECT_NEAR(own->forward_s[0], 0.001 + 0.0005 + 0.0002, 1e-12);
  EXPECT_NEAR(own->embed_prologue_s[1], 4 * 0.0015, 1e-15);
  EXPECT_NEAR(own->embed_ready_s, 0.0015 + 5e-5 + 300 / 1e8, 1e-15);

  // The peak memory the evaluator reports follows: device 0 no longer holds the table.
  absl::StatusOr<ListScheduleResult> ls = ListSchedule(*own, WeightedPolicy{}, {});
  ASSERT_TRUE(ls.ok()) << ls.status();
  absl::StatusOr<SimResult> r = Simulate(*own, ls->schedule);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GE(r->devices[0].peak_memory_bytes, 6000);
  EXPECT_LT(r->devices[0].peak_memory_bytes, p.static_bytes[0]);
}

TEST(VocabEmbeddingTest, OnlyAnEmbeddingOverTheHeadsVocabularyIsSplit) {
  ModelGraph g = ModelWithEmbedding();
  g.layers.front().dims.vocab = 999;
  EXPECT_FALSE(SplitsEmbedding(g));
  absl::StatusOr<ProblemBuilder> b =
      ProblemBuilder::Create(g, TwoCpus(), CostModel(), 2, {}, /*vocab_parallel=*/true);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(b->vocab_parallel());
  EXPECT_FALSE(b->split_embedding());
  EXPECT_NEAR(b->StaticBytes(0, 0, 0), 16000, 1e-9);
  PipelineProblem q;
  b->BuildInto({{0, 1, 0, false}, {2, 3, 1, false}}, 4, &q);
  EXPECT_FALSE(q.embed_split);
  EXPECT_TRUE(q.embed_prologue_s.empty());

  g = ModelWithEmbedding();
  g.layers.front().kind = LayerKind::kMlp;
  EXPECT_FALSE(SplitsEmbedding(g));
}

TEST(VocabEmbeddingTest, LowerBoundCostsSplitBothVocabularyLayers) {
  std::vector<LayerCost> layers(3);
  for (LayerCost& c : layers) {
    c.forward_s = 4;
    c.backward_input_s = 2;
    c.weight_grad_s = 6;
  }
  const std::vector<LayerCost> head = WithHeadSplit(layers, 2);
  EXPECT_EQ(head.front().forward_s, 4);
  EXPECT_EQ(head.back().forward_s, 2);
  const std::vector<LayerCost> both = WithHeadSplit(layers, 2, /*split_embedding=*/true);
  EXPECT_EQ(both.front().forward_s, 2);
  EXPECT_EQ(both.front().weight_grad_s, 3);
  EXPECT_EQ(both[1].forward_s, 4);
  EXPECT_EQ(both.back().backward_input_s, 1);
}

}  // namespace
}  // namespace octopipe
