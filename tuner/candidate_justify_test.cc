// Pins Policy::justify in the candidate evaluator: on irregular splits (many stages per device,
// shaped by StaggeredRebalance) the justified order is never slower than the list schedule,
// the order it stores is the one it scored, and it is faster on some of them.
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cluster.h"
#include "core/cost_model.h"
#include "core/synthetic_model.h"
#include "gtest/gtest.h"
#include "simulator/problem_builder.h"
#include "simulator/schedules.h"
#include "tuner/candidate.h"
#include "tuner/partition.h"
#include "tuner/staggered_balance.h"

namespace octopipe {
namespace {

TEST(CandidateJustifyTest, NeverSlowerScoresWhatItStoresAndHelpsIrregularSplits) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> cost(0.5, 2.0);
  int better = 0, compared = 0;
  for (int trial = 0; trial < 6; ++trial) {
    SCOPED_TRACE(trial);
    const int P = trial % 2 == 0 ? 4 : 3, L = 16, M = 2 * P;
    absl::StatusOr<ModelGraph> model =
        ParseSyntheticModel(absl::StrCat("layers=", L, ",f=1,b=1,w=1"));
    ASSERT_TRUE(model.ok()) << model.status();
    for (Layer& l : model->layers) {
      l.measured.forward_s = cost(rng);
      l.measured.backward_input_s = cost(rng);
      l.measured.weight_grad_s = cost(rng);
    }
    absl::StatusOr<ProblemBuilder> builder =
        ProblemBuilder::Create(*model, SyntheticCluster(P), CostModel(), P);
    ASSERT_TRUE(builder.ok()) << builder.status();
    absl::StatusOr<std::vector<StageAssignment>> loop =
        MinMaxPartition(*builder, LoopPlacement(P, 2));
    ASSERT_TRUE(loop.ok()) << loop.status();
    const std::vector<StageAssignment> irregular = StaggeredRebalance(*builder, *loop, M, 4);
    CandidateEvaluator ev(*builder, M, /*link_contention=*/false);
    const std::vector<StageAssignment>& regular = *loop;
    for (const std::vector<StageAssignment>* stages : {&regular, &irregular}) {
      for (Policy p : SeedPolicies()) {
        const Score plain = ev.Evaluate(Candidate{*stages, p});
        ASSERT_TRUE(plain.scheduled) << plain.why_not;
        p.justify = true;
        Schedule order;
        const Candidate justified{*stages, p};
        const Score j = ev.Evaluate(justified, &order);
        ASSERT_TRUE(j.scheduled) << j.why_not;
        EXPECT_LE(j.iteration_time_s, plain.iteration_time_s * (1 + 1e-12));
        EXPECT_LE(j.steady_state_iteration_time_s,
                  plain.steady_state_iteration_time_s * (1 + 1e-12));
        EXPECT_EQ(j.fits, plain.fits);
        absl::StatusOr<SimResult> sim = ev.Simulate(justified, order);
        ASSERT_TRUE(sim.ok()) << sim.status();
        EXPECT_NEAR(sim->iteration_time_s, j.iteration_time_s, 1e-9 * j.iteration_time_s);
        ++compared;
        if (j.iteration_time_s < plain.iteration_time_s * (1 - 1e-6)) ++better;
      }
    }
  }
  EXPECT_EQ(compared, 6 * 2 * static_cast<int>(SeedPolicies().size()));
  EXPECT_GT(better, 5);
}

}  // namespace
}  // namespace octopipe
