// Pins the tuner's vocabulary-parallelism decision: it splits the output layer of a head-bound
// model (and the split plan simulates to what it reports), leaves a balanced model's head on
// its stage after trying both, does not try at all when the head is light, and kOn refuses a
// model without a head.
#include "tuner/vocab_choice.h"

#include <string>

#include "core/fake_clock.h"
#include "gtest/gtest.h"
#include "simulator/evaluator.h"
#include "simulator/problem_builder.h"
#include "tuner/tuner.h"

namespace octopipe {
namespace {

// `body` MLP layers of 1 + 1.5 + 0.5 ms (F, B, W) and a head whose F, B, W are `head` times
// that; small activations, so communication is cheap next to compute.
ModelGraph Model(int body, double head) {
  ModelGraph g;
  g.name = "vocab-test";
  g.training.num_microbatches = 8;
  g.training.seq_len = 256;
  g.training.precision = Precision::kFp32;
  for (int l = 0; l <= body; ++l) {
    const bool is_head = l == body;
    const double k = is_head ? head : 1.0;
    Layer layer;
    layer.name = is_head ? "head" : "L" + std::to_string(l);
    layer.kind = is_head ? LayerKind::kHead : LayerKind::kMlp;
    if (is_head) layer.dims.vocab = 32000;
    MeasuredCosts& m = layer.measured;
    m.forward_s = 0.001 * k;
    m.backward_input_s = 0.0015 * k;
    m.weight_grad_s = 0.0005 * k;
    m.recompute_s = 0.001 * k;
    m.activation_bytes = 1e4;
    m.activation_bytes_w = 4e3;
    m.input_bytes = 1e3;
    m.output_bytes = is_head ? 0 : 1e3;
    m.param_bytes = 1e4;
    g.layers.push_back(layer);
  }
  return g;
}

Cluster FourDevices() {
  Cluster c;
  c.name = "four";
  c.hardware.push_back(HardwareSpec{"gpu", 1e14, 8e10, 2e12, /*op_overhead_s=*/0});
  c.nodes.push_back(Node{"n", "gpu", 4, LinkSpec{1e11, 5e-6}});
  c.inter_node_link = LinkSpec{1e10, 1e-5};
  return c;
}

TunerOptions Options() {
  TunerOptions o;
  o.num_devices = 4;
  o.num_microbatches = 8;
  o.time_budget_s = 4;
  o.clock = std::make_shared<FakeClock>(0);  // frozen: the searches run to convergence
  return o;
}

bool LoggedVocab(const TuneResult& r, const std::string& text) {
  for (const TuneLogEntry& e : r.log) {
    if (e.phase == "vocab" && e.detail.find(text) != std::string::npos) return true;
  }
  return false;
}

TEST(VocabChoiceTest, HeadBoundModelSplitsTheOutputLayer) {
  // 7 layers of 3 ms and a 12 ms head on 4 devices: on its stage the head alone bounds each
  // micro-batch at 12 ms; split, the body (2 layers per device at most, 6 ms) plus a quarter
  // of the head (3 ms) is 9 ms.
  const ModelGraph model = Model(7, 4.0);
  absl::StatusOr<TuneResult> r = Tune(model, FourDevices(), CostModel(), Options());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->feasible);
  EXPECT_TRUE(r->vocab_parallel_tried);
  EXPECT_TRUE(r->vocab_parallel);
  EXPECT_TRUE(r->plan.vocab_parallel);
  EXPECT_TRUE(LoggedVocab(*r, "split over 4 devices")) << r->log.back().detail;
  EXPECT_GT(r->speedup_vs_best_baseline, 1.2);
  // Every device runs an S and a T pass per micro-batch.
  for (int d = 0; d < 4; ++d) {
    int passes = 0;
    for (const Op& op : r->plan.schedule.ops[d]) passes += IsVocabPass(op.kind) ? 1 : 0;
    EXPECT_EQ(passes, 2 * 8) << "device " << d;
  }
  // The plan re-simulated on its own (as `octopipe simulate --plan` does) predicts the same.
  absl::StatusOr<PipelineProblem> pb = BuildProblem(model, FourDevices(), CostModel(), r->plan);
  ASSERT_TRUE(pb.ok()) << pb.status();
  absl::StatusOr<SimResult> sim = Simulate(*pb, r->plan.schedule);
  ASSERT_TRUE(sim.ok()) << sim.status();
  EXPECT_NEAR(sim->iteration_time_s, r->predicted.iteration_time_s, 1e-12);
  // The bound allows the split, so the plan is not below it.
  EXPECT_LE(r->lower_bound.seconds, r->predicted.iteration_time_s * (1 + 1e-9));
}

// Two hardware kinds, device 0 fast and device 1 much slower on the (formula-costed) head: the
// plan carries unequal shards, the fast device's larger, exactly those the search costed
// (ProblemBuilder::vocab_shard_columns), and re-simulating the plan from its own columns
// predicts what the tuner reported.
TEST(VocabChoiceTest, HeterogeneousDevicesPlanUnequalShardsAndTheSimulatorUsesThem) {
  ModelGraph model;
  model.name = "formula-head";
  model.training.seq_len = 1024;
  model.training.num_microbatches = 4;
  for (int l = 0; l < 4; ++l) {
    Layer layer;
    layer.name = "L" + std::to_string(l);
    layer.kind = l == 3 ? LayerKind::kHead : LayerKind::kMlp;
    layer.dims.hidden = 1024;
    if (l == 3) {
      layer.dims.vocab = 64001;
    } else {
      layer.dims.ffn = 2048;
    }
    model.layers.push_back(layer);
  }
  Cluster cluster;
  cluster.name = "fast-and-slow";
  cluster.hardware.push_back(HardwareSpec{"fast", 1e15, 80e9, 3e12});
  cluster.hardware.push_back(HardwareSpec{"slow", 2.7e14, 80e9, 1e12});
  cluster.nodes.push_back(Node{"a", "fast", 1, LinkSpec{}});
  cluster.nodes.push_back(Node{"b", "slow", 1, LinkSpec{}});
  cluster.inter_node_link = LinkSpec{50e9, 5e-6};
  TunerOptions o = Options();
  o.num_devices = 2;
  o.num_microbatches = 4;
  o.vocab_parallel = VocabParallelMode::kOn;
  absl::StatusOr<TuneResult> r = Tune(model, cluster, CostModel(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->plan.vocab_parallel);
  absl::StatusOr<ProblemBuilder> b =
      ProblemBuilder::Create(model, cluster, CostModel(), 2, {}, /*vocab_parallel=*/true);
  ASSERT_TRUE(b.ok()) << b.status();
  const std::vector<int64_t>& columns = r->plan.vocab_shard_columns;
  EXPECT_EQ(columns, b->vocab_shard_columns());
  ASSERT_EQ(columns.size(), 2u);
  EXPECT_EQ(columns[0] + columns[1], 64001);
  EXPECT_GT(columns[0], 2 * columns[1]);
  absl::StatusOr<PipelineProblem> pb = BuildProblem(model, cluster, CostModel(), r->plan);
  ASSERT_TRUE(pb.ok()) << pb.status();
  absl::StatusOr<SimResult> sim = Simulate(*pb, r->plan.schedule);
  ASSERT_TRUE(sim.ok()) << sim.status();
  EXPECT_NEAR(sim->iteration_time_s, r->predicted.iteration_time_s, 1e-12);
  // The same plan run with equal shards (as a plan without the columns is) is predicted slower:
  // the slow device's half of the head holds every micro-batch's all-reduce back.
  Plan equal = r->plan;
  equal.vocab_shard_columns.clear();
  pb = BuildProblem(model, cluster, CostModel(), equal);
  ASSERT_TRUE(pb.ok()) << pb.status();
  sim = Simulate(*pb, equal.schedule);
  ASSERT_TRUE(sim.ok()) << sim.status();
  EXPECT_GT(sim->iteration_time_s, r->predicted.iteration_time_s);
}

TEST(VocabChoiceTest, BalancedModelKeepsTheHeadOnItsStageAfterTryingBoth) {
  // 7 layers and a head of 3 ms each: two layers per device balance exactly, and the split
  // would still leave a device with two body layers plus its head shard and the all-reduce.
  absl::StatusOr<TuneResult> r = Tune(Model(7, 1.0), FourDevices(), CostModel(), Options());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->feasible);
  EXPECT_TRUE(r->vocab_parallel_tried);
  EXPECT_FALSE(r->vocab_parallel);
  EXPECT_FALSE(r->plan.vocab_parallel);
  EXPECT_TRUE(LoggedVocab(*r, "not split"));
  for (const auto& order : r->plan.schedule.ops) {
    for (const Op& op : order) EXPECT_FALSE(IsVocabPass(op.kind)) << OpToString(op);
  }
}

TEST(VocabChoiceTest, LightHeadIsNotTried) {
  // A head of 1/10 of a layer is 4% of a device's share of 7.1 layers of work.
  absl::StatusOr<TuneResult> r = Tune(Model(7, 0.1), FourDevices(), CostModel(), Options());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->vocab_parallel_tried);
  EXPECT_FALSE(r->vocab_parallel);
  EXPECT_TRUE(LoggedVocab(*r, "not tried: the head is"));
}

