// Pins InProcHub's contract: per-(src, dst, tag) FIFO order independent of other tags, many
// ranks exchanging concurrently from many threads (eager and synchronous sends), the timeout
// (kDeadlineExceeded naming the peer), and Abort (kUnavailable naming the dead rank, for
// pending and later calls).
#include "executor/inproc_transport.h"

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace octopipe::executor {
namespace {

using ::testing::HasSubstr;

absl::Status SendInt(Transport& t, int dst, uint32_t tag, int32_t v) {
  return t.Send(dst, tag, &v, sizeof(v));
}

int32_t RecvInt(Transport& t, int src, uint32_t tag) {
  int32_t v = -1;
  absl::Status s = t.Recv(src, tag, &v, sizeof(v));
  EXPECT_TRUE(s.ok()) << s;
  return v;
}

TEST(InProcTransportTest, NameRankSize) {
  InProcHub hub(3);
  auto t = hub.Endpoint(2);
  EXPECT_EQ(t->name(), "inproc");
  EXPECT_EQ(t->rank(), 2);
  EXPECT_EQ(t->size(), 3);
}

TEST(InProcTransportTest, FifoPerTagIndependentOfOtherTags) {
  InProcHub hub(2);
  auto a = hub.Endpoint(0);
  auto b = hub.Endpoint(1);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(SendInt(*a, 1, /*tag=*/1, 10 + i).ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(SendInt(*a, 1, /*tag=*/2, 20 + i).ok());
  // Tag 2 first although it was sent last: tags are independent streams.
  EXPECT_EQ(RecvInt(*b, 0, 2), 20);
  EXPECT_EQ(RecvInt(*b, 0, 2), 21);
  EXPECT_EQ(RecvInt(*b, 0, 1), 10);
  EXPECT_EQ(RecvInt(*b, 0, 1), 11);
  EXPECT_EQ(RecvInt(*b, 0, 1), 12);
}

TEST(InProcTransportTest, StreamsOfDifferentSendersDoNotMix) {
  InProcHub hub(3);
  auto r0 = hub.Endpoint(0);
  auto r1 = hub.Endpoint(1);
  auto r2 = hub.Endpoint(2);
  ASSERT_TRUE(SendInt(*r0, 2, 5, 100).ok());
  ASSERT_TRUE(SendInt(*r1, 2, 5, 200).ok());
  EXPECT_EQ(RecvInt(*r2, 1, 5), 200);
  EXPECT_EQ(RecvInt(*r2, 0, 5), 100);
}

TEST(InProcTransportTest, ZeroByteMessage) {
  InProcHub hub(2);
  auto a = hub.Endpoint(0);
  auto b = hub.Endpoint(1);
  ASSERT_TRUE(a->Send(1, 0, nullptr, 0).ok());
  EXPECT_TRUE(b->Recv(0, 0, nullptr, 0).ok());
}

TEST(InProcTransportTest, SizeMismatchIsInvalidArgumentAndKeepsTheMessage) {
  InProcHub hub(2);
  auto a = hub.Endpoint(0);
  auto b = hub.Endpoint(1);
  ASSERT_TRUE(SendInt(*a, 1, 0, 7).ok());
  int64_t wide = 0;
  absl::Status s = b->Recv(0, 0, &wide, sizeof(wide));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("expected 8 bytes"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("has 4 bytes"));
  EXPECT_EQ(RecvInt(*b, 0, 0), 7);
}

TEST(InProcTransportTest, BadPeerIsInvalidArgument) {
  InProcHub hub(2);
  auto a = hub.Endpoint(0);
  int32_t v = 0;
  EXPECT_EQ(a->Send(0, 0, &v, 4).code(), absl::StatusCode::kInvalidArgument);  // self
  EXPECT_EQ(a->Send(2, 0, &v, 4).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a->Recv(-1, 0, &v, 4).code(), absl::StatusCode::kInvalidArgument);
}

// Message m of stream (src -> dst, tag) has a size and contents derived from all four, so a
// message delivered to the wrong stream or out of order fails the check.
std::vector<uint8_t> Payload(int src, int dst, uint32_t tag, int m) {
  const size_t n = static_cast<size_t>((m * 37 + tag * 11 + src) % 97);
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(src * 31 + dst * 17 + tag * 7 + m + i);
  return v;
}

class InProcConcurrencyTest : public ::testing::TestWithParam<bool> {};

// Every rank runs one sending and one receiving thread per (peer, tag): 6 ranks x 5 peers x 2
// tags x 2 directions = 120 threads, each moving 200 messages.
TEST_P(InProcConcurrencyTest, AllPairsAllTagsFromManyThreads) {
  constexpr int kRanks = 6;
  constexpr int kTags = 2;
  constexpr int kMessages = 200;
  InProcOptions options;
  options.synchronous_send = GetParam();
  options.timeout_s = 30;
  InProcHub hub(kRanks, options);
  std::vector<std::unique_ptr<Transport>> ends;
  for (int r = 0; r < kRanks; ++r) ends.push_back(hub.Endpoint(r));

  std::vector<std::thread> threads;
  std::vector<std::string> errors(kRanks * kRanks * kTags * 2);
  for (int self = 0; self < kRanks; ++self) {
    for (int peer = 0; peer < kRanks; ++peer) {
      if (peer == self) continue;
      for (uint32_t tag = 0; tag < kTags; ++tag) {
        const size_t slot = ((self * kRanks + peer) * kTags + tag) * 2;
        threads.emplace_back([&, self, peer, tag, slot] {
          for (int m = 0; m < kMessages; ++m) {
            std::vector<uint8_t> p = Payload(self, peer, tag, m);
            absl::Status s = ends[self]->Send(peer, tag, p.data(), p.size());
            if (!s.ok()) {
              errors[slot] = s.ToString();
              return;
            }
          }
        });
        threads.emplace_back([&, self, peer, tag, slot] {
          for (int m = 0; m < kMessages; ++m) {
            std::vector<uint8_t> want = Payload(peer, self, tag, m);
            std::vector<uint8_t> got(want.size());
            absl::Status s = ends[self]->Recv(peer, tag, got.data(), got.size());
            if (!s.ok() || got != want) {
              errors[slot + 1] =
                  s.ok() ? "contents differ at message " + std::to_string(m) : s.ToString();
              return;
            }
          }
        });
      }
    }
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& e : errors) EXPECT_EQ(e, "");
}

INSTANTIATE_TEST_SUITE_P(EagerAndSynchronous, InProcConcurrencyTest, ::testing::Bool());

TEST(InProcTransportTest, RecvTimesOutNamingThePeer) {
  InProcOptions options;
  options.timeout_s = 0.05;
  InProcHub hub(3, options);
  auto t = hub.Endpoint(0);
  int32_t v;
  const absl::Time start = absl::Now();
  absl::Status s = t->Recv(2, 4, &v, sizeof(v));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(50));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(s.message()), HasSubstr("Recv from rank 2"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("tag 4"));
}

TEST(InProcTransportTest, SynchronousSendTimesOutWithoutReceiver) {
  InProcOptions options;
  options.timeout_s = 0.05;
  options.synchronous_send = true;
  InProcHub hub(2, options);
  auto t = hub.Endpoint(0);
  absl::Status s = SendInt(*t, 1, 0, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(s.message()), HasSubstr("Send to rank 1"));
}

TEST(InProcTransportTest, AbortFailsBlockedRecvFromTheDeadRank) {
  InProcHub hub(3);  // 60 s timeout: only Abort can end the Recv quickly.
  auto r0 = hub.Endpoint(0);
  absl::Status status;
  absl::Duration waited;
  std::thread receiver([&] {
    const absl::Time start = absl::Now();
    int32_t v;
    status = r0->Recv(1, 0, &v, sizeof(v));
    waited = absl::Now() - start;
  });
  hub.Abort(1);
  receiver.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(status.message()), HasSubstr("rank 1 was aborted"));
  EXPECT_LT(waited, absl::Seconds(30));
}

TEST(InProcTransportTest, AbortFailsLaterCallsAndDropsQueuedMessages) {
  InProcHub hub(3);
  auto r0 = hub.Endpoint(0);
  auto r1 = hub.Endpoint(1);
  auto r2 = hub.Endpoint(2);
  ASSERT_TRUE(SendInt(*r1, 0, 0, 42).ok());  // Queued before rank 1 dies.
  hub.Abort(1);
  int32_t v;
  absl::Status s = r0->Recv(1, 0, &v, sizeof(v));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), HasSubstr("rank 1"));
  EXPECT_EQ(SendInt(*r0, 1, 0, 1).code(), absl::StatusCode::kUnavailable);
  // The dead rank's own calls fail too, so its threads unwind.
  EXPECT_EQ(SendInt(*r1, 2, 0, 1).code(), absl::StatusCode::kUnavailable);
  // Ranks 0 and 2 are unaffected.
  ASSERT_TRUE(SendInt(*r0, 2, 0, 5).ok());
  EXPECT_EQ(RecvInt(*r2, 0, 0), 5);
}

TEST(InProcTransportTest, AbortWakesBlockedSynchronousSend) {
  InProcOptions options;
  options.synchronous_send = true;
  InProcHub hub(2, options);
  auto r0 = hub.Endpoint(0);
  absl::Status status;
  std::thread sender([&] { status = SendInt(*r0, 1, 0, 1); });
  hub.Abort(1);
  sender.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(status.message()), HasSubstr("rank 1"));
}

TEST(InProcTransportTest, EndpointsOutliveTheHub) {
  std::unique_ptr<Transport> a, b;
  {
    InProcHub hub(2);
    a = hub.Endpoint(0);
    b = hub.Endpoint(1);
  }
  ASSERT_TRUE(SendInt(*a, 1, 3, 9).ok());
  EXPECT_EQ(RecvInt(*b, 0, 3), 9);
}

}  // namespace
}  // namespace octopipe::executor
