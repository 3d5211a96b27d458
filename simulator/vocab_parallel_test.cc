// Pins vocabulary parallelism in the simulator by hand-computed cases: the broadcast of the
// last hidden state to every shard's S pass, the all-reduce barrier that makes the last stage's
// backward and every T pass wait for the slowest S pass, the shards' memory, the deadlock and
// validation errors, agreement of the list scheduler with the evaluator, and the sizing rules
// (shard fractions, ring all-reduce, the builder's split head).
#include "simulator/vocab_parallel.h"

#include "core/plan.h"
#include "gtest/gtest.h"
#include "simulator/evaluator.h"
#include "simulator/list_scheduler.h"
#include "simulator/problem.h"
#include "simulator/problem_builder.h"
#include "simulator/vocab_test_problems.h"

namespace octopipe {
namespace {

Op F(int s, int m) { return Op{OpKind::kF, s, m}; }
Op B(int s, int m) { return Op{OpKind::kB, s, m}; }
Op W(int s, int m) { return Op{OpKind::kW, s, m}; }
Op S(int d, int m) { return Op{OpKind::kS, d, m}; }
Op T(int d, int m) { return Op{OpKind::kT, d, m}; }

// Two devices, stage d on device d, unequal costs; every message takes 0.1 + bytes / 1000 s.
//   stage 0: F 1, B 2, W 1      stage 1: F 2, B 3, W 1
//   shard 0: S 0.5, T 0.3       shard 1: S 0.4, T 0.4      all-reduce 0.25 s
PipelineProblem TwoDevices(int microbatches) {
  PipelineProblem pb = UniformProblem({0, 1}, 2, microbatches, 1, 2, 1);
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
  return pb;
}

Schedule TwoDeviceOrder() {
  Schedule s;
  s.ops = {{F(0, 0), S(0, 0), B(0, 0), W(0, 0), T(0, 0)},
           {F(1, 0), S(1, 0), B(1, 0), W(1, 0), T(1, 0)}};
  return s;
}

TEST(VocabParallelTest, BroadcastAllReduceBarrierAndShardPassesTimedByHand) {
  EvalOptions timeline;
  timeline.timeline = true;
  for (bool contention : {false, true}) {  // one message per link: contention changes nothing
    PipelineProblem pb = TwoDevices(1);
    pb.link_contention = contention;
    absl::StatusOr<SimResult> r = Simulate(pb, TwoDeviceOrder(), timeline);
    ASSERT_TRUE(r.ok()) << r.status();
    // F0 0-1; its output reaches device 1 at 1.2; F1 1.2-3.2. S1 runs at once on device 1
    // (3.2-3.6); X reaches device 0 at 3.4, S0 3.4-3.9. The all-reduce waits for the slower
    // S0: B1 starts at 3.9 + 0.25 = 4.15 although device 1 is idle from 3.6.
    const std::vector<double> start0 = {0, 3.4, 7.35, 9.35, 10.35};
    const std::vector<double> end0 = {1, 3.9, 9.35, 10.35, 10.65};
    const std::vector<double> start1 = {1.2, 3.2, 4.15, 7.15, 8.15};
    const std::vector<double> end1 = {3.2, 3.6, 7.15, 8.15, 8.55};
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_NEAR(r->op_start_s[0][i], start0[i], 1e-12) << "device 0 op " << i;
      EXPECT_NEAR(r->op_end_s[0][i], end0[i], 1e-12) << "device 0 op " << i;
      EXPECT_NEAR(r->op_start_s[1][i], start1[i], 1e-12) << "device 1 op " << i;
      EXPECT_NEAR(r->op_end_s[1][i], end1[i], 1e-12) << "device 1 op " << i;
    }
    EXPECT_NEAR(r->iteration_time_s, 10.65, 1e-12);
    // Busy time counts the shard passes: device 0 runs 1 + 0.5 + 2 + 1 + 0.3.
    EXPECT_NEAR(r->devices[0].busy_s, 4.8, 1e-12);
    // Transfers: F0 -> F1, the broadcast F1 -> S0, the gradient B1 -> B0; the all-reduce is
    // a barrier, not a link transfer, and S1 gets X on its own device.
    ASSERT_EQ(r->transfers.size(), 3u);
  }
}

TEST(VocabParallelTest, EarlierTPassFillsTheWaitForTheGradient) {
  PipelineProblem pb = TwoDevices(1);
  Schedule order = TwoDeviceOrder();
  order.ops[0] = {F(0, 0), S(0, 0), T(0, 0), B(0, 0), W(0, 0)};
  absl::StatusOr<SimResult> r = Simulate(pb, order);
  ASSERT_TRUE(r.ok()) << r.status();
  // T0 runs 4.15-4.45 while device 0 waits for B1's gradient (7.35); B0 7.35-9.35, W0 -10.35.
  EXPECT_NEAR(r->iteration_time_s, 10.35, 1e-12);
}

TEST(VocabParallelTest, ShardActivationsLiveFromSToT) {
  PipelineProblem pb = TwoDevices(1);
  pb.activation_bytes = {100, 200};
  pb.static_bytes = {1000, 2000};
  absl::StatusOr<SimResult> r = Simulate(pb, TwoDeviceOrder());
  ASSERT_TRUE(r.ok()) << r.status();
  // Device 0: F +100, S +10 -> 110; B frees 100, T frees 10. Device 1: 200 + 20.
  EXPECT_DOUBLE_EQ(r->devices[0].peak_memory_bytes, 1110);
  EXPECT_DOUBLE_EQ(r->devices[1].peak_memory_bytes, 2220);
}

TEST(VocabParallelTest, BackwardBeforeItsShardPassIsADeadlock) {
  Schedule order = TwoDeviceOrder();
  order.ops[1] = {F(1, 0), B(1, 0), S(1, 0), W(1, 0), T(1, 0)};
  absl::StatusOr<SimResult> r = Simulate(TwoDevices(1), order);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("deadlock"), absl::string_view::npos) << r.status();
  EXPECT_NE(r.status().message().find("S1.0"), absl::string_view::npos) << r.status();
}