// An embedding whose table (24000 static bytes: 6000 parameter bytes in fp32, with gradients
// and Adam's moments) alone exceeds a device's 20000 bytes, four MLP layers of 4000 static
// bytes, and a light head (2000 static bytes, a tenth of a layer's work) over the same
// vocabulary, on four devices. Whole, the table fits no device; split by vocabulary, every
// device holds a quarter of it and of the head (6500) besides its layer.
ModelGraph EmbeddingBound(int64_t embedding_vocab) {
  ModelGraph g;
  g.name = "embedding-bound";
  g.training.num_microbatches = 8;
  g.training.seq_len = 16;
  g.training.precision = Precision::kFp32;
  for (int l = 0; l < 6; ++l) {
    Layer layer;
    layer.name = "L" + std::to_string(l);
    layer.kind = l == 0 ? LayerKind::kEmbedding : l == 5 ? LayerKind::kHead : LayerKind::kMlp;
    if (l == 0) layer.dims.vocab = embedding_vocab;
    if (l == 5) layer.dims.vocab = 64;
    const double k = l == 0 || l == 5 ? 0.1 : 1.0;
    MeasuredCosts& m = layer.measured;
    m.forward_s = 0.001 * k;
    m.backward_input_s = l == 0 ? 0.0 : 0.0015 * k;
    m.weight_grad_s = 0.0005 * k;
    m.recompute_s = 0.001 * k;
    m.activation_bytes = 100;
    m.activation_bytes_w = 40;
    m.input_bytes = 10;
    m.output_bytes = l == 5 ? 0 : 10;
    m.param_bytes = l == 0 ? 6000 : l == 5 ? 500 : 1000;
    g.layers.push_back(layer);
  }
  return g;
}

