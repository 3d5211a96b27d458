#include "core/leader_hint.h"

#include "gtest/gtest.h"

namespace octopipe {
namespace {

TEST(LeaderHintTest, RoundTripsInsideALongerMessage) {
  const std::string message =
      "CreateJob: this planner replica is a follower; " + LeaderHint("10.0.0.2:50051");
  EXPECT_EQ(LeaderNamedIn(message), "10.0.0.2:50051");
  EXPECT_EQ(LeaderNamedIn("the leader is at [::1]:7"), "[::1]:7");
  EXPECT_EQ(LeaderNamedIn("no leader is elected yet; retry shortly"), std::nullopt);
  EXPECT_EQ(LeaderNamedIn("the leader is at ; retry there"), std::nullopt);
}

}  // namespace
}  // namespace octopipe
