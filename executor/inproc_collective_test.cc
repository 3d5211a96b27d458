#include "executor/inproc_collective.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace octopipe::executor {
namespace {

// Runs fn(member) on one thread per member.
template <typename Fn>
void OnThreads(InProcGroup& group, Fn fn) {
  std::vector<std::thread> threads;
  for (int i = 0; i < group.size(); ++i) {
    threads.emplace_back([&group, &fn, i] {
      std::unique_ptr<Collective> c = group.Member(i);
      fn(*c);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(InProcCollectiveTest, AllReduceSumsInPlaceOnEveryMemberRepeatedly) {
  InProcGroup group(3, "g");
  std::vector<std::vector<float>> got(3);
  OnThreads(group, [&](Collective& c) {
    for (int round = 0; round < 50; ++round) {
      std::vector<float> v = {static_cast<float>(c.rank() + round), 1.0f};
      ASSERT_TRUE(c.AllReduceSum(v.data(), v.size()).ok());
      EXPECT_EQ(v[0], 3.0f + 3.0f * round);
      EXPECT_EQ(v[1], 3.0f);
    }
  });
}

TEST(InProcCollectiveTest, AllToAllVMovesEachPieceToItsMember) {
  InProcGroup group(3, "g");
  OnThreads(group, [&](Collective& c) {
    const int me = c.rank();
    // Member i sends (i + 1) floats of value 10 i + j to member j.
    std::vector<float> send;
    std::vector<size_t> send_counts, recv_counts;
    for (int j = 0; j < 3; ++j) {
      send_counts.push_back(me + 1);
      for (int k = 0; k <= me; ++k) send.push_back(10.0f * me + j);
      recv_counts.push_back(j + 1);
    }
    std::vector<float> recv(6, -1);
    ASSERT_TRUE(c.AllToAllV(send.data(), send_counts, recv.data(), recv_counts).ok());
    EXPECT_EQ(recv, (std::vector<float>{0.0f + me, 10.0f + me, 10.0f + me, 20.0f + me,
                                        20.0f + me, 20.0f + me}));
  });
}

TEST(InProcCollectiveTest, MismatchedCountsAreRefusedNamingTheMembers) {
  InProcGroup group(2, "dp/layer-1");
  std::vector<absl::Status> status(2);
  OnThreads(group, [&](Collective& c) {
    std::vector<float> v(c.rank() + 1, 1.0f);
    status[c.rank()] = c.AllReduceSum(v.data(), v.size());
  });
  EXPECT_EQ(status[0].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status[0].message().find("dp/layer-1"), std::string::npos) << status[0];
  EXPECT_NE(status[0].message().find("member 1"), std::string::npos) << status[0];
}

TEST(InProcCollectiveTest, AMissingMemberTimesOutNamingIt) {
  InProcGroup group(2, "g", /*timeout_s=*/0.05);
  std::unique_ptr<Collective> c = group.Member(0);
  float v = 1;
  absl::Status s = c->AllReduceSum(&v, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("members 1"), std::string::npos) << s;
}

TEST(InProcCollectiveTest, AbortFailsPendingCalls) {
  InProcGroup group(2, "g");
  absl::Status s;
  std::thread t([&] {
    std::unique_ptr<Collective> c = group.Member(0);
    float v = 1;
    s = c->AllReduceSum(&v, 1);
  });
  group.Abort();
  t.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace octopipe::executor