Cluster FourSmallDevices() {
  Cluster c = FourDevices();
  c.hardware.front().memory_bytes = 20000;
  return c;
}

TEST(VocabChoiceTest, EmbeddingTooLargeForOneDeviceFitsSplit) {
  const ModelGraph model = EmbeddingBound(64);
  const Cluster cluster = FourSmallDevices();
  absl::StatusOr<ProblemBuilder> plain = ProblemBuilder::Create(model, cluster, CostModel(), 4);
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_LT(HeadShareOfDevice(*plain), kMinHeadShare);  // the head's work alone would not try
  EXPECT_NEAR(plain->StaticBytes(0, 0, 0), 24000, 1e-9);
  EXPECT_NEAR(VocabMemoryShareOfDevice(*plain, true), 26000.0 / 20000, 1e-12);
  EXPECT_NEAR(VocabMemoryShareOfDevice(*plain, false), 2000.0 / 20000, 1e-12);

  TunerOptions o = Options();
  o.vocab_parallel = VocabParallelMode::kOff;
  absl::StatusOr<TuneResult> whole = Tune(model, cluster, CostModel(), o);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_FALSE(whole->feasible);  // device 0 needs the whole table

  absl::StatusOr<TuneResult> r = Tune(model, cluster, CostModel(), Options());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->feasible) << r->infeasible_reason;
  EXPECT_TRUE(r->vocab_parallel_tried);
  EXPECT_TRUE(r->plan.vocab_parallel);
  EXPECT_TRUE(LoggedVocab(*r, "output layer and embedding split over 4 devices"))
      << r->log.back().detail;
  // Re-simulated on its own, the plan fits every device, the first stage's included.
  absl::StatusOr<PipelineProblem> pb = BuildProblem(model, cluster, CostModel(), r->plan);
  ASSERT_TRUE(pb.ok()) << pb.status();
  ASSERT_TRUE(pb->embed_split);
  absl::StatusOr<SimResult> sim = Simulate(*pb, r->plan.schedule);
  ASSERT_TRUE(sim.ok()) << sim.status();
  EXPECT_TRUE(sim->fits_memory);
  EXPECT_NEAR(sim->iteration_time_s, r->predicted.iteration_time_s, 1e-12);
  for (int d = 0; d < 4; ++d) {
    EXPECT_LE(sim->devices[d].peak_memory_bytes, 20000) << "device " << d;
    EXPECT_GE(pb->static_bytes[d], 6000 + 500) << "device " << d;  // its shards
  }

  // Splitting only the head (an embedding over another vocabulary stays whole) does not fit.
  absl::StatusOr<TuneResult> head_only = Tune(EmbeddingBound(65), cluster, CostModel(), Options());
  ASSERT_TRUE(head_only.ok()) << head_only.status();
  EXPECT_FALSE(head_only->feasible);
}

