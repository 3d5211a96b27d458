#include "etcd/client.h"

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "etcd/etcd_cluster.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace octopipe::etcd {
namespace {

using ::testing::HasSubstr;

TEST(ParseEndpointsTest, AcceptsListsAndNamesTheBadEntry) {
  absl::StatusOr<std::vector<std::string>> ok =
      ParseEndpoints("127.0.0.1:2379,etcd-1.etcd:2379,[::1]:2380");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_THAT(*ok, ::testing::ElementsAre("127.0.0.1:2379", "etcd-1.etcd:2379", "[::1]:2380"));
  for (const char* bad : {"", "127.0.0.1", "127.0.0.1:0", "h:70000", "a:1,,b:2", ":2379",
                          "::1:2379", "h:x"}) {
    absl::StatusOr<std::vector<std::string>> r = ParseEndpoints(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_THAT(ParseEndpoints("a:1,b").status().message(), HasSubstr("'b'"));
}

TEST(PrefixEndTest, IncrementsTheLastByteThatCan) {
  EXPECT_EQ(PrefixEnd("/a/"), "/a0");
  EXPECT_EQ(PrefixEnd(std::string("a\xff", 2)), "b");
  EXPECT_EQ(PrefixEnd(std::string("\xff", 1)), std::string(1, '\0'));
}

class ClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<EtcdCluster>> c = EtcdCluster::Start(3);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = c->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(cluster_, nullptr);
    absl::StatusOr<std::vector<std::string>> endpoints = ParseEndpoints(cluster_->endpoints());
    ASSERT_TRUE(endpoints.ok());
    absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(*endpoints);
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(*c);
  }
  static EtcdCluster* cluster_;
  std::unique_ptr<Client> client_;
};
EtcdCluster* ClientTest::cluster_ = nullptr;

TEST_F(ClientTest, PutRangeAndConditionalTxn) {
  etcdserverpb::PutRequest put;
  put.set_key("/t1/a");
  put.set_value("1");
  ASSERT_TRUE(client_->Put(put).ok());
  put.set_key("/t1/b");
  put.set_value("2");
  ASSERT_TRUE(client_->Put(put).ok());

  etcdserverpb::RangeRequest range;
  range.set_key("/t1/");
  range.set_range_end(PrefixEnd("/t1/"));
  absl::StatusOr<etcdserverpb::RangeResponse> r = client_->Range(range);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->kvs_size(), 2);
  EXPECT_EQ(r->kvs(0).value(), "1");
  EXPECT_EQ(r->kvs(1).key(), "/t1/b");

  // Create-if-absent: succeeds once, then the compare fails and nothing changes.
  etcdserverpb::TxnRequest txn;
  etcdserverpb::Compare* absent = txn.add_compare();
  absent->set_key("/t1/c");
  absent->set_target(etcdserverpb::Compare::CREATE);
  absent->set_result(etcdserverpb::Compare::EQUAL);
  absent->set_create_revision(0);
  etcdserverpb::PutRequest* create = txn.add_success()->mutable_request_put();
  create->set_key("/t1/c");
  create->set_value("first");
  absl::StatusOr<etcdserverpb::TxnResponse> t = client_->Txn(txn);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->succeeded());
  create->set_value("second");
  t = client_->Txn(txn);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->succeeded());
  range.set_key("/t1/c");
  range.clear_range_end();
  r = client_->Range(range);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->kvs_size(), 1);
  EXPECT_EQ(r->kvs(0).value(), "first");
}

