// Pins what ProblemBuilder takes from a measured profile (octopipe profile's files): measured
// per-layer F, B, W, R seconds and the executor's bytes are summed per stage, the hardware's
// per-op overhead is added once to every stage op, and messages cost the link's latency plus
// bytes / bandwidth.
#include "simulator/problem_builder.h"

#include "gtest/gtest.h"
#include "simulator/evaluator.h"
#include "simulator/pipeline_rules.h"

namespace octopipe {
namespace {

ModelGraph MeasuredModel() {
  ModelGraph g;
  g.name = "measured";
  g.training.num_microbatches = 4;
  g.training.precision = Precision::kFp32;
  for (int l = 0; l < 4; ++l) {
    Layer layer;
    layer.name = "L" + std::to_string(l);
    layer.kind = LayerKind::kMlp;
    MeasuredCosts& m = layer.measured;
    m.forward_s = 0.001 * (l + 1);
    m.backward_input_s = 0.002 * (l + 1);
    m.weight_grad_s = 0.0005 * (l + 1);
    m.recompute_s = 0.0011 * (l + 1);
    m.activation_bytes = 1000.0 * (l + 1);
    m.activation_bytes_w = 1500.0 * (l + 1);  // the executor keeps more after B than after F
    m.input_bytes = 100;
    m.output_bytes = 100;
    m.param_bytes = 400;
    g.layers.push_back(layer);
  }
  return g;
}

Cluster MeasuredCluster() {
  Cluster c;
  c.name = "measured";
  c.hardware.push_back(HardwareSpec{"cpu", 1e10, 1e9, 1e10, /*op_overhead_s=*/0.0002});
  c.nodes.push_back(Node{"n", "cpu", 2, LinkSpec{1e8, 5e-5}});
  c.inter_node_link = LinkSpec{1e8, 5e-5};
  return c;
}

// FP8 training needs FP8 tensor cores on every device planned: a mixed cluster's A100s have
// none, and the error names the field, the hardware and the device.
TEST(ProblemBuilderTest, Fp8NeedsAnFp8PeakOnEveryDevice) {
  ModelGraph model = MeasuredModel();
  model.training.precision = Precision::kFp8;
  Cluster cluster = MeasuredCluster();
  absl::StatusOr<ProblemBuilder> refused = ProblemBuilder::Create(model, cluster, CostModel(), 2);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status()));
  EXPECT_NE(refused.status().message().find(
                "training.precision: fp8 needs FP8 tensor cores, but hardware 'cpu' (device 0"),
            std::string::npos)
      << refused.status();
  cluster.hardware[0].peak_flops_fp8 = 2e10;
  EXPECT_TRUE(ProblemBuilder::Create(model, cluster, CostModel(), 2).ok());
}

TEST(ProblemBuilderTest, MeasuredProfileOverheadAndLinkAreWhatTheExecutorPays) {
  ASSERT_TRUE(Validate(MeasuredModel()).ok());
  ASSERT_TRUE(Validate(MeasuredCluster()).ok());
  Plan plan;
  plan.num_devices = 2;
  plan.num_microbatches = 4;
  plan.stages = {StageAssignment{0, 1, 0, false}, StageAssignment{2, 3, 1, true}};
  absl::StatusOr<ProblemBuilder> b =
      ProblemBuilder::Create(MeasuredModel(), MeasuredCluster(), CostModel(), 2);
  ASSERT_TRUE(b.ok()) << b.status();
  PipelineProblem p;
  b->BuildInto(plan.stages, 4, &p);
  EXPECT_NEAR(p.forward_s[0], 0.001 + 0.002 + 0.0002, 1e-12);
  EXPECT_NEAR(p.backward_input_s[1], 0.006 + 0.008 + 0.0002, 1e-12);
  EXPECT_NEAR(p.weight_grad_s[1], 0.0015 + 0.002 + 0.0002, 1e-12);
  EXPECT_NEAR(p.recompute_s[1], 0.0033 + 0.0044 + 0.0002, 1e-12);
  EXPECT_DOUBLE_EQ(p.activation_bytes[0], 3000);
  EXPECT_DOUBLE_EQ(p.activation_bytes_w[0], 4500);
  EXPECT_DOUBLE_EQ(p.input_bytes[1], 100);
  EXPECT_DOUBLE_EQ(p.output_bytes[0], 100);
  EXPECT_NEAR(p.transfer_s(0, 1, 100), 5e-5 + 100 / 1e8, 1e-15);
  // Layer costs themselves carry no overhead (it is per op, not per layer).
  EXPECT_NEAR(b->layer_cost(0, 0).forward_s, 0.001, 1e-15);
  // An unsplit backward is one op: it pays the overhead once, as the executor does.
  EXPECT_NEAR(OpDuration(p, OpKind::kBW, 1), 0.006 + 0.008 + 0.0015 + 0.002 + 0.0002, 1e-12);
  EXPECT_NEAR(OpDuration(p, OpKind::kB, 1) + OpDuration(p, OpKind::kW, 1),
              0.006 + 0.008 + 0.0015 + 0.002 + 2 * 0.0002, 1e-12);
}

