// Pins StaggeredObjective on a hand-computed case and StaggeredRebalance's contract: it never
// makes a split worse, keeps a valid contiguous cover with every device used and at most
// `max_chunks` stages per device, finds the hand-computed optimum, and never goes below the
// certified lower bound's assignment term (which it shares its model with). StaggeredAnneal and
// AnnealSplit: the same contract, deterministic for a seed, and the annealing leaves local
// optima of the rounds of StaggeredRebalance.
#include "tuner/staggered_balance.h"

#include <cstdio>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cluster.h"
#include "core/cost_model.h"
#include "core/model_graph.h"
#include "gtest/gtest.h"
#include "simulator/problem_builder.h"
#include "tuner/lower_bound.h"

namespace octopipe {
namespace {

ModelGraph Measured(const std::vector<double>& f, const std::vector<double>& bw) {
  ModelGraph m;
  m.name = "measured";
  for (size_t l = 0; l < f.size(); ++l) {
    Layer layer;
    layer.name = absl::StrCat("L", l);
    layer.kind = LayerKind::kMlp;
    layer.measured.forward_s = f[l];
    layer.measured.backward_input_s = bw[l];
    layer.measured.weight_grad_s = bw[l];
    layer.measured.activation_bytes = 1e6;
    layer.measured.param_bytes = 1e6;
    layer.measured.output_bytes = 1e6;
    m.layers.push_back(layer);
  }
  return m;
}

ProblemBuilder Builder(const ModelGraph& m, int P) {
  absl::StatusOr<ProblemBuilder> b = ProblemBuilder::Create(m, SyntheticCluster(P), CostModel(), P);
  EXPECT_TRUE(b.ok()) << b.status();
  return *std::move(b);
}

void ExpectValid(const std::vector<StageAssignment>& st, int L, int P, int max_chunks) {
  ASSERT_FALSE(st.empty());
  EXPECT_EQ(st.front().first_layer, 0);
  EXPECT_EQ(st.back().last_layer, L - 1);
  std::vector<int> chunks(P, 0);
  for (size_t i = 0; i < st.size(); ++i) {
    EXPECT_LE(st[i].first_layer, st[i].last_layer);
    if (i > 0) {
      EXPECT_EQ(st[i].first_layer, st[i - 1].last_layer + 1);
      EXPECT_NE(st[i].device, st[i - 1].device) << "adjacent stages on one device are merged";
    }
    ++chunks[st[i].device];
  }
  for (int d = 0; d < P; ++d) {
    EXPECT_GE(chunks[d], 1) << "device " << d << " lost all its layers";
    EXPECT_LE(chunks[d], max_chunks) << "device " << d;
  }
}

// Four layers of F = B = W = 1 (work 3 each) on two devices, M = 2.
// [0-1]@d0 [2-3]@d1: d0 = 0 + 2 x 6 = 12, d1 = (F0 + F1 = 2) + 2 x 6 = 14.
TEST(StaggeredBalanceTest, ObjectiveAndOptimumByHand) {
  const ModelGraph m = Measured({1, 1, 1, 1}, {1, 1, 1, 1});
  const ProblemBuilder b = Builder(m, 2);
  const std::vector<StageAssignment> even = {{0, 1, 0, false}, {2, 3, 1, false}};
  EXPECT_DOUBLE_EQ(StaggeredObjective(b, even, 2), 14.0);
  // One stage per device: [0-2][3] gives d0 18, [0][1-3] gives d1 1 + 18 = 19, so 14 is best.
  const std::vector<StageAssignment> one = StaggeredRebalance(b, even, 2, /*max_chunks=*/1);
  ExpectValid(one, 4, 2, 1);
  EXPECT_DOUBLE_EQ(StaggeredObjective(b, one, 2), 14.0);
  // Two per device: d1 starts after layer 0 only, e.g. [0]@d0 [1-2]@d1 [3]@d0: d0 12, d1 1 + 12.
  // Loads are multiples of 3 and sum to 12, d1 starts >= 1: 13 is optimal.
  const std::vector<StageAssignment> two = StaggeredRebalance(b, even, 2, /*max_chunks=*/2);
  ExpectValid(two, 4, 2, 2);
  EXPECT_DOUBLE_EQ(StaggeredObjective(b, two, 2), 13.0);
}

TEST(StaggeredBalanceTest, RecomputeStagesCarryTheirReplay) {
  const ModelGraph m = Measured({1, 1, 1, 1}, {1, 1, 1, 1});
  const ProblemBuilder b = Builder(m, 2);
  // d1's two layers replay their forward (R = F = 1 each): 2 + 2 x (6 + 2) = 18.
  EXPECT_DOUBLE_EQ(StaggeredObjective(b, {{0, 1, 0, false}, {2, 3, 1, true}}, 2), 18.0);
}

// Trial `trial` of the random tests: 2-6 devices, a few more layers with F and B = W drawn from
// [0.1, 3), M = P x (1 + trial % 4), 1-4 stages per device, and the even split over P stages in
// device order.
struct RandomCase {
  int P = 0, L = 0, M = 0, max_chunks = 0;
  ModelGraph model;
  std::vector<StageAssignment> even;
};

RandomCase MakeRandomCase(std::mt19937& rng, int trial) {
  std::uniform_real_distribution<double> t(0.1, 3.0);
  RandomCase c;
  c.P = 2 + trial % 5;
  c.L = c.P + 3 + static_cast<int>(rng() % 20);
  c.M = c.P * (1 + trial % 4);
  c.max_chunks = 1 + trial % 4;
  std::vector<double> f(c.L), bw(c.L);
  for (int l = 0; l < c.L; ++l) {
    f[l] = t(rng);
    bw[l] = t(rng);
  }
  c.model = Measured(f, bw);
  for (int s = 0; s < c.P; ++s) c.even.push_back({s * c.L / c.P, (s + 1) * c.L / c.P - 1, s, false});
  return c;
}

TEST(StaggeredBalanceTest, RandomSplitsOnlyImproveAndStayAboveTheCertifiedBound) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    const RandomCase c = MakeRandomCase(rng, trial);
    const int P = c.P, L = c.L, M = c.M, max_chunks = c.max_chunks;
    const ProblemBuilder b = Builder(c.model, P);
    const std::vector<StageAssignment>& start = c.even;
    const std::vector<StageAssignment> r = StaggeredRebalance(b, start, M, max_chunks);
    SCOPED_TRACE(absl::StrCat("trial ", trial, " P=", P, " L=", L, " M=", M));
    ExpectValid(r, L, P, max_chunks);
    const double before = StaggeredObjective(b, start, M);
    const double after = StaggeredObjective(b, r, M);
    EXPECT_LE(after, before * (1 + 1e-12));
    const LowerBound lb = PipelineLowerBound(FastestLayerCosts(b), P, M, false);
    EXPECT_GE(after, lb.assignment_s * (1 - 1e-6));
  }
}

