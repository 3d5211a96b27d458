// Pins MinMaxPartition's contract: among every split of the layer chain into the given stages it
// returns one whose largest stage work (on each stage's own device) is the smallest possible —
// checked against brute force over all compositions, for measured per-layer costs and for
// formula costs on a cluster of two hardware kinds — and it rejects more stages than layers.
#include "tuner/partition.h"

#include <algorithm>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cluster.h"
#include "core/cost_model.h"
#include "core/model_graph.h"
#include "gtest/gtest.h"
#include "simulator/problem_builder.h"

namespace octopipe {
namespace {

// L fully measured layers with random times (and memory figures, which must not matter).
ModelGraph MeasuredModel(int L, std::mt19937& rng) {
  std::uniform_real_distribution<double> t(0.05, 3.0);
  std::uniform_real_distribution<double> bytes(1e6, 1e9);
  ModelGraph m;
  m.name = "measured";
  for (int l = 0; l < L; ++l) {
    Layer layer;
    layer.name = absl::StrCat("L", l);
    layer.kind = LayerKind::kMlp;
    layer.measured.forward_s = t(rng);
    layer.measured.backward_input_s = t(rng);
    layer.measured.weight_grad_s = t(rng);
    layer.measured.activation_bytes = bytes(rng);
    layer.measured.param_bytes = bytes(rng);
    layer.measured.output_bytes = bytes(rng);
    m.layers.push_back(layer);
  }
  return m;
}

// L MLP layers of random widths and no measured costs: their times come from the formulas, so
// they differ by hardware.
ModelGraph FormulaModel(int L, std::mt19937& rng) {
  std::uniform_int_distribution<int> width(1, 16);
  ModelGraph m;
  m.name = "formula";
  m.training.seq_len = 1024;
  for (int l = 0; l < L; ++l) {
    Layer layer;
    layer.name = absl::StrCat("L", l);
    layer.kind = LayerKind::kMlp;
    layer.dims.hidden = 256 * width(rng);
    layer.dims.ffn = 512 * width(rng);
    m.layers.push_back(layer);
  }
  return m;
}

// `devices` single-device nodes alternating a fast and a 3.7x slower hardware kind.
Cluster TwoKindCluster(int devices) {
  Cluster c;
  c.name = "two-kinds";
  c.hardware.push_back(HardwareSpec{"fast", 1e15, 80e9, 3e12});
  c.hardware.push_back(HardwareSpec{"slow", 2.7e14, 80e9, 1e12});
  for (int d = 0; d < devices; ++d) {
    Node n;
    n.name = absl::StrCat("node", d);
    n.hardware = d % 2 == 0 ? "fast" : "slow";
    n.num_devices = 1;
    c.nodes.push_back(n);
  }
  c.inter_node_link = LinkSpec{50e9, 5e-6};
  return c;
}

// The smallest largest-stage work over every composition of the layers into
// stage_device.size() contiguous non-empty stages, by enumeration.
double BruteForceMinMax(const ProblemBuilder& b, const std::vector<int>& stage_device) {
  const int L = b.num_layers();
  const int S = static_cast<int>(stage_device.size());
  double best = std::numeric_limits<double>::infinity();
  // Stage s starts at first[s]; recurse over where each stage ends.
  std::vector<int> first(S + 1, 0);
  first[S] = L;
  auto rec = [&](auto&& self, int s, double worst) -> void {
    if (s == S - 1) {
      worst = std::max(worst, b.Work(first[s], L - 1, stage_device[s]));
      best = std::min(best, worst);
      return;
    }
    // Leave at least one layer for each later stage.
    for (int end = first[s]; end <= L - (S - s); ++end) {
      first[s + 1] = end + 1;
      self(self, s + 1, std::max(worst, b.Work(first[s], end, stage_device[s])));
    }
  };
  rec(rec, 0, 0.0);
  return best;
}

// The partition covers [0, L) contiguously with S non-empty stages on the given devices.
void ExpectValidPartition(const std::vector<StageAssignment>& stages, int L,
                          const std::vector<int>& stage_device, const std::string& what) {
  ASSERT_EQ(stages.size(), stage_device.size()) << what;
  int next = 0;
  for (size_t s = 0; s < stages.size(); ++s) {
    EXPECT_EQ(stages[s].first_layer, next) << what << " stage " << s;
    EXPECT_LE(stages[s].first_layer, stages[s].last_layer) << what << " stage " << s;
    EXPECT_EQ(stages[s].device, stage_device[s]) << what << " stage " << s;
    EXPECT_FALSE(stages[s].recompute) << what << " stage " << s;
    next = stages[s].last_layer + 1;
  }
  EXPECT_EQ(next, L) << what;
}

// Random placements of S stages on P devices (devices may repeat, as in loop and V shapes).
std::vector<int> RandomPlacement(int S, int P, std::mt19937& rng) {
  std::uniform_int_distribution<int> dev(0, P - 1);
  std::vector<int> out(S);
  for (int& d : out) d = dev(rng);
  return out;
}

void CheckAgainstBruteForce(const ModelGraph& model, const Cluster& cluster, int P,
                            std::mt19937& rng, const std::string& label) {
  const CostModel cost;
  absl::StatusOr<ProblemBuilder> b = ProblemBuilder::Create(model, cluster, cost, P);
  ASSERT_TRUE(b.ok()) << b.status();
  const int L = model.num_layers();
  for (int S = 1; S <= L; ++S) {
    const std::vector<int> placement = RandomPlacement(S, P, rng);
    const std::string what = absl::StrCat(label, " L=", L, " S=", S, " P=", P);
    absl::StatusOr<std::vector<StageAssignment>> got = MinMaxPartition(*b, placement);
    ASSERT_TRUE(got.ok()) << what << ": " << got.status();
    ExpectValidPartition(*got, L, placement, what);
    const double want = BruteForceMinMax(*b, placement);
    EXPECT_NEAR(MaxStageWork(*b, *got), want, 1e-9 * want) << what;
  }
}

TEST(MinMaxPartitionTest, EqualsBruteForceOnRandomMeasuredCostsOnIdenticalDevices) {
  std::mt19937 rng(20240611);
  for (int trial = 0; trial < 30; ++trial) {
    const int L = 1 + trial % 10;
    const int P = 1 + trial % 4;
    CheckAgainstBruteForce(MeasuredModel(L, rng), SyntheticCluster(P), P, rng,
                           absl::StrCat("measured trial ", trial));
  }
}

TEST(MinMaxPartitionTest, EqualsBruteForceOnFormulaCostsOnTwoHardwareKinds) {
  std::mt19937 rng(77);
  const Cluster cluster = TwoKindCluster(4);
  for (int trial = 0; trial < 30; ++trial) {
    const int L = 1 + trial % 10;
    const int P = std::min(4, 2 + trial % 3);
    CheckAgainstBruteForce(FormulaModel(L, rng), cluster, P, rng,
                           absl::StrCat("formula trial ", trial));
  }
}

TEST(MinMaxPartitionTest, SlowDeviceGetsFewerLayersOnTwoHardwareKinds) {
  // Guards the heterogeneous test above: formula costs depend on the hardware. Six identical
  // layers, a fast device and one 1e15 / 2.7e14 = 3.7x slower: splits 5+1 (max 5 units on the
  // fast one) beat 4+2 (7.4 units on the slow one), whichever device comes first.
  const double slowdown = 1e15 / 2.7e14;
  ModelGraph model;
  model.name = "identical";
  model.training.seq_len = 1024;
  for (int l = 0; l < 6; ++l) {
    Layer layer;
    layer.name = absl::StrCat("L", l);
    layer.kind = LayerKind::kMlp;
    layer.dims.hidden = 1024;
    layer.dims.ffn = 4096;
    model.layers.push_back(layer);
  }
  const CostModel cost;
  absl::StatusOr<ProblemBuilder> b = ProblemBuilder::Create(model, TwoKindCluster(2), cost, 2);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NEAR(b->Work(0, 0, 1), slowdown * b->Work(0, 0, 0), 1e-9 * b->Work(0, 0, 1));
  absl::StatusOr<std::vector<StageAssignment>> fast_first = MinMaxPartition(*b, {0, 1});
  ASSERT_TRUE(fast_first.ok()) << fast_first.status();
  EXPECT_EQ((*fast_first)[0].last_layer, 4);  // layers 0-4 fast, 5 slow
  absl::StatusOr<std::vector<StageAssignment>> slow_first = MinMaxPartition(*b, {1, 0});
  ASSERT_TRUE(slow_first.ok()) << slow_first.status();
  EXPECT_EQ((*slow_first)[0].last_layer, 0);  // layer 0 slow, 1-5 fast
  EXPECT_NEAR(MaxStageWork(*b, *slow_first), 5 * b->Work(0, 0, 0), 1e-9 * b->Work(0, 5, 0));
}

TEST(MinMaxPartitionTest, MeasuredCostsAreDeviceIndependentOnTwoHardwareKinds) {
  // Measured times override the formulas whatever the hardware, so every placement of S stages
  // reaches the same optimum, which brute force confirms.
  std::mt19937 rng(99);
  const CostModel cost;
  for (int trial = 0; trial < 10; ++trial) {
    const int L = 3 + trial % 8;
    const ModelGraph model = MeasuredModel(L, rng);
    absl::StatusOr<ProblemBuilder> b = ProblemBuilder::Create(model, TwoKindCluster(3), cost, 3);
    ASSERT_TRUE(b.ok()) << b.status();
    for (int l = 0; l < L; ++l) {
      EXPECT_DOUBLE_EQ(b->Work(l, l, 0), b->Work(l, l, 1)) << "layer " << l;
    }
    const int S = 1 + trial % L;
    const std::vector<int> all_fast(S, 0);
    const double want = BruteForceMinMax(*b, all_fast);
    for (int k = 0; k < 4; ++k) {
      const std::vector<int> placement = RandomPlacement(S, 3, rng);
      absl::StatusOr<std::vector<StageAssignment>> got = MinMaxPartition(*b, placement);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_NEAR(MaxStageWork(*b, *got), want, 1e-9 * want) << "trial " << trial;
    }
  }
}

TEST(MinMaxPartitionTest, OneStagePerLayerAndOneStageForAll) {
  std::mt19937 rng(3);
  const ModelGraph model = MeasuredModel(5, rng);
  const CostModel cost;
  absl::StatusOr<ProblemBuilder> b = ProblemBuilder::Create(model, SyntheticCluster(5), cost, 5);
  ASSERT_TRUE(b.ok());
  absl::StatusOr<std::vector<StageAssignment>> each = MinMaxPartition(*b, {0, 1, 2, 3, 4});
  ASSERT_TRUE(each.ok());
  for (int s = 0; s < 5; ++s) {
    EXPECT_EQ((*each)[s].first_layer, s);
    EXPECT_EQ((*each)[s].last_layer, s);
  }
  absl::StatusOr<std::vector<StageAssignment>> one = MinMaxPartition(*b, {2});
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].first_layer, 0);
  EXPECT_EQ((*one)[0].last_layer, 4);
  EXPECT_EQ((*one)[0].device, 2);
  EXPECT_DOUBLE_EQ(MaxStageWork(*b, *one), b->Work(0, 4, 2));
}

TEST(MinMaxPartitionTest, MoreStagesThanLayersIsInvalidArgument) {
  std::mt19937 rng(1);
  const ModelGraph model = MeasuredModel(3, rng);
  const CostModel cost;
  absl::StatusOr<ProblemBuilder> b = ProblemBuilder::Create(model, SyntheticCluster(2), cost, 2);
  ASSERT_TRUE(b.ok());
  absl::StatusOr<std::vector<StageAssignment>> r = MinMaxPartition(*b, {0, 1, 0, 1});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("4 stages"), absl::string_view::npos) << r.status();
  EXPECT_NE(r.status().message().find("3 layers"), absl::string_view::npos) << r.status();
  absl::StatusOr<std::vector<StageAssignment>> none = MinMaxPartition(*b, {});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace octopipe