TEST(ProblemBuilderTest, UnsplitBackwardPaysTheOpOverheadOnceInTheEvaluator) {
  Plan plan;
  plan.num_devices = 1;
  plan.num_microbatches = 1;
  plan.stages = {StageAssignment{0, 3, 0, false}};
  absl::StatusOr<ProblemBuilder> b =
      ProblemBuilder::Create(MeasuredModel(), MeasuredCluster(), CostModel(), 1);
  ASSERT_TRUE(b.ok()) << b.status();
  PipelineProblem p;
  b->BuildInto(plan.stages, 1, &p);
  Schedule unsplit, split;
  unsplit.ops = {{Op{OpKind::kF, 0, 0}, Op{OpKind::kBW, 0, 0}}};
  split.ops = {{Op{OpKind::kF, 0, 0}, Op{OpKind::kB, 0, 0}, Op{OpKind::kW, 0, 0}}};
  absl::StatusOr<SimResult> u = Simulate(p, unsplit), s = Simulate(p, split);
  ASSERT_TRUE(u.ok() && s.ok());
  // F + BW pays two overheads; F + B + W three.
  EXPECT_NEAR(s->iteration_time_s - u->iteration_time_s, 0.0002, 1e-12);
  EXPECT_NEAR(u->iteration_time_s,
              p.forward_s[0] + p.backward_input_s[0] + p.weight_grad_s[0] - 0.0002, 1e-12);
}

// message_cpu_s is charged to every F and B once per neighbouring stage on another device
// (its message in and its message out); W and R send nothing, stages on one device nothing.
TEST(ProblemBuilderTest, MessageCpuCostIsChargedToTheOpsThatSendOrReceive) {
  Cluster c = MeasuredCluster();
  c.hardware[0].message_cpu_s = 0.0003;
  ASSERT_TRUE(Validate(c).ok());
  absl::StatusOr<ProblemBuilder> b = ProblemBuilder::Create(MeasuredModel(), c, CostModel(), 2);
  ASSERT_TRUE(b.ok()) << b.status();
  // Stages 0, 1, 2 on devices 0, 1, 1: stage 0 talks to 1; stage 1 to 0 (not 2); stage 2 to none.
  const std::vector<StageAssignment> stages = {StageAssignment{0, 0, 0, false},
                                               StageAssignment{1, 1, 1, false},
                                               StageAssignment{2, 3, 1, false}};
  PipelineProblem p;
  b->BuildInto(stages, 4, &p);
  EXPECT_NEAR(p.forward_s[0], 0.001 + 0.0002 + 0.0003, 1e-12);
  EXPECT_NEAR(p.backward_input_s[0], 0.002 + 0.0002 + 0.0003, 1e-12);
  EXPECT_NEAR(p.forward_s[1], 0.002 + 0.0002 + 0.0003, 1e-12);
  EXPECT_NEAR(p.forward_s[2], 0.003 + 0.004 + 0.0002, 1e-12);
  EXPECT_NEAR(p.weight_grad_s[0], 0.0005 + 0.0002, 1e-12);
  EXPECT_NEAR(p.recompute_s[1], 0.0022 + 0.0002, 1e-12);
  // A middle stage between two other devices pays it twice.
  const std::vector<StageAssignment> alternating = {StageAssignment{0, 0, 0, false},
                                                    StageAssignment{1, 1, 1, false},
                                                    StageAssignment{2, 3, 0, false}};
  b->BuildInto(alternating, 4, &p);
  EXPECT_NEAR(p.backward_input_s[1], 0.004 + 0.0002 + 2 * 0.0003, 1e-12);
  c.hardware[0].message_cpu_s = -1;
  EXPECT_NE(Validate(c).message().find("message_cpu_s"), absl::string_view::npos);
}