TEST(StaggeredBalanceTest, AnnealingOnlyImprovesIsDeterministicAndStaysAboveTheBound) {
  std::mt19937 rng(11);
  int better_than_rounds = 0;
  for (int trial = 0; trial < 20; ++trial) {
    const RandomCase c = MakeRandomCase(rng, trial);
    const int P = c.P, L = c.L, M = c.M, max_chunks = c.max_chunks;
    const ProblemBuilder b = Builder(c.model, P);
    const std::vector<StageAssignment>& start = c.even;
    SCOPED_TRACE(absl::StrCat("trial ", trial, " P=", P, " L=", L, " M=", M));
    const std::vector<StageAssignment> rounds = StaggeredRebalance(b, start, M, max_chunks);
    const std::vector<StageAssignment> a = StaggeredAnneal(b, rounds, M, max_chunks, 5, 20000);
    ExpectValid(a, L, P, max_chunks);
    EXPECT_EQ(a, StaggeredAnneal(b, rounds, M, max_chunks, 5, 20000)) << "same seed, same split";
    const double r_obj = StaggeredObjective(b, rounds, M);
    const double a_obj = StaggeredObjective(b, a, M);
    EXPECT_LE(a_obj, r_obj * (1 + 1e-12));
    if (a_obj < r_obj * (1 - 1e-9)) ++better_than_rounds;
    const LowerBound lb = PipelineLowerBound(FastestLayerCosts(b), P, M, false);
    EXPECT_GE(a_obj, lb.assignment_s * (1 - 1e-6));
    // AnnealSplit with the same objective as a callback: the same contract.
    auto energy = [&](const std::vector<StageAssignment>& st) { return StaggeredObjective(b, st, M); };
    const std::vector<StageAssignment> g = AnnealSplit(b, rounds, max_chunks, 5, 2000, energy);
    ExpectValid(g, L, P, max_chunks);
    EXPECT_LE(StaggeredObjective(b, g, M), r_obj * (1 + 1e-12));
  }
  // The rounds stop at a split no single round improves; annealing goes on from there.
  EXPECT_GE(better_than_rounds, 3);
  std::printf("annealing improved on the rounds in %d of 20 random splits\n", better_than_rounds);
}

}  // namespace
}  // namespace octopipe
