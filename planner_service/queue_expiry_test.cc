#include "planner_service/queue_expiry.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "core/fake_clock.h"
#include "gtest/gtest.h"

namespace octopipe::planner {
namespace {

TEST(QueueExpiryTest, ExpiresOnlyUnclaimedTicketsWhoseDeadlinePassed) {
  FakeClock clock(10);
  QueueExpiry expiry(&clock, /*start_thread=*/false);
  std::vector<int> expired;
  auto a = expiry.Add(11, [&] { expired.push_back(1); });
  auto b = expiry.Add(12, [&] { expired.push_back(2); });
  auto c = expiry.Add(11.5, [&] { expired.push_back(3); });
  EXPECT_EQ(expiry.Poll(), 0);
  EXPECT_TRUE(QueueExpiry::Claim(*a));  // a worker starts a before its deadline
  clock.Set(11.5);
  EXPECT_EQ(expiry.Poll(), 1);  // a is claimed: only c, whose deadline is exactly now
  EXPECT_EQ(expired, std::vector<int>({3}));
  EXPECT_FALSE(QueueExpiry::Claim(*c));  // the worker that reaches c later skips it
  EXPECT_FALSE(QueueExpiry::Claim(*a));  // claimed once only
  clock.Set(20);
  EXPECT_EQ(expiry.Poll(), 1);
  EXPECT_EQ(expired, std::vector<int>({3, 2}));
  EXPECT_EQ(expiry.held(), 0);
  EXPECT_EQ(expiry.Poll(), 0);  // each ticket once
}

// The thread: a ticket due in the past expires without a Poll call, and one that a worker claims
// concurrently with its deadline is either run or expired, never both.
TEST(QueueExpiryTest, ThreadExpiresDueTicketsAndRacesResolveExactlyOnce) {
  RealClock clock;
  QueueExpiry expiry(&clock, /*start_thread=*/true, /*max_wait_s=*/0.01);
  absl::Notification fired;
  auto due = expiry.Add(clock.NowSeconds() - 1, [&] { fired.Notify(); });
  ASSERT_TRUE(fired.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_FALSE(QueueExpiry::Claim(*due));

  constexpr int kTickets = 200;
  std::atomic<int> expired{0};
  std::vector<std::shared_ptr<QueueExpiry::Ticket>> tickets;
  for (int i = 0; i < kTickets; ++i) {
    tickets.push_back(expiry.Add(clock.NowSeconds() + 0.001 * (i % 5), [&] { ++expired; }));
  }
  int claimed = 0;
  for (auto& t : tickets) claimed += QueueExpiry::Claim(*t) ? 1 : 0;
  // Every deadline has passed within 30 s; whatever was not claimed must have expired by then.
  for (int i = 0; i < 3000 && claimed + expired.load() < kTickets; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(claimed + expired.load(), kTickets);
}

TEST(QueueExpiryTest, ShutdownLeavesUnexpiredTicketsToTheirWorkers) {
  FakeClock clock(0);
  QueueExpiry expiry(&clock, /*start_thread=*/true);
  bool ran = false;
  auto t = expiry.Add(5, [&] { ran = true; });
  expiry.Shutdown();
  clock.Set(10);
  EXPECT_TRUE(QueueExpiry::Claim(*t));
  EXPECT_FALSE(ran);
}

}  // namespace
}  // namespace octopipe::planner
