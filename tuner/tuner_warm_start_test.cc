// Pins TunerOptions::seed_stages: a re-plan's current partition and placement are evaluated
// before the search (a "warm-start" log entry) when they fit the problem, and ignored when they
// do not (devices that no longer exist, layers not covered).
#include <algorithm>
#include <string>

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

// A budget that runs out before the search schedules anything, where no baseline fits: the
// answer is the fastest baseline ignoring memory, marked infeasible with a reason saying the
// search was cut short (was: an internal error "no candidate could be scheduled at all").
TEST(TunerCutShortTest, NothingFitsAndNoTimeToSearchIsAnInfeasibleAnswerNotAnError) {
  ModelGraph model = *ParseSyntheticModel("layers=16,f=1,b=2,w=1");
  for (Layer& l : model.layers) l.measured.param_bytes = 1e13;  // 10 TB a layer: fits nowhere
  // 80 GB devices below.
  TunerOptions o = Options();
  o.time_budget_s = 3600;
  o.should_stop = [] { return true; };
  Cluster cluster = SyntheticCluster(8);
  cluster.hardware[0].memory_bytes = 80e9;
  absl::StatusOr<TuneResult> r = Tune(model, cluster, CostModel(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->feasible);
  EXPECT_EQ(r->origin, PlanOrigin::kIgnoringMemory);
  EXPECT_NE(r->infeasible_reason.find("the time budget ran out before the search"),
            std::string::npos)
      << r->infeasible_reason;
  EXPECT_EQ(r->required_memory_bytes.size(), 8u);
  EXPECT_FALSE(r->plan.stages.empty());
}

}  // namespace
}  // namespace octopipe