TEST(VocabParallelTest, MissingMisplacedOrUnexpectedPassesAreNamed) {
  Schedule missing = TwoDeviceOrder();
  missing.ops[1].pop_back();  // T1.0
  absl::StatusOr<SimResult> r = Simulate(TwoDevices(1), missing);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("T1.0 is missing"), absl::string_view::npos) << r.status();

  Schedule misplaced = TwoDeviceOrder();
  misplaced.ops[0][1] = S(1, 0);
  misplaced.ops[1][1] = S(0, 0);
  r = Simulate(TwoDevices(1), misplaced);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("vocabulary shard 1 runs on device 1"),
            absl::string_view::npos)
      << r.status();

  PipelineProblem short_vector = TwoDevices(1);
  short_vector.vocab_t_s.pop_back();
  r = Simulate(short_vector, TwoDeviceOrder());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("vocab_t_s has 1 entries for 2 devices"),
            absl::string_view::npos)
      << r.status();

  PipelineProblem off = TwoDevices(1);
  off.vocab_parallel = false;
  r = Simulate(off, TwoDeviceOrder());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("need vocab_parallel"), absl::string_view::npos)
      << r.status();
}

TEST(VocabParallelTest, ListSchedulerTimingMatchesTheEvaluatorOnThreeUnequalDevices) {
  PipelineProblem pb = ThreeUnequalVocabDevices();
  for (bool split : {true, false}) {
    WeightedPolicy policy;
    ListSchedulerOptions options;
    options.split_backward = split;
    absl::StatusOr<ListScheduleResult> ls = ListSchedule(pb, policy, options);
    ASSERT_TRUE(ls.ok()) << ls.status();
    size_t vocab_ops = 0;
    for (const auto& order : ls->schedule.ops) {
      for (const Op& op : order) vocab_ops += IsVocabPass(op.kind) ? 1 : 0;
    }
    EXPECT_EQ(vocab_ops, 2u * 3 * 6);
    absl::StatusOr<SimResult> r = Simulate(pb, ls->schedule);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_NEAR(r->iteration_time_s, ls->iteration_time_s, 1e-9) << "split " << split;
  }
}

TEST(VocabParallelTest, ShardFractionsFollowDeviceSpeed) {
  const std::vector<double> f = VocabShardFractions({1.0, 2.0});
  ASSERT_EQ(f.size(), 2u);
  EXPECT_NEAR(f[0], 2.0 / 3, 1e-12);
  EXPECT_NEAR(f[1], 1.0 / 3, 1e-12);
  const std::vector<double> even = VocabShardFractions({0.0, 2.0, 3.0, 4.0});
  for (double x : even) EXPECT_DOUBLE_EQ(x, 0.25);

  LayerCost head;
  head.forward_s = 4;
  head.backward_input_s = 6;
  head.weight_grad_s = 2;
  head.activation_bytes = 1000;
  head.activation_bytes_w = 200;
  head.static_bytes = 900;
  const VocabShard v = VocabShardCost(head, 0.25, 0.01);
  EXPECT_NEAR(v.s_s, 2.5 + 0.01, 1e-12);
  EXPECT_NEAR(v.t_s, 0.5 + 0.01, 1e-12);
  EXPECT_NEAR(v.activation_bytes, 200 + 800 * 0.25, 1e-9);
  EXPECT_NEAR(v.static_bytes, 225, 1e-9);
}

