// Pins GlooTransport between real processes on loopback: every rank exchanging messages of
// several sizes (0 B .. 3 MiB) on several tags with every other rank from many threads at
// once; a rank that dies turns into kUnavailable naming it (not a hang) while the links to
// the other ranks keep working; a silent peer turns into kDeadlineExceeded naming it; a rank
// that never shows up makes Create fail within the timeout.
//
// Each rank is a fork()ed child that reports through its exit status; the test process itself
// never creates Gloo objects, so it stays single-threaded and safe to fork. Children arm
// alarm(2) so a hang ends as SIGALRM (a test failure) instead of a stuck test.
#include "executor/gloo_transport.h"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace octopipe::executor {
namespace {

constexpr unsigned kChildAlarmSeconds = 90;

std::string FreshStoreDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/gloo_store_", info->name(), "_", getpid());
}

// Runs body(rank) in `n` forked children and returns one line per rank: "" for exit 0, else
// what went wrong (the child also prints its error to stderr).
std::vector<std::string> RunRanks(int n, const std::function<absl::Status(int)>& body) {
  std::vector<pid_t> pids;
  for (int rank = 0; rank < n; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      alarm(kChildAlarmSeconds);
      absl::Status s = body(rank);
      if (!s.ok()) std::fprintf(stderr, "rank %d failed: %s\n", rank, s.ToString().c_str());
      std::fflush(stderr);
      _exit(s.ok() ? 0 : 1);
    }
    pids.push_back(pid);
  }
  std::vector<std::string> results;
  for (int rank = 0; rank < n; ++rank) {
    int wstatus = 0;
    if (waitpid(pids[rank], &wstatus, 0) != pids[rank]) {
      results.push_back("waitpid failed");
    } else if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) {
      results.push_back("");
    } else if (WIFEXITED(wstatus)) {
      results.push_back(absl::StrCat("rank ", rank, " exited with ", WEXITSTATUS(wstatus)));
    } else {
      results.push_back(absl::StrCat("rank ", rank, " killed by signal ", WTERMSIG(wstatus)));
    }
  }
  return results;
}

// Message `round` of stream (src -> dst, tag) with size index `k`: contents depend on all of
// them, so a message from the wrong stream, in the wrong order or truncated fails the check.
constexpr size_t kSizes[] = {0, 1, 13, 4096, 65537, 1 << 20, (3 << 20) + 5};

std::vector<uint8_t> Payload(int src, int dst, uint32_t tag, int round, size_t k) {
  std::vector<uint8_t> v(kSizes[k]);
  uint32_t x = 2654435761u * (src * 1000 + dst * 100 + tag * 10 + round) + k;
  for (uint8_t& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

// Every rank: for each (peer, tag) one sending and one receiving thread, all at once.
absl::Status MeshExchange(int rank, int size, const std::string& dir) {
  constexpr uint32_t kTags = 3;
  constexpr int kRounds = 2;
  GlooOptions options;
  options.rank = rank;
  options.size = size;
  options.store_dir = dir;
  options.prefix = "mesh";
  options.timeout_s = 30;
  absl::StatusOr<std::unique_ptr<Transport>> created = GlooTransport::Create(options);
  if (!created.ok()) return created.status();
  Transport& t = **created;
  if (t.name() != "gloo" || t.rank() != rank || t.size() != size) {
    return absl::InternalError("name/rank/size mismatch");
  }

  std::mutex mu;
  absl::Status first_error;
  auto record = [&](absl::Status s) {
    std::lock_guard<std::mutex> lock(mu);
    if (first_error.ok()) first_error = std::move(s);
  };
  std::vector<std::thread> threads;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    for (uint32_t tag = 0; tag < kTags; ++tag) {
      threads.emplace_back([&, peer, tag] {
        for (int round = 0; round < kRounds; ++round) {
          for (size_t k = 0; k < std::size(kSizes); ++k) {
            std::vector<uint8_t> p = Payload(rank, peer, tag, round, k);
            absl::Status s = t.Send(peer, tag, p.data(), p.size());
            if (!s.ok()) return record(s);
          }
        }
      });
      threads.emplace_back([&, peer, tag] {
        for (int round = 0; round < kRounds; ++round) {
          for (size_t k = 0; k < std::size(kSizes); ++k) {
            std::vector<uint8_t> want = Payload(peer, rank, tag, round, k);
            std::vector<uint8_t> got(want.size(), 0xEE);
            absl::Status s = t.Recv(peer, tag, got.data(), got.size());
            if (!s.ok()) return record(s);
            if (got != want) {
              return record(absl::DataLossError(
                  absl::StrCat("rank ", rank, ": wrong contents from rank ", peer, " tag ", tag,
                               " round ", round, " size ", kSizes[k])));
            }
          }
        }
      });
    }
  }
  for (std::thread& th : threads) th.join();
  if (!first_error.ok()) return first_error;

  // Closing handshake, so no rank tears its sockets down while a peer still reads from them.
  constexpr uint32_t kByeTag = 1000;
  threads.clear();
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    threads.emplace_back([&, peer] {
      uint8_t bye = 1;
      absl::Status s = t.Send(peer, kByeTag, &bye, 1);
      if (!s.ok()) record(s);
    });
    threads.emplace_back([&, peer] {
      uint8_t bye = 0;
      absl::Status s = t.Recv(peer, kByeTag, &bye, 1);
      if (!s.ok()) record(s);
    });
  }
  for (std::thread& th : threads) th.join();
  return first_error;
}

