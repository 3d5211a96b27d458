// FakeClock: frozen until moved, Advance/Set; ReadCountingClock: advances per reading.
#include "core/fake_clock.h"

#include "gtest/gtest.h"

namespace octopipe {
namespace {

TEST(FakeClockTest, StaysUntilMoved) {
  FakeClock clock(5);
  EXPECT_EQ(clock.NowSeconds(), 5);
  EXPECT_EQ(clock.NowSeconds(), 5);
  clock.Advance(1.5);
  EXPECT_EQ(clock.NowSeconds(), 6.5);
  clock.Set(2);
  EXPECT_EQ(clock.NowSeconds(), 2);
}

TEST(ReadCountingClockTest, AdvancesAfterEachReading) {
  ReadCountingClock clock(0.25);
  EXPECT_EQ(clock.NowSeconds(), 0);
  EXPECT_EQ(clock.NowSeconds(), 0.25);
  EXPECT_EQ(clock.NowSeconds(), 0.5);
}

TEST(ClockTest, ClockOrRealPicksTheGivenClock) {
  FakeClock fake(42);
  EXPECT_EQ(ClockOrReal(&fake).NowSeconds(), 42);
  EXPECT_EQ(&ClockOrReal(nullptr), &RealClock::Default());
  const double a = RealClock::Default().NowSeconds();
  EXPECT_GE(RealClock::Default().NowSeconds(), a);
}

}  // namespace
}  // namespace octopipe
