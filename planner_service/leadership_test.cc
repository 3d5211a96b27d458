#include "planner_service/leadership.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "core/fake_clock.h"
#include "etcd/client.h"
#include "etcd/etcd_cluster.h"
#include "gtest/gtest.h"
#include "tests/planner_process.h"

namespace octopipe::planner {
namespace {

// Records what the leadership reports; waits for it without polling.
class Recorder : public Leadership::Listener {
 public:
  absl::Status OnElected(const v3electionpb::LeaderKey& key) override {
    absl::MutexLock lock(&mu_);
    elected_ = true;
    key_ = key;
    return elect_error_;
  }
  void OnLeading() override {
    absl::MutexLock lock(&mu_);
    leading_ = true;
  }
  void OnDeposed(const std::string& why) override {
    absl::MutexLock lock(&mu_);
    ++deposed_;
    why_ = why;
  }
  // Elected and in office (leading() turned true), or elected and refused office.
  bool WaitElected(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return elected_ && (leading_ || !elect_error_.ok());
    };
    return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  }
  bool WaitDeposed(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto deposed = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return deposed_ > 0; };
    return mu_.AwaitWithTimeout(absl::Condition(&deposed), timeout);
  }
  bool elected() {
    absl::MutexLock lock(&mu_);
    return elected_;
  }
  int deposed() {
    absl::MutexLock lock(&mu_);
    return deposed_;
  }
  v3electionpb::LeaderKey key() {
    absl::MutexLock lock(&mu_);
    return key_;
  }
  std::string why() {
    absl::MutexLock lock(&mu_);
    return why_;
  }
  void FailElection(absl::Status s) {
    absl::MutexLock lock(&mu_);
    elect_error_ = std::move(s);
  }

 private:
  absl::Mutex mu_;
  bool elected_ ABSL_GUARDED_BY(mu_) = false;
  bool leading_ ABSL_GUARDED_BY(mu_) = false;
  int deposed_ ABSL_GUARDED_BY(mu_) = 0;
  std::string why_ ABSL_GUARDED_BY(mu_);
  v3electionpb::LeaderKey key_ ABSL_GUARDED_BY(mu_);
  absl::Status elect_error_ ABSL_GUARDED_BY(mu_);
};

class LeadershipTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<etcd::EtcdCluster>> c = etcd::EtcdCluster::Start(1);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = c->release();
  }
  static void TearDownTestSuite() { delete cluster_; }
  std::shared_ptr<etcd::Client> NewClient() {
    auto c = etcd::Client::Connect({cluster_->endpoint(0)});
    EXPECT_TRUE(c.ok());
    return std::shared_ptr<etcd::Client>(std::move(*c));
  }
  LeadershipOptions Options(const std::string& election, const std::string& address) {
    LeadershipOptions o;
    o.election = election;
    o.address = address;
    o.ttl = absl::Seconds(1);
    return o;
  }
  static etcd::EtcdCluster* cluster_;
};
etcd::EtcdCluster* LeadershipTest::cluster_ = nullptr;

// The Leader RPCs etcd has answered, from its own /metrics (grpc_server_handled_total, every
// status code summed).
double LeaderQueries(const std::string& endpoint) {
  int port = 0;
  const std::vector<std::string> host_port = absl::StrSplit(endpoint, ':');
  EXPECT_TRUE(host_port.size() == 2 && absl::SimpleAtoi(host_port[1], &port)) << endpoint;
  double total = 0;
  for (absl::string_view line : absl::StrSplit(testing::ScrapeMetrics(port), '\n')) {
    if (!absl::StartsWith(line, "grpc_server_handled_total{") ||
        !absl::StrContains(line, "grpc_method=\"Leader\"")) {
      continue;
    }
    double value = 0;
    EXPECT_TRUE(absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &value)) << line;
    total += value;
  }
  return total;
}

// With no leader seen (an election nobody campaigns in), leader_address() asks etcd at most
// once per leader_query_interval, however often it is called for refused calls: 50 calls make
// one Leader query by etcd's own count, and the first call after the interval one more.
TEST_F(LeadershipTest, WithNoLeaderSeenEtcdIsAskedAtMostOncePerInterval) {
  FakeClock clock;
  LeadershipOptions options = Options("/t0/leader", "a:1");
  options.leader_query_interval = absl::Milliseconds(100);
  options.clock = &clock;
  Recorder recorder;
  const Leadership follower(NewClient(), options, &recorder);  // not started: no campaign
  const double before = LeaderQueries(cluster_->endpoint(0));
  for (int i = 0; i < 50; ++i) EXPECT_EQ(follower.leader_address(), "");
  EXPECT_EQ(LeaderQueries(cluster_->endpoint(0)) - before, 1);
  clock.Advance(0.099);
  EXPECT_EQ(follower.leader_address(), "");
  EXPECT_EQ(LeaderQueries(cluster_->endpoint(0)) - before, 1);
  clock.Advance(0.002);
  EXPECT_EQ(follower.leader_address(), "");
  EXPECT_EQ(LeaderQueries(cluster_->endpoint(0)) - before, 2);
}