// training.ep_comm_overlap: a MoE layer's expert-parallel all-to-alls leave F and B for the
// stages' communication tails (forward_tail_s / backward_tail_s), exactly what CostModel::Comm
// says they cost; R keeps them inline (it runs right before its B). Without it there are no
// tails and F and B hold them, as before.
TEST(ProblemBuilderTest, OverlappedExpertAllToAllsBecomeCommunicationTails) {
  ModelGraph model;
  model.training.ep_degree = 8;
  model.training.ep_ranks_per_node = 8;
  for (int l = 0; l < 2; ++l) {
    Layer moe;
    moe.name = "moe" + std::to_string(l);
    moe.kind = LayerKind::kMoe;
    moe.dims.hidden = 4096;
    moe.dims.experts = 8;
    moe.dims.top_k = 2;
    moe.dims.moe_ffn = 14336;
    model.layers.push_back(moe);
  }
  Cluster cluster;
  cluster.hardware.push_back(HardwareSpec{"H100", 989e12, 80e9, 3.35e12});
  cluster.nodes.push_back(Node{"n", "H100", 8, LinkSpec{450e9, 3e-6}});
  cluster.inter_node_link = LinkSpec{50e9, 5e-6};
  const std::vector<StageAssignment> stages = {StageAssignment{0, 1, 0, false}};
  auto build = [&](bool overlap) {
    model.training.ep_comm_overlap = overlap;
    absl::StatusOr<ProblemBuilder> b = ProblemBuilder::Create(model, cluster, CostModel(), 1);
    EXPECT_TRUE(b.ok()) << b.status();
    PipelineProblem p;
    if (b.ok()) b->BuildInto(stages, 4, &p);
    return p;
  };
  const PipelineProblem inline_comm = build(false), tails = build(true);
  EXPECT_TRUE(inline_comm.forward_tail_s.empty());
  const LayerComm comm = CostModel().Comm(model.layers[0], model.training,
                                          CommLinks{LinkSpec{450e9, 3e-6}, LinkSpec{50e9, 5e-6}, 8});
  ASSERT_GT(comm.ep_forward_s, 0);
  ASSERT_EQ(tails.forward_tail_s.size(), 1u);
  EXPECT_NEAR(tails.forward_tail_s[0], 2 * comm.ep_forward_s, 1e-15);
  EXPECT_NEAR(tails.backward_tail_s[0], 2 * comm.ep_backward_input_s, 1e-15);
  EXPECT_NEAR(tails.forward_s[0] + tails.forward_tail_s[0], inline_comm.forward_s[0], 1e-15);
  EXPECT_NEAR(tails.backward_input_s[0] + tails.backward_tail_s[0],
              inline_comm.backward_input_s[0], 1e-15);
  EXPECT_NEAR(tails.recompute_s[0], inline_comm.recompute_s[0], 1e-15);
  // The hardware's SM count unknown: the all-to-alls take nothing from the compute beside them.
  ASSERT_EQ(tails.tail_compute_share.size(), 1u);
  EXPECT_EQ(tails.tail_compute_share[0], 0.0);
  // 132 SMs, 20 of them (the default) for the all-to-all kernels; 0 (copy engines) takes none.
  cluster.hardware[0].sm_count = 132;
  EXPECT_DOUBLE_EQ(build(true).tail_compute_share[0], 20.0 / 132);
  model.training.ep_comm_sms = 0;
  EXPECT_EQ(build(true).tail_compute_share[0], 0.0);
  // SMs for the communication that leave none for the compute are refused, naming the field.
  model.training.ep_comm_sms = 132;
  absl::StatusOr<ProblemBuilder> all =
      ProblemBuilder::Create(model, cluster, CostModel(), 1);
  ASSERT_FALSE(all.ok());
  EXPECT_NE(all.status().message().find("training.ep_comm_sms: 132"), absl::string_view::npos)
      << all.status();
  EXPECT_NE(all.status().message().find("sm_count 132"), absl::string_view::npos);
  // Without the overlap the field is not used.
  model.training.ep_comm_overlap = false;
  EXPECT_TRUE(ProblemBuilder::Create(model, cluster, CostModel(), 1).ok());
}

}  // namespace
}  // namespace octopipe