TEST(VocabParallelTest, RingAllReduceIsBoundByTheSlowestRingLink) {
  // Three devices; ring 0 -> 1 -> 2 -> 0; link 1 -> 2 has half the bandwidth. 300 bytes:
  // each of the 2 (P - 1) = 4 steps moves 100 bytes: max(0.01 + 0.1, 0.01 + 0.2) = 0.21.
  std::vector<double> latency(9, 0.01), inv_bw(9, 1e-3);
  inv_bw[1 * 3 + 2] = 2e-3;
  inv_bw[2 * 3 + 1] = 1.0;  // not on the ring: ignored
  EXPECT_NEAR(RingAllReduceSeconds(3, latency, inv_bw, 300), 4 * 0.21, 1e-12);
  EXPECT_EQ(RingAllReduceSeconds(1, {0}, {0}, 300), 0);
  EXPECT_DOUBLE_EQ(VocabAllReduceBytes(1000, 10), 1000 + 80);
}

ModelGraph ModelWithHead() {
  ModelGraph g;
  g.name = "with-head";
  g.training.num_microbatches = 4;
  g.training.precision = Precision::kFp32;
  for (int l = 0; l < 4; ++l) {
    Layer layer;
    layer.name = "L" + std::to_string(l);
    layer.kind = l == 3 ? LayerKind::kHead : LayerKind::kMlp;
    if (l == 3) layer.dims.vocab = 1000;
    MeasuredCosts& m = layer.measured;
    m.forward_s = l == 3 ? 0.008 : 0.001;
    m.backward_input_s = l == 3 ? 0.008 : 0.002;
    m.weight_grad_s = l == 3 ? 0.004 : 0.001;
    m.recompute_s = 0.001;
    m.activation_bytes = 1000;
    m.activation_bytes_w = 400;
    m.input_bytes = 100;
    m.output_bytes = l == 3 ? 0 : 100;
    m.param_bytes = 400;
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

TEST(VocabParallelTest, BuilderSplitsTheHeadOverTheDevices) {
  absl::StatusOr<ProblemBuilder> plain =
      ProblemBuilder::Create(ModelWithHead(), TwoCpus(), CostModel(), 2);
  absl::StatusOr<ProblemBuilder> split =
      ProblemBuilder::Create(ModelWithHead(), TwoCpus(), CostModel(), 2, {}, true);
  ASSERT_TRUE(plain.ok() && split.ok()) << split.status();
  EXPECT_TRUE(split->vocab_parallel());
  EXPECT_NEAR(plain->Work(3, 3, 0), 0.02, 1e-12);
  EXPECT_EQ(split->Work(3, 3, 0), 0);  // the head costs nothing in its stage
  const std::vector<StageAssignment> stages = {StageAssignment{0, 1, 0, false},
                                               StageAssignment{2, 3, 1, false}};
  PipelineProblem p, q;
  plain->BuildInto(stages, 4, &p);
  split->BuildInto(stages, 4, &q);
  EXPECT_FALSE(p.vocab_parallel);
  ASSERT_TRUE(q.vocab_parallel);
  EXPECT_NEAR(p.forward_s[1], 0.001 + 0.008 + 0.0002, 1e-12);
  EXPECT_NEAR(q.forward_s[1], 0.001 + 0.0002, 1e-12);
  for (int d = 0; d < 2; ++d) {
    EXPECT_NEAR(q.vocab_s_s[d], (0.008 + 0.008) / 2 + 0.0002, 1e-12);
    EXPECT_NEAR(q.vocab_t_s[d], 0.004 / 2 + 0.0002, 1e-12);
    EXPECT_NEAR(q.vocab_activation_bytes[d], 400 + 600 / 2.0, 1e-9);
  }
  // The head's static bytes move off device 1, half to each device.
  EXPECT_NEAR(q.static_bytes[0] + q.static_bytes[1], p.static_bytes[0] + p.static_bytes[1],
              1e-6);
  EXPECT_NEAR(q.static_bytes[0] - p.static_bytes[0], p.static_bytes[1] - q.static_bytes[1],
              1e-6);
  EXPECT_DOUBLE_EQ(q.vocab_input_bytes, 100);
  // Ring of two: 2 steps of (5e-5 + (100 + 8 x tokens) / 2 / 1e8).
  const double bytes = VocabAllReduceBytes(100, q.tokens_per_microbatch);
  EXPECT_NEAR(q.vocab_allreduce_s, 2 * (5e-5 + bytes / 2 / 1e8), 1e-15);

  // A plan must say which it is.
  Plan plan;
  plan.num_devices = 2;
  plan.num_microbatches = 4;
  plan.stages = stages;
  absl::StatusOr<PipelineProblem> wrong = split->Build(plan);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("vocab_parallel"), absl::string_view::npos);
  plan.vocab_parallel = true;
  EXPECT_TRUE(split->Build(plan).ok());
}

// Formula costs on two hardware kinds (device 0 fast, device 1 3.7x slower in FLOP/s, 3x in
// memory bandwidth): a body of MLP layers and a head of an odd vocabulary.
ModelGraph FormulaModelWithHead(int64_t vocab) {
  ModelGraph g;
  g.name = "formula-with-head";
  g.training.seq_len = 1024;
  g.training.num_microbatches = 4;
  for (int l = 0; l < 4; ++l) {
    Layer layer;
    layer.name = "L" + std::to_string(l);
    layer.kind = l == 3 ? LayerKind::kHead : LayerKind::kMlp;
    layer.dims.hidden = 1024;
    if (l == 3) {
      layer.dims.vocab = vocab;
    } else {
      layer.dims.ffn = 4096;
    }
    g.layers.push_back(layer);
  }
  return g;
}

Cluster FastAndSlow() {
  Cluster c;
  c.name = "fast-and-slow";
  c.hardware.push_back(HardwareSpec{"fast", 1e15, 80e9, 3e12, /*op_overhead_s=*/1e-4});
  c.hardware.push_back(HardwareSpec{"slow", 2.7e14, 80e9, 1e12, /*op_overhead_s=*/2e-4});
  c.nodes.push_back(Node{"a", "fast", 1, LinkSpec{}});
  c.nodes.push_back(Node{"b", "slow", 1, LinkSpec{}});
  c.inter_node_link = LinkSpec{50e9, 5e-6};
  return c;
}

// The builder's shards are the devices' speed on the head rounded to whole columns (the rule
// the executor shares), and each S/T pass is costed by its exact share of the vocabulary.
TEST(VocabParallelTest, HeterogeneousDevicesGetUnequalWholeColumns) {
  const int64_t vocab = 32001;
  const ModelGraph model = FormulaModelWithHead(vocab);
  ASSERT_TRUE(Validate(model).ok()) << Validate(model);
  const Cluster cluster = FastAndSlow();
  absl::StatusOr<ProblemBuilder> b =
      ProblemBuilder::Create(model, cluster, CostModel(), 2, {}, /*vocab_parallel=*/true);
  ASSERT_TRUE(b.ok()) << b.status();
  std::vector<double> head_seconds;
  for (int d = 0; d < 2; ++d) {
    const LayerCost& c = b->layer_cost(3, d);
    head_seconds.push_back(c.forward_s + c.backward_input_s + c.weight_grad_s);
  }
  ASSERT_GT(head_seconds[1], 2 * head_seconds[0]);  // the slow device really is slow
  const std::vector<int64_t> columns = b->vocab_shard_columns();
  EXPECT_EQ(columns, VocabShardColumns(vocab, VocabShardFractions(head_seconds)));
  ASSERT_EQ(columns.size(), 2u);
  EXPECT_EQ(columns[0] + columns[1], vocab);
  EXPECT_GT(columns[0], 2 * columns[1]);  // the fast device takes the larger shard
  // The shard times are close (to a column's worth) but the fast one's is not the slow one's
  // share of the head: each is costed by columns[d] / vocab.
  PipelineProblem q;
  const std::vector<StageAssignment> stages = {{0, 1, 0, false}, {2, 3, 1, false}};
  b->BuildInto(stages, 4, &q);
  for (int d = 0; d < 2; ++d) {
    const VocabShard want = VocabShardCost(b->layer_cost(3, d),
                                           static_cast<double>(columns[d]) / vocab,
                                           cluster.hardware[d].op_overhead_s);
    EXPECT_DOUBLE_EQ(q.vocab_s_s[d], want.s_s) << d;
    EXPECT_DOUBLE_EQ(q.vocab_t_s[d], want.t_s) << d;
    EXPECT_DOUBLE_EQ(q.vocab_activation_bytes[d], want.activation_bytes) << d;
  }
}

// Build(plan) costs the plan's own shards — those it carries, or equal ones for a plan that
// carries none (what the executor runs then) — and refuses columns that do not fit the model.
TEST(VocabParallelTest, BuildCostsThePlansOwnShards) {
  const int64_t vocab = 32001;
  const ModelGraph model = FormulaModelWithHead(vocab);
  const Cluster cluster = FastAndSlow();
  absl::StatusOr<ProblemBuilder> b =
      ProblemBuilder::Create(model, cluster, CostModel(), 2, {}, /*vocab_parallel=*/true);
  ASSERT_TRUE(b.ok()) << b.status();
  Plan plan;
  plan.num_devices = 2;
  plan.num_microbatches = 4;
  plan.vocab_parallel = true;
  plan.stages = {{0, 1, 0, false}, {2, 3, 1, false}};
  auto s_pass = [&](const std::vector<int64_t>& columns, int d) {
    return VocabShardCost(b->layer_cost(3, d), static_cast<double>(columns[d]) / vocab,
                          cluster.hardware[d].op_overhead_s)
        .s_s;
  };
  auto static_bytes = [](const PipelineProblem& p) { return p.static_bytes; };

  plan.vocab_shard_columns = b->vocab_shard_columns();
  absl::StatusOr<PipelineProblem> own = b->Build(plan);
  ASSERT_TRUE(own.ok()) << own.status();
  PipelineProblem search;
  b->BuildInto(plan.stages, 4, &search);
  EXPECT_EQ(own->vocab_s_s, search.vocab_s_s);
  EXPECT_EQ(static_bytes(*own), static_bytes(search));

  for (const std::vector<int64_t>& columns :
       {std::vector<int64_t>{}, std::vector<int64_t>{1, 32000},
        std::vector<int64_t>{16000, 16001}}) {
    plan.vocab_shard_columns = columns;
    const std::vector<int64_t> ran = columns.empty() ? std::vector<int64_t>{16001, 16000} : columns;
    absl::StatusOr<PipelineProblem> p = b->Build(plan);
    ASSERT_TRUE(p.ok()) << p.status();
    for (int d = 0; d < 2; ++d) {
      EXPECT_DOUBLE_EQ(p->vocab_s_s[d], s_pass(ran, d)) << ran[0] << " device " << d;
    }
    // The shards' static bytes follow the columns; their total is the head's either way.
    EXPECT_NEAR(p->static_bytes[0] + p->static_bytes[1],
                search.static_bytes[0] + search.static_bytes[1],
                1e-9 * (search.static_bytes[0] + search.static_bytes[1]));
    EXPECT_NE(p->static_bytes, search.static_bytes);
    ASSERT_TRUE(Simulate(*p, ListSchedule(*p, WeightedPolicy{}, {})->schedule).ok());
  }

  plan.vocab_shard_columns = {16000, 16000};
  absl::StatusOr<PipelineProblem> bad = b->Build(plan);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("vocab_shard_columns sum to 32000"),
            absl::string_view::npos)
      << bad.status();
  plan.vocab_shard_columns = {32001};
  bad = b->Build(plan);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("vocab_shard_columns has 1 entries"),
            absl::string_view::npos)
      << bad.status();
}

TEST(VocabParallelTest, AVocabularySmallerThanTheDevicesCannotBeSplit) {
  ModelGraph g = ModelWithHead();
  g.layers.back().dims.vocab = 1;
  absl::StatusOr<ProblemBuilder> b = ProblemBuilder::Create(g, TwoCpus(), CostModel(), 2, {}, true);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(b.status().message().find("vocabulary of 1, smaller than its 2 devices"),
            absl::string_view::npos)
      << b.status();
}

TEST(VocabParallelTest, ModelWithoutAHeadCannotSplitIt) {
  ModelGraph g = ModelWithHead();
  g.layers.back().kind = LayerKind::kMlp;
  absl::StatusOr<ProblemBuilder> b = ProblemBuilder::Create(g, TwoCpus(), CostModel(), 2, {}, true);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(b.status().message().find("vocab_parallel"), absl::string_view::npos);
}

}  // namespace
}  // namespace octopipe
