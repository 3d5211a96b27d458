#include "core/job_event_kind.h"

#include "gtest/gtest.h"

namespace octopipe {
namespace {

TEST(JobEventKindTest, NamesRoundTripAndOthersAreUnknown) {
  for (JobEventKind k : {JobEventKind::kStarted, JobEventKind::kResumed, JobEventKind::kStopped,
                         JobEventKind::kCompleted, JobEventKind::kRankFailed,
                         JobEventKind::kStateSaved, JobEventKind::kPlanRefused}) {
    EXPECT_EQ(ParseJobEventKind(JobEventKindName(k)), k) << JobEventKindName(k);
  }
  EXPECT_EQ(JobEventKindName(JobEventKind::kRankFailed), "rank_failed");
  EXPECT_FALSE(ParseJobEventKind("exploded").has_value());
  EXPECT_FALSE(ParseJobEventKind("").has_value());
  EXPECT_TRUE(ShowsRunning(JobEventKind::kStateSaved));
  EXPECT_FALSE(ShowsRunning(JobEventKind::kCompleted));
  EXPECT_FALSE(ShowsRunning(JobEventKind::kPlanRefused));
}

}  // namespace
}  // namespace octopipe
