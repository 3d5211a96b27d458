// Pins the re-plan policy: thresholds, hysteresis, cool-down and the gain rule.
#include "planner_service/replan_policy.h"

#include "gtest/gtest.h"

namespace octopipe::planner {
namespace {

TEST(ReplanPolicyTest, SmallDeviationsNeverTriggerLargeOnesDo) {
  ReplanPolicy p({.start_deviation = 0.10, .stop_deviation = 0.05, .min_gain = 0.05,
                  .cooldown_s = 30});
  EXPECT_FALSE(p.OnReport("j", 0.02, 0));
  EXPECT_FALSE(p.OnReport("j", 0.09, 1));
  EXPECT_TRUE(p.OnReport("j", 0.30, 2));
}

TEST(ReplanPolicyTest, CooldownLimitsReplansWhileDeviating) {
  ReplanPolicy p({.start_deviation = 0.10, .stop_deviation = 0.05, .min_gain = 0.05,
                  .cooldown_s = 30});
  EXPECT_TRUE(p.OnReport("j", 0.30, 0));
  EXPECT_FALSE(p.OnReport("j", 0.30, 10));  // still cooling down
  EXPECT_TRUE(p.OnReport("j", 0.30, 31));
  EXPECT_TRUE(p.OnReport("other", 0.30, 31));  // per job
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