TEST_F(ClientTest, LeasedKeysGoWithTheirLease) {
  absl::StatusOr<int64_t> lease = client_->LeaseGrant(5);
  ASSERT_TRUE(lease.ok()) << lease.status();
  absl::StatusOr<int64_t> ttl = client_->LeaseKeepAliveOnce(*lease);
  ASSERT_TRUE(ttl.ok()) << ttl.status();
  EXPECT_GT(*ttl, 0);
  etcdserverpb::PutRequest put;
  put.set_key("/t2/leased");
  put.set_value("x");
  put.set_lease(*lease);
  ASSERT_TRUE(client_->Put(put).ok());
  ASSERT_TRUE(client_->LeaseRevoke(*lease).ok());
  etcdserverpb::RangeRequest range;
  range.set_key("/t2/leased");
  absl::StatusOr<etcdserverpb::RangeResponse> r = client_->Range(range);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kvs_size(), 0);
  EXPECT_EQ(client_->LeaseKeepAliveOnce(*lease).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->LeaseGrant(0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ClientTest, ElectionHasOneLeaderAtATime) {
  absl::StatusOr<int64_t> a = client_->LeaseGrant(10);
  absl::StatusOr<int64_t> b = client_->LeaseGrant(10);
  ASSERT_TRUE(a.ok() && b.ok());
  absl::StatusOr<v3electionpb::LeaderKey> first =
      client_->Campaign("/t3/leader", *a, "replica-a", absl::Seconds(10));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_GT(first->rev(), 0);
  absl::StatusOr<etcdserverpb::KeyValue> leader = client_->Leader("/t3/leader");
  ASSERT_TRUE(leader.ok()) << leader.status();
  EXPECT_EQ(leader->value(), "replica-a");
  // b cannot win while a leads: its campaign runs out of time.
  absl::StatusOr<v3electionpb::LeaderKey> blocked =
      client_->Campaign("/t3/leader", *b, "replica-b", absl::Milliseconds(300));
  EXPECT_EQ(blocked.status().code(), absl::StatusCode::kUnavailable) << blocked.status();
  ASSERT_TRUE(client_->Resign(*first).ok());
  absl::StatusOr<v3electionpb::LeaderKey> second =
      client_->Campaign("/t3/leader", *b, "replica-b", absl::Seconds(10));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_GT(second->rev(), first->rev());
  leader = client_->Leader("/t3/leader");
  ASSERT_TRUE(leader.ok());
  EXPECT_EQ(leader->value(), "replica-b");
  ASSERT_TRUE(client_->LeaseRevoke(*a).ok());
  ASSERT_TRUE(client_->LeaseRevoke(*b).ok());
  EXPECT_EQ(client_->Leader("/t3/leader").status().code(), absl::StatusCode::kNotFound);
}

// Runs last in the suite (it kills a member and restarts it).
TEST_F(ClientTest, FailsOverToAnotherMember) {
  etcdserverpb::PutRequest put;
  put.set_key("/t4/k");
  put.set_value("before");
  ASSERT_TRUE(client_->Put(put).ok());
  cluster_->Kill(0);
  put.set_value("after");
  absl::StatusOr<etcdserverpb::PutResponse> p = client_->Put(put);
  EXPECT_TRUE(p.ok()) << p.status();
  etcdserverpb::RangeRequest range;
  range.set_key("/t4/k");
  absl::StatusOr<etcdserverpb::RangeResponse> r = client_->Range(range);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->kvs_size(), 1);
  EXPECT_EQ(r->kvs(0).value(), "after");
  ASSERT_TRUE(cluster_->Restart(0).ok());

  // A client of only dead members says so, naming them.
  cluster_->Kill(2);
  ClientOptions o;
  o.call_timeout = absl::Milliseconds(300);
  absl::StatusOr<std::unique_ptr<Client>> lone = Client::Connect({cluster_->endpoint(2)}, o);
  ASSERT_TRUE(lone.ok());
  absl::StatusOr<etcdserverpb::RangeResponse> dead = (*lone)->Range(range);
  EXPECT_EQ(dead.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(dead.status().message(), HasSubstr(cluster_->endpoint(2)));
  // Back within about a second of the member serving again.
  ASSERT_TRUE(cluster_->Restart(2).ok());
  o.call_timeout = absl::Seconds(5);
  absl::StatusOr<std::unique_ptr<Client>> again = Client::Connect({cluster_->endpoint(2)}, o);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE((*again)->Range(range).ok());
  EXPECT_TRUE((*lone)->Range(range).ok()) << "the old channel reconnects too";
}

}  // namespace
}  // namespace octopipe::etcd
