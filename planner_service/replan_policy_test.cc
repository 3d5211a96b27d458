// Pins the re-plan policy: thresholds, hysteresis, cool-down and the gain rule.
#include "planner_service/replan_policy.h"

#include "gtest/gtest.h"

namespace octopipe::planner {
namespace {

TEST(ReplanPolicyTest, SmallDeviationsNeverTriggerLargeOnesDo) {
  ReplanPolicy p({.start_deviation = 0.10, .stop_deviation = 0.05, .min_gain = 0.05,
                  .cooldown_s = 30});
  p.OnFirstPlan("j", 0);
  EXPECT_FALSE(p.OnReport("j", 0.02, 30));
  EXPECT_FALSE(p.OnReport("j", 0.09, 31));
  EXPECT_TRUE(p.OnReport("j", 0.30, 32));
}

TEST(ReplanPolicyTest, CooldownLimitsReplansWhileDeviating) {
  ReplanPolicy p({.start_deviation = 0.10, .stop_deviation = 0.05, .min_gain = 0.05,
                  .cooldown_s = 30});
  p.OnFirstPlan("j", -30);
  EXPECT_TRUE(p.OnReport("j", 0.30, 0));
  EXPECT_FALSE(p.OnReport("j", 0.30, 10));  // still cooling down
  EXPECT_TRUE(p.OnReport("j", 0.30, 31));
  p.OnFirstPlan("other", 0);
  EXPECT_TRUE(p.OnReport("other", 0.30, 31));  // per job
}

// The cool-down runs from the job's first plan, whatever the clock's origin (a steady clock
// counts from boot: a long-running machine must not make the first re-plan immediate, nor a
// fresh one delay it).
TEST(ReplanPolicyTest, CooldownStartsAtTheJobsFirstPlanNotAtTheClocksOrigin) {
  ReplanPolicy p({.start_deviation = 0.10, .stop_deviation = 0.05, .min_gain = 0.05,
                  .cooldown_s = 30});
  for (double origin : {0.0, 5.0, 1e6}) {
    const std::string job = "job-" + std::to_string(origin);
    p.OnFirstPlan(job, origin + 2);
    EXPECT_FALSE(p.OnReport(job, 0.30, origin + 3)) << origin;   // 1 s after the first plan
    EXPECT_FALSE(p.OnReport(job, 0.30, origin + 31)) << origin;  // 29 s after
    EXPECT_TRUE(p.OnReport(job, 0.30, origin + 32)) << origin;   // 30 s after
  }
  // A job first seen through a report (its plan came before a planner restart): from there.
  EXPECT_FALSE(p.OnReport("recovered", 0.30, 1e6));
  EXPECT_TRUE(p.OnReport("recovered", 0.30, 1e6 + 30));
}

TEST(ReplanPolicyTest, HysteresisKeepsADeviatingJobDeviatingUntilItSettles) {
  ReplanPolicy p({.start_deviation = 0.10, .stop_deviation = 0.05, .min_gain = 0.05,
                  .cooldown_s = 0});
  EXPECT_TRUE(p.OnReport("j", 0.12, 0));
  // 8% would not start a re-plan, but the job has not settled yet.
  EXPECT_TRUE(p.OnReport("j", 0.08, 1));
  EXPECT_FALSE(p.OnReport("j", 0.04, 2));  // settled
  EXPECT_FALSE(p.OnReport("j", 0.08, 3));  // below the start threshold again
}

TEST(ReplanPolicyTest, OnlyPlansPredictedMinGainFasterReplaceTheCurrentOne) {
  ReplanPolicy p({.start_deviation = 0.10, .stop_deviation = 0.05, .min_gain = 0.05,
                  .cooldown_s = 0});
  EXPECT_TRUE(p.Accept(1.0, 0.90));
  EXPECT_TRUE(p.Accept(1.0, 0.95));
  EXPECT_FALSE(p.Accept(1.0, 0.97));
  EXPECT_FALSE(p.Accept(1.0, 1.10));
}

}  // namespace
}  // namespace octopipe::planner
