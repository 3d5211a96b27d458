// VShapeMinMaxPartition against brute force over every split of small random chains into 2P
// stages: the same largest device load (to the search's tolerance), and a valid V-shape plan.
#include "tuner/vshape_partition.h"

#include <algorithm>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cluster.h"
#include "core/cost_model.h"
#include "core/synthetic_model.h"
#include "gtest/gtest.h"
#include "simulator/problem_builder.h"
#include "simulator/schedules.h"

namespace octopipe {
namespace {

double MaxDeviceLoad(const ProblemBuilder& b, const std::vector<StageAssignment>& stages) {
  std::vector<double> load(b.num_devices(), 0.0);
  for (const StageAssignment& s : stages) {
    load[s.device] += b.Work(s.first_layer, s.last_layer, s.device);
  }
  return *std::max_element(load.begin(), load.end());
}

// The least largest device load over every split of the L layers into 2P non-empty stages.
double BruteForce(const ProblemBuilder& b) {
  const int L = b.num_layers(), P = b.num_devices(), S = 2 * P;
  const std::vector<int> device = VShapePlacement(P);
  double best = 1e300;
  for (uint32_t cuts = 0; cuts < (1u << (L - 1)); ++cuts) {
    if (__builtin_popcount(cuts) != S - 1) continue;
    std::vector<StageAssignment> stages;
    int first = 0;
    for (int l = 1; l <= L; ++l) {
      if (l == L || (cuts >> (l - 1)) & 1u) {
        StageAssignment st;
        st.first_layer = first;
        st.last_layer = l - 1;
        st.device = device[stages.size()];
        stages.push_back(st);
        first = l;
      }
    }
    best = std::min(best, MaxDeviceLoad(b, stages));
  }
  return best;
}

TEST(VShapePartitionTest, MatchesBruteForceOnRandomChains) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> cost(0.1, 2.0);
  const CostModel cost_model;
  for (int trial = 0; trial < 40; ++trial) {
    const int P = 2 + trial % 2;
    const int L = 2 * P + static_cast<int>(rng() % 6);
    SCOPED_TRACE(absl::StrCat("trial ", trial, " L=", L, " P=", P));
    absl::StatusOr<ModelGraph> model =
        ParseSyntheticModel(absl::StrCat("layers=", L, ",f=1,b=1,w=1"));
    ASSERT_TRUE(model.ok()) << model.status();
    for (Layer& l : model->layers) {
      l.measured.forward_s = cost(rng);
      l.measured.backward_input_s = cost(rng);
      l.measured.weight_grad_s = cost(rng);
    }
    absl::StatusOr<ProblemBuilder> b =
        ProblemBuilder::Create(*model, SyntheticCluster(P), cost_model, P);
    ASSERT_TRUE(b.ok()) << b.status();
    const std::vector<StageAssignment> stages = VShapeMinMaxPartition(*b);
    ASSERT_EQ(static_cast<int>(stages.size()), 2 * P);
    const std::vector<int> device = VShapePlacement(P);
    for (int s = 0; s < 2 * P; ++s) {
      EXPECT_EQ(stages[s].device, device[s]);
      EXPECT_LE(stages[s].first_layer, stages[s].last_layer);
      EXPECT_EQ(stages[s].first_layer, s == 0 ? 0 : stages[s - 1].last_layer + 1);
    }
    EXPECT_EQ(stages.back().last_layer, L - 1);
    const double exact = BruteForce(*b);
    EXPECT_LE(MaxDeviceLoad(*b, stages), exact * (1 + 2e-4));
  }
}

TEST(VShapePartitionTest, TooFewLayersOrDevicesGiveNothing) {
  absl::StatusOr<ModelGraph> model = ParseSyntheticModel("layers=5,f=1,b=1,w=1");
  ASSERT_TRUE(model.ok());
  const CostModel cost_model;
  absl::StatusOr<ProblemBuilder> three =
      ProblemBuilder::Create(*model, SyntheticCluster(3), cost_model, 3);
  ASSERT_TRUE(three.ok());
  EXPECT_TRUE(VShapeMinMaxPartition(*three).empty());  // 5 layers < 6 stages
  absl::StatusOr<ProblemBuilder> one =
      ProblemBuilder::Create(*model, SyntheticCluster(1), cost_model, 1);
  ASSERT_TRUE(one.ok());
  EXPECT_TRUE(VShapeMinMaxPartition(*one).empty());
}

}  // namespace
}  // namespace octopipe