// Below both thresholds the split is still tried when nothing fits without it: four MLP layers
// of 18000 static bytes (250 bytes of activations per micro-batch) fill four devices of 20000,
// and the embedding's 1800 (9% of a device, with the head's 160 under 10%) tips the device
// that holds it over; split, a quarter of it fits beside every layer.
TEST(VocabChoiceTest, NothingFitsUnsplitTriesTheSplit) {
  ModelGraph model = EmbeddingBound(64);
  for (Layer& layer : model.layers) {
    MeasuredCosts& m = layer.measured;
    m.param_bytes = layer.kind == LayerKind::kEmbedding ? 450 : layer.kind == LayerKind::kHead ? 40
                                                                                             : 4500;
    m.activation_bytes = 250;
    m.activation_bytes_w = 100;
  }
  const Cluster cluster = FourSmallDevices();
  absl::StatusOr<ProblemBuilder> plain = ProblemBuilder::Create(model, cluster, CostModel(), 4);
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_NEAR(plain->StaticBytes(1, 1, 0), 18000, 1e-9);
  ASSERT_LT(HeadShareOfDevice(*plain), kMinHeadShare);
  ASSERT_LT(VocabMemoryShareOfDevice(*plain, true), kMinVocabMemoryShare);

  absl::StatusOr<TuneResult> r = Tune(model, cluster, CostModel(), Options());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->feasible) << r->infeasible_reason;
  EXPECT_TRUE(r->vocab_parallel_tried);
  EXPECT_TRUE(r->plan.vocab_parallel);
  EXPECT_TRUE(LoggedVocab(*r, "(tried because nothing fits unsplit)")) << r->log.back().detail;
}

TEST(VocabChoiceTest, ForcedSplitNeedsAHead) {
  ModelGraph model = Model(7, 4.0);
  model.layers.back().kind = LayerKind::kMlp;
  TunerOptions o = Options();
  o.vocab_parallel = VocabParallelMode::kOn;
  absl::StatusOr<TuneResult> r = Tune(model, FourDevices(), CostModel(), o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("vocab_parallel"), absl::string_view::npos);
}

}  // namespace
}  // namespace octopipe