TEST(GlooTransportTest, ThreeRanksExchangeAllSizesAndTagsConcurrently) {
  const std::string dir = FreshStoreDir();
  for (const std::string& r : RunRanks(3, [&](int rank) { return MeshExchange(rank, 3, dir); })) {
    EXPECT_EQ(r, "");
  }
}

absl::Status Expect(bool ok, const std::string& what) {
  return ok ? absl::OkStatus() : absl::InternalError(what);
}

#define RETURN_IF_FALSE(cond, what)                                  \
  do {                                                               \
    if (absl::Status s_ = Expect((cond), what); !s_.ok()) return s_; \
  } while (0)

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Rank 1 dies right after connecting. Rank 0 (timeout 2 s) sees that as kUnavailable naming
// rank 1, still exchanges with rank 2, then times out on a Recv rank 2 never answers. Rank 2
// (timeout 20 s) sees its link to rank 0 close once rank 0 has given up on it.
absl::Status DyingRank(int rank, const std::string& dir) {
  constexpr double kTimeout0 = 2;
  GlooOptions options;
  options.rank = rank;
  options.size = 3;
  options.store_dir = dir;
  options.prefix = "dying";
  options.timeout_s = rank == 0 ? kTimeout0 : 20;
  absl::StatusOr<std::unique_ptr<Transport>> created = GlooTransport::Create(options);
  if (!created.ok()) return created.status();
  Transport& t = **created;
  // Rank 1 says hello to both others before dying, so it dies only after every rank has
  // connected (a rank dying during Create fails its peers' Create instead — also correct,
  // but not what this test is about).
  int32_t v = 0;
  if (rank == 1) {
    for (int peer : {0, 2}) {
      absl::Status s = t.Send(peer, 9, &v, sizeof(v));
      if (!s.ok()) return s;
    }
    _exit(0);  // Dies without closing anything; the kernel closes its sockets.
  }
  if (absl::Status s = t.Recv(1, 9, &v, sizeof(v)); !s.ok()) return s;
  if (rank == 0) {
    auto start = std::chrono::steady_clock::now();
    absl::Status s = t.Recv(1, 0, &v, sizeof(v));
    const double waited = SecondsSince(start);
    RETURN_IF_FALSE(s.code() == absl::StatusCode::kUnavailable,
                    "Recv from dead rank 1: want kUnavailable, got " + s.ToString());
    RETURN_IF_FALSE(absl::StrContains(s.message(), "Recv from rank 1"),
                    "error does not name rank 1: " + s.ToString());
    // kUnavailable (not kDeadlineExceeded) already shows the death was noticed, not timed out;
    // the bound is generous so a loaded machine cannot fail it.
    RETURN_IF_FALSE(waited < kTimeout0 + 10, absl::StrCat("dead rank noticed after ", waited, " s"));

    // The link to rank 2 is unaffected.
    v = 77;
    s = t.Send(2, 1, &v, sizeof(v));
    RETURN_IF_FALSE(s.ok(), "Send to rank 2 after rank 1 died: " + s.ToString());
    s = t.Recv(2, 1, &v, sizeof(v));
    RETURN_IF_FALSE(s.ok() && v == 78, "Recv from rank 2 after rank 1 died: " + s.ToString());

    // Rank 2 never sends on tag 5.
    start = std::chrono::steady_clock::now();
    s = t.Recv(2, 5, &v, sizeof(v));
    const double timed_out_after = SecondsSince(start);
    RETURN_IF_FALSE(s.code() == absl::StatusCode::kDeadlineExceeded,
                    "Recv from silent rank 2: want kDeadlineExceeded, got " + s.ToString());
    RETURN_IF_FALSE(absl::StrContains(s.message(), "Recv from rank 2"),
                    "error does not name rank 2: " + s.ToString());
    // Never early (the deadline is the clock's, not the load's); late only by a generous margin
    // on a loaded machine (rank 2 relies on rank 0 giving up well before its own 20 s).
    RETURN_IF_FALSE(timed_out_after > kTimeout0 * 0.9 && timed_out_after < kTimeout0 + 10,
                    absl::StrCat("timeout fired after ", timed_out_after, " s"));
    // After a timeout the link is closed for good.
    s = t.Send(2, 1, &v, sizeof(v));
    RETURN_IF_FALSE(s.code() == absl::StatusCode::kUnavailable &&
                        absl::StrContains(s.message(), "earlier error"),
                    "Send after the timeout: " + s.ToString());
    return absl::OkStatus();
  }

  // rank == 2
  absl::Status s = t.Recv(0, 1, &v, sizeof(v));
  RETURN_IF_FALSE(s.ok() && v == 77, "Recv from rank 0: " + s.ToString());
  v = 78;
  s = t.Send(0, 1, &v, sizeof(v));
  RETURN_IF_FALSE(s.ok(), "Send to rank 0: " + s.ToString());
  auto start = std::chrono::steady_clock::now();
  s = t.Recv(0, 6, &v, sizeof(v));  // Rank 0 closes the link after its own timeout.
  RETURN_IF_FALSE(s.code() == absl::StatusCode::kUnavailable,
                  "Recv from rank 0 after it closed the link: " + s.ToString());
  RETURN_IF_FALSE(absl::StrContains(s.message(), "Recv from rank 0"),
                  "error does not name rank 0: " + s.ToString());
  RETURN_IF_FALSE(SecondsSince(start) < 15, "closed link noticed too late");
  return absl::OkStatus();
}

