// Pins AsyncMessages over a transport without native started messages (InProcHub with
// synchronous sends, i.e. Gloo's rendezvous semantics): started receives and sends never block
// the caller, both ranks may start their sends before any receive is waited for, messages of
// one peer run in start order, a failure fails the peer's queued messages at once, and a
// message abandoned before its turn is never run.
#include "executor/async_messages.h"

#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "executor/inproc_transport.h"
#include "gtest/gtest.h"

namespace octopipe::executor {
namespace {

using Started = absl::StatusOr<std::unique_ptr<PendingMessage>>;

TEST(AsyncMessagesTest, BothRanksSendBeforeReceivingAndMessagesMatchByTag) {
  InProcHub hub(2, InProcOptions{.timeout_s = 30, .synchronous_send = true});
  std::vector<std::unique_ptr<Transport>> endpoints;
  for (int r = 0; r < 2; ++r) endpoints.push_back(hub.Endpoint(r));
  std::vector<absl::Status> results(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      AsyncMessages messages(endpoints[r].get());
      EXPECT_FALSE(messages.native());
      const int peer = 1 - r;
      // Receives in the peer's send order (the fallback receives in start order).
      std::vector<int32_t> got(3, -1);
      std::vector<std::unique_ptr<PendingMessage>> receives;
      for (int i = 0; i < 3; ++i) {
        Started s = messages.StartRecv(peer, 10 + i, &got[i], sizeof(int32_t));
        ASSERT_TRUE(s.ok()) << s.status();
        receives.push_back(std::move(*s));
      }
      std::vector<int32_t> out = {100 * r, 100 * r + 1, 100 * r + 2};
      std::vector<std::unique_ptr<PendingMessage>> sends;
      for (int i = 0; i < 3; ++i) {
        Started s = messages.StartSend(peer, 10 + i, &out[i], sizeof(int32_t));
        ASSERT_TRUE(s.ok()) << s.status();
        sends.push_back(std::move(*s));
      }
      EXPECT_EQ(messages.threads(), 2);  // one sending, one receiving thread for the one peer
      for (int i : {2, 0, 1}) {
        absl::Status s = receives[i]->Wait();
        EXPECT_TRUE(s.ok()) << s;
        EXPECT_EQ(got[i], 100 * peer + i);
      }
      for (auto& s : sends) {
        absl::Status st = s->Wait();
        if (!st.ok()) results[r] = st;
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  EXPECT_TRUE(results[0].ok()) << results[0];
  EXPECT_TRUE(results[1].ok()) << results[1];
}

TEST(AsyncMessagesTest, AFailureFailsThePeersQueuedMessagesAtOnce) {
  InProcHub hub(2, InProcOptions{.timeout_s = 30, .synchronous_send = true});
  hub.Abort(1);
  std::unique_ptr<Transport> t = hub.Endpoint(0);
  AsyncMessages messages(t.get());
  int32_t v = 0;
  std::vector<std::unique_ptr<PendingMessage>> receives;
  for (uint32_t tag = 0; tag < 4; ++tag) {
    Started s = messages.StartRecv(1, tag, &v, sizeof(v));
    ASSERT_TRUE(s.ok()) << s.status();
    receives.push_back(std::move(*s));
  }
  const auto start = std::chrono::steady_clock::now();
  absl::Status first = receives[0]->Wait();
  EXPECT_EQ(first.code(), absl::StatusCode::kUnavailable) << first;
  for (int i = 1; i < 4; ++i) {
    absl::Status s = receives[i]->Wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "not received from rank 1")) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "an earlier message failed")) << s;
  }
  // None of them waited for the transport's 30 s timeout.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 20);
}

TEST(AsyncMessagesTest, AnAbandonedMessageIsNeverRun) {
  InProcHub hub(2, InProcOptions{.timeout_s = 30, .synchronous_send = true});
  std::unique_ptr<Transport> t0 = hub.Endpoint(0);
  std::unique_ptr<Transport> t1 = hub.Endpoint(1);
  AsyncMessages messages(t0.get());
  // The first receive blocks the peer's receiving thread until rank 1 sends tag 1; the second,
  // queued behind it, is abandoned before its turn.
  int32_t first = -1;
  Started blocking = messages.StartRecv(1, 1, &first, sizeof(first));
  ASSERT_TRUE(blocking.ok()) << blocking.status();
  {
    auto abandoned = std::make_unique<int32_t>(-1);
    Started s = messages.StartRecv(1, 2, abandoned.get(), sizeof(int32_t));
    ASSERT_TRUE(s.ok()) << s.status();
    s->reset();  // destroyed before `abandoned`'s memory, and before it ran
  }
  // Rank 1 sends tag 2 first; with the abandoned receive skipped, a new receive gets it.
  int32_t two = 2, one = 1;
  std::thread sender([&] {
    EXPECT_TRUE(t1->Send(0, 1, &one, sizeof(one)).ok());
    EXPECT_TRUE(t1->Send(0, 2, &two, sizeof(two)).ok());
  });
  EXPECT_TRUE((*blocking)->Wait().ok());
  EXPECT_EQ(first, 1);
  int32_t again = -1;
  Started s = messages.StartRecv(1, 2, &again, sizeof(again));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE((*s)->Wait().ok());
  EXPECT_EQ(again, 2);
  sender.join();
}

TEST(AsyncMessagesTest, APeerOutOfRangeOrThisRankIsInvalid) {
  InProcHub hub(2);
  std::unique_ptr<Transport> t = hub.Endpoint(0);
  AsyncMessages messages(t.get());
  int32_t v = 0;
  for (int peer : {-1, 0, 2}) {
    Started s = messages.StartSend(peer, 0, &v, sizeof(v));
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << peer;
    EXPECT_TRUE(absl::StrContains(s.status().message(), "rank " + std::to_string(peer)))
        << s.status();
    s = messages.StartRecv(peer, 0, &v, sizeof(v));
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << peer;
  }
  EXPECT_EQ(messages.threads(), 0);
}

}  // namespace
}  // namespace octopipe::executor
