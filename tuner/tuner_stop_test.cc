// Pins TunerOptions::should_stop: a stop signal (client cancelled, deadline, shutdown) ends the
// search like an exhausted budget — GPipe and 1F1B still run so a plan exists, the other
// baselines and every search phase are skipped — without waiting for the budget.
#include <atomic>

#include "core/cost_model.h"
#include "core/synthetic_model.h"
#include "gtest/gtest.h"
#include "tuner/tuner.h"

namespace octopipe {
namespace {

TEST(TunerStopTest, StopSignalSkipsTheSearchAndTheOptionalBaselines) {
  const ModelGraph model = *ParseSyntheticModel("layers=64,f=1,b=2,w=1");
  const Cluster cluster = SyntheticCluster(8);
  TunerOptions o;
  o.num_devices = 8;
  o.num_microbatches = 16;
  o.time_budget_s = 3600;  // only the stop signal can end this early
  o.threads = 1;
  std::atomic<int> polls{0};
  o.should_stop = [&polls] {
    ++polls;
    return true;
  };
  absl::StatusOr<TuneResult> r = Tune(model, cluster, CostModel(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(polls.load(), 0);
  EXPECT_TRUE(r->budget_exhausted);
  EXPECT_EQ(r->evaluations, 0);
  EXPECT_TRUE(r->feasible);  // the 1F1B baseline is the answer
  EXPECT_EQ(r->origin, PlanOrigin::kBaseline) << PlanOriginText(*r);
  ASSERT_EQ(r->baselines.size(), 9u);
  EXPECT_TRUE(r->baselines[0].ran);
  EXPECT_TRUE(r->baselines[1].ran);
  for (size_t i = 2; i < r->baselines.size(); ++i) {
    EXPECT_EQ(r->baselines[i].error, "skipped: time budget exhausted") << r->baselines[i].name;
  }
}

TEST(TunerStopTest, NoStopSignalSearchesAsBefore) {
  const ModelGraph model = *ParseSyntheticModel("layers=64,f=1,b=2,w=1");
  TunerOptions o;
  o.num_devices = 8;
  o.num_microbatches = 16;
  o.time_budget_s = 3600;
  o.threads = 1;
  o.should_stop = [] { return false; };
  absl::StatusOr<TuneResult> r = Tune(model, SyntheticCluster(8), CostModel(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->evaluations, 0);
  for (const BaselineResult& b : r->baselines) EXPECT_NE(b.error, "skipped: time budget exhausted");
}

}  // namespace
}  // namespace octopipe