TEST(GlooTransportTest, DyingRankIsUnavailableAndSilentRankTimesOut) {
  const std::string dir = FreshStoreDir();
  for (const std::string& r : RunRanks(3, [&](int rank) { return DyingRank(rank, dir); })) {
    EXPECT_EQ(r, "");
  }
}

// Started messages (has_async): each rank posts its receives for three tags, then starts its
// sends to the other in the opposite tag order before waiting for anything — with blocking
// Send both ranks would wait for each other forever — then waits for the receives in a third
// order. Every message arrives whole in its own buffer; a posted receive nobody answers
// fails at its Wait as kDeadlineExceeded naming the peer and tag, and later starts on that link
// fail at once.
absl::Status StartedMessages(int rank, const std::string& dir) {
  constexpr double kTimeout = 1.5;
  GlooOptions options;
  options.rank = rank;
  options.size = 2;
  options.store_dir = dir;
  options.prefix = "started";
  options.timeout_s = rank == 0 ? kTimeout : 20;
  absl::StatusOr<std::unique_ptr<Transport>> created = GlooTransport::Create(options);
  if (!created.ok()) return created.status();
  Transport& t = **created;
  RETURN_IF_FALSE(t.has_async(), "gloo has started messages");
  const int peer = 1 - rank;
  const uint32_t tags[] = {7, 3, 11};
  std::vector<std::vector<uint8_t>> got;
  std::vector<std::unique_ptr<PendingMessage>> receives;
  for (size_t i = 0; i < std::size(tags); ++i) {
    got.emplace_back(kSizes[4 + i % 3], 0xEE);
    absl::StatusOr<std::unique_ptr<PendingMessage>> r =
        t.StartRecv(peer, tags[i], got.back().data(), got.back().size());
    if (!r.ok()) return r.status();
    receives.push_back(std::move(*r));
  }
  std::vector<std::vector<uint8_t>> payloads;
  std::vector<std::unique_ptr<PendingMessage>> sends;
  for (size_t i = std::size(tags); i-- > 0;) {
    payloads.push_back(Payload(rank, peer, tags[i], 0, 4 + i % 3));
    absl::StatusOr<std::unique_ptr<PendingMessage>> s =
        t.StartSend(peer, tags[i], payloads.back().data(), payloads.back().size());
    if (!s.ok()) return s.status();
    sends.push_back(std::move(*s));
  }
  for (size_t i : {1, 2, 0}) {
    if (absl::Status s = receives[i]->Wait(); !s.ok()) return s;
    RETURN_IF_FALSE(got[i] == Payload(peer, rank, tags[i], 0, 4 + i % 3),
                    absl::StrCat("rank ", rank, ": wrong contents on tag ", tags[i]));
  }
  for (auto& s : sends) {
    if (absl::Status st = s->Wait(); !st.ok()) return st;
  }
  int32_t v = 0;
  if (rank == 1) {
    // Waits until rank 0 has given up on tag 5 and closed the link.
    absl::Status s = t.Recv(0, 6, &v, sizeof(v));
    RETURN_IF_FALSE(s.code() == absl::StatusCode::kUnavailable,
                    "Recv from rank 0 after it closed the link: " + s.ToString());
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<PendingMessage>> silent = t.StartRecv(1, 5, &v, sizeof(v));
  if (!silent.ok()) return silent.status();
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = (*silent)->Wait();
  const double waited = SecondsSince(start);
  RETURN_IF_FALSE(s.code() == absl::StatusCode::kDeadlineExceeded,
                  "Wait on a receive rank 1 never answers: want kDeadlineExceeded, got " +
                      s.ToString());
  RETURN_IF_FALSE(absl::StrContains(s.message(), "Recv from rank 1 (tag 5"),
                  "error does not name rank 1 and tag 5: " + s.ToString());
  RETURN_IF_FALSE(waited > kTimeout * 0.9 && waited < kTimeout + 10,
                  absl::StrCat("timeout fired after ", waited, " s"));
  absl::StatusOr<std::unique_ptr<PendingMessage>> after = t.StartSend(1, 6, &v, sizeof(v));
  RETURN_IF_FALSE(!after.ok() && after.status().code() == absl::StatusCode::kUnavailable &&
                      absl::StrContains(after.status().message(), "earlier error"),
                  "StartSend after the timeout: " + after.status().ToString());
  return absl::OkStatus();
}

TEST(GlooTransportTest, StartedMessagesMatchByTagWithoutBlockingAndTimeOut) {
  const std::string dir = FreshStoreDir();
  for (const std::string& r : RunRanks(2, [&](int rank) { return StartedMessages(rank, dir); })) {
    EXPECT_EQ(r, "");
  }
}

TEST(GlooTransportTest, CreateFailsWithinTimeoutWhenAPeerNeverArrives) {
  const std::string dir = FreshStoreDir();
  auto results = RunRanks(1, [&](int) -> absl::Status {
    GlooOptions options;
    options.rank = 0;
    options.size = 2;
    options.store_dir = dir;
    options.prefix = "absent";
    options.timeout_s = 1;
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::unique_ptr<Transport>> t = GlooTransport::Create(options);
    RETURN_IF_FALSE(!t.ok() && t.status().code() == absl::StatusCode::kDeadlineExceeded,
                    "want kDeadlineExceeded, got " + t.status().ToString());
    RETURN_IF_FALSE(absl::StrContains(t.status().message(), "connecting to rank 1"),
                    "error does not name rank 1: " + t.status().ToString());
    // Gloo's FileStore checks its deadline in whole seconds.
    RETURN_IF_FALSE(SecondsSince(start) < 5, "Create took too long");
    return absl::OkStatus();
  });
  EXPECT_EQ(results[0], "");
}

TEST(GlooTransportTest, SingleRankNeedsNoPeers) {
  GlooOptions options;  // size 1: no store, no sockets.
  absl::StatusOr<std::unique_ptr<Transport>> t = GlooTransport::Create(options);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->size(), 1);
  int32_t v = 0;
  EXPECT_EQ((*t)->Send(0, 0, &v, 4).code(), absl::StatusCode::kInvalidArgument);
}

