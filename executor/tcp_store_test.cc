// The TCP rendezvous store: set/get/wait with timeouts, and a real Gloo mesh of three forked
// processes connected through it (no shared directory).
#include "executor/tcp_store.h"

#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "core/fake_clock.h"
#include "executor/gloo_transport.h"
#include "gloo/common/error.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace octopipe::executor {
namespace {

TEST(TcpStoreTest, SetGetAndWaitAcrossClients) {
  auto server = TcpStoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = "127.0.0.1:" + std::to_string((*server)->port());
  TcpStore a(address, std::chrono::seconds(10));
  TcpStore b(address, std::chrono::seconds(10));
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    a.set("k", {'h', 'i'});
  });
  EXPECT_EQ(b.get("k"), (std::vector<char>{'h', 'i'}));  // blocks until set
  setter.join();
  b.wait({"k"});
  EXPECT_THROW(b.wait({"absent"}, std::chrono::milliseconds(100)), gloo::IoException);
  EXPECT_EQ(b.get("k"), (std::vector<char>{'h', 'i'})) << "usable after a timeout";
}

TEST(TcpStoreTest, UnreachableServerThrowsWithinTheTimeout) {
  int port = 0;
  {
    auto server = TcpStoreServer::Start("127.0.0.1", 0);
    ASSERT_TRUE(server.ok());
    port = (*server)->port();
  }  // closed
  TcpStore s("127.0.0.1:" + std::to_string(port), std::chrono::milliseconds(300));
  EXPECT_THROW(s.get("k"), gloo::IoException);
}

TEST(TcpStoreTest, AProbeAnswersWhereAServerListensAndNamesTheAddressWhereNone) {
  int port = 0;
  {
    auto server = TcpStoreServer::Start("127.0.0.1", 0);
    ASSERT_TRUE(server.ok());
    port = (*server)->port();
    EXPECT_TRUE(ProbeTcp("127.0.0.1:" + std::to_string(port), std::chrono::seconds(5)).ok());
  }  // closed: refused at once, well within the timeout
  const std::string address = "127.0.0.1:" + std::to_string(port);
  const absl::Status closed = ProbeTcp(address, std::chrono::seconds(5));
  EXPECT_TRUE(absl::IsUnavailable(closed)) << closed;
  EXPECT_THAT(std::string(closed.message()), ::testing::HasSubstr(address));
  EXPECT_TRUE(absl::IsInvalidArgument(ProbeTcp("no-port", std::chrono::seconds(1))));
}

// The connect deadline is kept on the injected clock: with a clock that moves 1 s per reading
// and a 5 s timeout the store tries exactly 4 times, however loaded the machine (readings: 0
// sets the deadline to 5, 1 to 4 each allow a try, 5 ends it).
TEST(TcpStoreTest, ConnectDeadlineIsKeptOnTheInjectedClock) {
  int port = 0;
  {
    auto server = TcpStoreServer::Start("127.0.0.1", 0);
    ASSERT_TRUE(server.ok());
    port = (*server)->port();
  }  // closed: every try is refused at once
  auto clock = std::make_shared<ReadCountingClock>(/*seconds_per_read=*/1.0);
  TcpStore s("127.0.0.1:" + std::to_string(port), std::chrono::seconds(5), clock);
  try {
    s.get("k");
    ADD_FAILURE() << "connected to a closed port";
  } catch (const gloo::IoException& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("cannot connect within 5000 ms"));
  }
  EXPECT_EQ(clock->NowSeconds(), 6);  // the reading after the last one Connect made
}

TEST(TcpStoreTest, AKeyHandlerServesItsPrefixWithoutWaitingAndCanRefuse) {
  auto server = TcpStoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  std::map<std::string, std::string> files;
  std::mutex mu;
  TcpStoreServer::KeyHandler h;
  h.prefix = "file/";
  h.put = [&](const std::string& key, const std::string& value) {
    std::lock_guard<std::mutex> l(mu);
    if (value == "bad") return false;
    files[key] = value;
    return true;
  };
  h.get = [&](const std::string& key) -> std::optional<std::string> {
    std::lock_guard<std::mutex> l(mu);
    auto it = files.find(key);
    if (it == files.end()) return std::nullopt;
    return it->second;
  };
  (*server)->SetKeyHandler(h);
  TcpStore c("127.0.0.1:" + std::to_string((*server)->port()), std::chrono::seconds(10));
  EXPECT_TRUE(c.Put("file/a", "bytes").ok());
  EXPECT_EQ(files["file/a"], "bytes");
  absl::StatusOr<std::string> got = c.Fetch("file/a", std::chrono::milliseconds(0));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "bytes");
  // A missing handled key is answered at once (no wait for the 10 s asked).
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(c.Fetch("file/none", std::chrono::seconds(10)).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(c.Put("file/b", "bad").code(), absl::StatusCode::kUnavailable);  // refused
  EXPECT_EQ(files.count("file/b"), 0u);
  // Other keys are the plain store; an in-process Set is seen by clients.
  (*server)->Set("plain", "v");
  got = c.Fetch("plain", std::chrono::seconds(5));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "v");
  EXPECT_EQ(files.count("plain"), 0u);
}

TEST(TcpStoreTest, GlooRanksRendezvousThroughIt) {
  auto server = TcpStoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok());
  const std::string address = "127.0.0.1:" + std::to_string((*server)->port());
  constexpr int kRanks = 3;
  std::vector<pid_t> pids;
  for (int r = 0; r < kRanks; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      GlooOptions o;
      o.rank = r;
      o.size = kRanks;
      o.store_address = address;
      o.prefix = "run";
      o.timeout_s = 30;
      auto t = GlooTransport::Create(o);
      if (!t.ok()) _exit(2);
      // Ring: send our rank to the next one, receive the previous one's.
      int32_t got = -1, mine = r;
      std::thread send([&] { (void)(*t)->Send((r + 1) % kRanks, 5, &mine, sizeof(mine)); });
      const bool ok = (*t)->Recv((r + kRanks - 1) % kRanks, 5, &got, sizeof(got)).ok();
      send.join();
      _exit(ok && got == (r + kRanks - 1) % kRanks ? 0 : 3);
    }
    pids.push_back(pid);
  }
  for (int r = 0; r < kRanks; ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank " << r << " " << status;
  }
}

}  // namespace
}  // namespace octopipe::executor