TEST_F(LeadershipTest, OneLeaderAndAQuickHandOverWhenItStops) {
  Recorder ra, rb;
  auto a = std::make_unique<Leadership>(NewClient(), Options("/t1/leader", "a:1"), &ra);
  ASSERT_TRUE(a->Start().ok());
  ASSERT_TRUE(ra.WaitElected(absl::Seconds(10)));
  EXPECT_TRUE(a->leading());
  Leadership b(NewClient(), Options("/t1/leader", "b:2"), &rb);
  ASSERT_TRUE(b.Start().ok());
  EXPECT_FALSE(rb.WaitElected(absl::Seconds(1))) << "b must not lead while a does";
  EXPECT_FALSE(b.leading());
  EXPECT_EQ(b.leader_address(), "a:1");

  const absl::Time stopped = absl::Now();
  a->Stop();  // resigns: b takes over without waiting for a's lease
  ASSERT_TRUE(rb.WaitElected(absl::Seconds(10)));
  EXPECT_LT(absl::Now() - stopped, absl::Seconds(2));
  EXPECT_TRUE(b.leading());
  EXPECT_GT(rb.key().rev(), ra.key().rev());
  EXPECT_EQ(ra.deposed(), 0) << "a stopped; it was not deposed";
}

// A leader whose lease ends (here revoked, as if it expired while the process was paused)
// steps down by itself and reports it once; the other replica then leads.
TEST_F(LeadershipTest, ALeaderThatLosesItsLeaseStepsDown) {
  Recorder ra, rb;
  Leadership a(NewClient(), Options("/t2/leader", "a:1"), &ra);
  ASSERT_TRUE(a.Start().ok());
  ASSERT_TRUE(ra.WaitElected(absl::Seconds(10)));
  Leadership b(NewClient(), Options("/t2/leader", "b:2"), &rb);
  ASSERT_TRUE(b.Start().ok());

  ASSERT_TRUE(NewClient()->LeaseRevoke(ra.key().lease()).ok());
  ASSERT_TRUE(ra.WaitDeposed(absl::Seconds(5)));
  EXPECT_FALSE(a.leading());
  ASSERT_TRUE(rb.WaitElected(absl::Seconds(10)));
  EXPECT_TRUE(b.leading());
  EXPECT_EQ(ra.deposed(), 1);
}

// A leader whose key is deleted while its lease lives (what etcd's resign of a timed-out
// campaign does to the key a retried campaign found and returned) steps down within a
// keep-alive tick and reports it once; the other replica then leads. Before, the lease alone
// kept it leading: two leaders, the deleted one answering reads from its memory.
TEST_F(LeadershipTest, ALeaderWhoseKeyIsGoneStepsDown) {
  Recorder ra, rb;
  Leadership a(NewClient(), Options("/t4/leader", "a:1"), &ra);
  ASSERT_TRUE(a.Start().ok());
  ASSERT_TRUE(ra.WaitElected(absl::Seconds(10)));
  Leadership b(NewClient(), Options("/t4/leader", "b:2"), &rb);
  ASSERT_TRUE(b.Start().ok());

  etcdserverpb::DeleteRangeRequest del;
  del.set_key(ra.key().key());
  absl::StatusOr<etcdserverpb::DeleteRangeResponse> deleted = NewClient()->DeleteRange(del);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  ASSERT_EQ(deleted->deleted(), 1);
  ASSERT_TRUE(ra.WaitDeposed(absl::Seconds(5)));
  EXPECT_FALSE(a.leading());
  EXPECT_NE(ra.why().find("is gone from etcd"), std::string::npos) << ra.why();
  ASSERT_TRUE(rb.WaitElected(absl::Seconds(10)));
  EXPECT_TRUE(b.leading());
  EXPECT_EQ(ra.deposed(), 1);
}

TEST_F(LeadershipTest, FailingToTakeOfficeStepsDownAndBadOptionsAreRefused) {
  Recorder r;
  r.FailElection(absl::UnavailableError("store unreachable"));
  Leadership a(NewClient(), Options("/t3/leader", "a:1"), &r);
  ASSERT_TRUE(a.Start().ok());
  ASSERT_TRUE(r.WaitDeposed(absl::Seconds(10)));
  EXPECT_FALSE(a.leading());

  LeadershipOptions short_ttl = Options("/t3/leader", "a:1");
  short_ttl.ttl = absl::Milliseconds(500);
  EXPECT_EQ(Leadership(NewClient(), short_ttl, &r).Start().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Leadership(NewClient(), Options("/t3/leader", ""), &r).Start().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace octopipe::planner
