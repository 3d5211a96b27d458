// Pins TunerOptions::seed_stages: a re-plan's current partition and placement are evaluated
// before the search (a "warm-start" log entry) when they fit the problem, and ignored when they
// do not (devices that no longer exist, layers not covered).
#include <algorithm>

#include "core/cost_model.h"
#include "core/synthetic_model.h"
#include "gtest/gtest.h"
#include "tuner/tuner.h"

namespace octopipe {
namespace {

TunerOptions Options() {
  TunerOptions o;
  o.num_devices = 8;
  o.num_microbatches = 16;
  o.time_budget_s = 2;
  o.threads = 1;
  return o;
}

const TuneLogEntry* WarmStart(const TuneResult& r) {
  auto it = std::find_if(r.log.begin(), r.log.end(),
                         [](const TuneLogEntry& e) { return e.phase == "warm-start"; });
  return it == r.log.end() ? nullptr : &*it;
}

TEST(TunerWarmStartTest, CurrentPlanIsEvaluatedFirstAndNothingWorseIsReturned) {
  const ModelGraph model = *ParseSyntheticModel("layers=64,f=1,b=2,w=1");
  const Cluster cluster = SyntheticCluster(8);
  absl::StatusOr<TuneResult> first = Tune(model, cluster, CostModel(), Options());
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(WarmStart(*first), nullptr);
  TunerOptions o = Options();
  o.seed_stages = first->plan.stages;
  absl::StatusOr<TuneResult> again = Tune(model, cluster, CostModel(), o);
  ASSERT_TRUE(again.ok()) << again.status();
  const TuneLogEntry* warm = WarmStart(*again);
  ASSERT_NE(warm, nullptr);
  EXPECT_GT(warm->evaluations, 0);
  EXPECT_TRUE(again->feasible);
  // The warm start's best is at most what the seeds' policies give the old stages; the search
  // only improves on it.
  EXPECT_LE(again->predicted.iteration_time_s, warm->after_s * (1 + 1e-9));
}

TEST(TunerWarmStartTest, StagesThatDoNotFitTheProblemAreIgnored) {
  const ModelGraph model = *ParseSyntheticModel("layers=64,f=1,b=2,w=1");
  TunerOptions o = Options();
  o.time_budget_s = 0.5;
  o.seed_stages = EvenPartition(64, 8);
  for (int s = 0; s < 8; ++s) o.seed_stages[s].device = s + 4;  // devices 8..11 do not exist
  absl::StatusOr<TuneResult> r = Tune(model, SyntheticCluster(8), CostModel(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(WarmStart(*r), nullptr);
  o.seed_stages = EvenPartition(32, 8);  // covers half the layers
  r = Tune(model, SyntheticCluster(8), CostModel(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(WarmStart(*r), nullptr);
}

}  // namespace
}  // namespace octopipe