TEST(GlooTransportTest, BadOptionsAreInvalidArgument) {
  GlooOptions options;
  options.size = 2;
  options.rank = 2;
  EXPECT_EQ(GlooTransport::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.rank = 0;  // store_dir and prefix missing
  absl::Status s = GlooTransport::Create(options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "store_dir")) << s;
  options.store_dir = "/nonexistent";
  options.prefix = "p";
  options.timeout_s = 0;
  EXPECT_EQ(GlooTransport::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace octopipe::executor

namespace octopipe::executor {
namespace {

// Three ranks as processes: two overlapping groups ({0, 1, 2} and {1, 2}) made in one order,
// used from a thread while the point-to-point links carry messages; every member gets the same
// sums, and an all-to-all moves each piece to its member.
absl::Status GroupsOnProcesses(int rank, const std::string& dir) {
  GlooOptions options;
  options.rank = rank;
  options.size = 3;
  options.store_dir = dir;
  options.prefix = "groups";
  options.timeout_s = 30;
  absl::StatusOr<std::unique_ptr<Transport>> created = GlooTransport::Create(options);
  if (!created.ok()) return created.status();
  Transport& t = **created;
  absl::StatusOr<std::unique_ptr<Collective>> all = t.NewCollective({0, 1, 2}, "all");
  if (!all.ok()) return all.status();
  std::unique_ptr<Collective> pair;
  if (rank > 0) {
    absl::StatusOr<std::unique_ptr<Collective>> p = t.NewCollective({1, 2}, "pair");
    if (!p.ok()) return p.status();
    pair = std::move(*p);
  }
  absl::Status collective_status;
  std::thread collectives([&] {
    for (int round = 0; round < 20 && collective_status.ok(); ++round) {
      std::vector<float> v(1000 + round, static_cast<float>(rank + 1));
      collective_status = (*all)->AllReduceSum(v.data(), v.size());
      if (collective_status.ok() && (v.front() != 6.0f || v.back() != 6.0f)) {
        collective_status = absl::InternalError(absl::StrCat("sum ", v.front(), " != 6"));
      }
      if (pair != nullptr && collective_status.ok()) {
        std::vector<float> w(7, static_cast<float>(rank));
        collective_status = pair->AllReduceSum(w.data(), w.size());
        if (collective_status.ok() && w[3] != 3.0f) {
          collective_status = absl::InternalError("pair sum != 3");
        }
      }
    }
    if (!collective_status.ok()) return;
    // Member i sends (j + 1) floats of value 10 i + j to member j.
    std::vector<float> send;
    std::vector<size_t> send_counts, recv_counts;
    for (int j = 0; j < 3; ++j) {
      send_counts.push_back(j + 1);
      for (int k = 0; k <= j; ++k) send.push_back(10.0f * rank + j);
      recv_counts.push_back(rank + 1);
    }
    std::vector<float> recv(3 * (rank + 1));
    collective_status = (*all)->AllToAllV(send.data(), send_counts, recv.data(), recv_counts);
    for (int i = 0; i < 3 && collective_status.ok(); ++i) {
      if (recv[i * (rank + 1)] != 10.0f * i + rank) {
        collective_status = absl::InternalError("all-to-all piece in the wrong place");
      }
    }
  });
  // Point-to-point meanwhile: a ring of messages.
  absl::Status p2p;
  for (int round = 0; round < 20 && p2p.ok(); ++round) {
    int32_t out = rank * 100 + round, in = -1;
    std::thread send([&] { p2p.Update(t.Send((rank + 1) % 3, 5, &out, sizeof(out))); });
    absl::Status r = t.Recv((rank + 2) % 3, 5, &in, sizeof(in));
    send.join();
    p2p.Update(r);
    if (p2p.ok() && in != ((rank + 2) % 3) * 100 + round) p2p = absl::InternalError("ring");
  }
  collectives.join();
  if (!p2p.ok()) return p2p;
  return collective_status;
}

TEST(GlooTransportTest, CollectiveGroupsBesideThePointToPointLinks) {
  const std::string dir = FreshStoreDir();
  for (const std::string& r : RunRanks(3, [&](int rank) { return GroupsOnProcesses(rank, dir); })) {
    EXPECT_EQ(r, "");
  }
}

}  // namespace
}  // namespace octopipe::executor
