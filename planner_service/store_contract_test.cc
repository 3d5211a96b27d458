// The Store contract (store.h), run against both implementations: SqliteStore on a file and
// EtcdStore on a real etcd cluster (Debian's etcd, started by the test on loopback). Round
// trips in the documented order, durability across a new Store on the same state, cascading
// deletes, the codes for duplicates and missing rows, messages naming the store, concurrent
// writers. Then what only EtcdStore has: fencing, and losing etcd members.
#include <signal.h>

#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "etcd/client.h"
#include "etcd/etcd_cluster.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "planner_service/etcd_store.h"
#include "planner_service/job_convert.h"
#include "planner_service/open_store.h"
#include "planner_service/sqlite_store.h"
#include "planner_service/store.h"
#include "planner_service/store_test_util.h"

namespace octopipe {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::Ids;
using testing::MakeJob;
using testing::MakeVersion;
using testing::SameJob;
using testing::TestDir;
using testing::Versions;

// One single-member etcd for the whole binary; each test uses its own key prefix.
etcd::EtcdCluster* SharedEtcd() {
  static etcd::EtcdCluster* cluster = [] {
    absl::StatusOr<std::unique_ptr<etcd::EtcdCluster>> c = etcd::EtcdCluster::Start(1);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? c->release() : nullptr;
  }();
  return cluster;
}

// The test's name as a key segment.
std::string TestName() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = absl::StrCat(info->test_suite_name(), ".", info->name());
  for (char& c : name) {
    if (c == '/') c = '_';
  }
  return name;
}

class StoreContractTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "sqlite") {
      where_ = TestDir() + "/state.db";
    } else {
      ASSERT_NE(SharedEtcd(), nullptr);
      where_ = "/test/" + TestName();
    }
  }
  // A new Store on this test's state (the same file or the same etcd prefix each time).
  std::unique_ptr<Store> Open() {
    absl::StatusOr<std::unique_ptr<Store>> store;
    if (GetParam() == "sqlite") {
      store = SqliteStore::Open(where_);
    } else {
      EtcdStoreOptions o;
      o.prefix = where_;
      absl::StatusOr<std::vector<std::string>> endpoints =
          etcd::ParseEndpoints(SharedEtcd()->endpoints());
      if (!endpoints.ok()) return nullptr;
      store = EtcdStore::Open(*endpoints, o);
    }
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }
  // What every error message names: the file, or the etcd key prefix.
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

// A job message written directly, with a re-plan intent pending, loads with the intent.
TEST_P(StoreContractTest, AJobMessageWithAPendingIntentLoads) {
  std::unique_ptr<Store> store = Open();
  ASSERT_NE(store, nullptr);
  proto::Job old;
  old.set_id("old");
  old.set_created_unix_ms(2);
  old.set_state(proto::JOB_STATE_PLANNING);
  old.set_pending_reason(proto::PLAN_REASON_NODE_FAILURE);
  ASSERT_TRUE(store->PutJobMessage(old).ok());
  store = Open();
  absl::StatusOr<std::vector<planner::JobRecord>> jobs = store->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_THAT(Ids(*jobs), ElementsAre("old"));
  ASSERT_TRUE((*jobs)[0].pending_reason.has_value());
  EXPECT_EQ(*(*jobs)[0].pending_reason, ReplanReason::kNodeFailure);
  EXPECT_EQ((*jobs)[0].state, planner::JobState::kPlanning);
}

TEST_P(StoreContractTest, JobsRoundTripOrderedByCreatedThenId) {
  std::unique_ptr<Store> store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutJob(MakeJob("c", 300)).ok());
  ASSERT_TRUE(store->PutJob(MakeJob("b", 200)).ok());
  ASSERT_TRUE(store->PutJob(MakeJob("a", 200)).ok());
  absl::StatusOr<std::vector<planner::JobRecord>> jobs = store->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_THAT(Ids(*jobs), ElementsAre("a", "b", "c"));
  EXPECT_TRUE(SameJob(MakeJob("c", 300), (*jobs)[2]));
  absl::StatusOr<planner::JobRecord> one = store->LoadJob("b");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_TRUE(SameJob(MakeJob("b", 200), *one));
  const absl::Status missing = store->LoadJob("nobody").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.message()), HasSubstr("'nobody'"));
}

TEST_P(StoreContractTest, PutJobUpsertsAndKeepsVersionsAndCalibration) {
  std::unique_ptr<Store> store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutJob(MakeJob("j", 1)).ok());
  ASSERT_TRUE(store->PutPlanVersion(MakeVersion("j", 1)).ok());
  ASSERT_TRUE(store->PutCalibration("j", {1.5}).ok());
  planner::JobRecord updated = MakeJob("j", 1);
  updated.state = planner::JobState::kInfeasible;
  updated.last_error = "does not fit";
  ASSERT_TRUE(store->PutJob(updated).ok());

  absl::StatusOr<std::vector<planner::JobRecord>> jobs = store->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(1u, jobs->size());
  EXPECT_TRUE(SameJob(updated, jobs->front()));
  EXPECT_THAT(Versions(*store->LoadPlanVersions("j")), ElementsAre(1));
  EXPECT_THAT(*store->LoadCalibration("j"), ElementsAre(1.5));
}

TEST_P(StoreContractTest, PlanVersionsAscendingAndDuplicateIsAlreadyExists) {
  std::unique_ptr<Store> store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutJob(MakeJob("j", 1)).ok());
  ASSERT_TRUE(store->PutJob(MakeJob("other", 2)).ok());
  for (int64_t v : {2, 1, 3}) ASSERT_TRUE(store->PutPlanVersion(MakeVersion("j", v)).ok());
  ASSERT_TRUE(store->PutPlanVersion(MakeVersion("other", 1)).ok());

  proto::PlanVersion again = MakeVersion("j", 2);
  again.set_reason_kind(proto::PLAN_REASON_NODE_FAILURE);
  absl::Status dup = store->PutPlanVersion(again);
  EXPECT_EQ(absl::StatusCode::kAlreadyExists, dup.code());
  EXPECT_THAT(std::string(dup.message()),
              AllOf(HasSubstr("plan version 2"), HasSubstr("'j'"), HasSubstr(where())));

  absl::StatusOr<std::vector<proto::PlanVersion>> versions = store->LoadPlanVersions("j");
  ASSERT_TRUE(versions.ok()) << versions.status();
  EXPECT_THAT(Versions(*versions), ElementsAre(1, 2, 3));
  EXPECT_TRUE(MessageDifferencer::Equals(MakeVersion("j", 2), (*versions)[1]))
      << "the rejected duplicate must not overwrite the stored version";
  EXPECT_THAT(*store->LoadPlanVersions("nobody"), IsEmpty());
  // The identical version again is a retry, not a conflict.
  EXPECT_TRUE(store->PutPlanVersion(MakeVersion("j", 2)).ok());
}

TEST_P(StoreContractTest, PlanVersionNeedsAStoredJobAndAPositiveVersion) {
  std::unique_ptr<Store> store = Open();
  ASSERT_NE(store, nullptr);
  absl::Status orphan = store->PutPlanVersion(MakeVersion("ghost", 1));
  EXPECT_EQ(absl::StatusCode::kFailedPrecondition, orphan.code());
  EXPECT_THAT(std::string(orphan.message()), HasSubstr("'ghost'"));

  ASSERT_TRUE(store->PutJob(MakeJob("j", 1)).ok());
  absl::Status zero = store->PutPlanVersion(MakeVersion("j", 0));
  EXPECT_EQ(absl::StatusCode::kInvalidArgument, zero.code());
  EXPECT_THAT(std::string(zero.message()), HasSubstr("version.version is 0"));
  EXPECT_EQ(absl::StatusCode::kInvalidArgument, store->PutPlanVersion(MakeVersion("", 1)).code());
}

TEST_P(StoreContractTest, CalibrationRoundTripsExactlyAndIsEmptyWhenNone) {
  std::unique_ptr<Store> store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutJob(MakeJob("j", 1)).ok());
  absl::StatusOr<std::vector<double>> none = store->LoadCalibration("j");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_THAT(*none, IsEmpty());

  const std::vector<double> factors = {1.0, 0.1, 1.0 / 3, 2.5e-300, -0.0};
  ASSERT_TRUE(store->PutCalibration("j", factors).ok());
  EXPECT_EQ(factors, *store->LoadCalibration("j"));
  ASSERT_TRUE(store->PutCalibration("j", {0.9, 1.1}).ok());
  EXPECT_THAT(*store->LoadCalibration("j"), ElementsAre(0.9, 1.1));
  ASSERT_TRUE(store->PutCalibration("j", {}).ok());
  EXPECT_THAT(*store->LoadCalibration("j"), IsEmpty());
}

TEST_P(StoreContractTest, CalibrationRejectsNonFiniteFactorsAndUnknownJobs) {
  std::unique_ptr<Store> store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutJob(MakeJob("j", 1)).ok());
  absl::Status nan = store->PutCalibration("j", {1.0, std::numeric_limits<double>::quiet_NaN()});
  EXPECT_EQ(absl::StatusCode::kInvalidArgument, nan.code());
  EXPECT_THAT(std::string(nan.message()), HasSubstr("layer_factors[1]"));
  absl::Status ghost = store->PutCalibration("ghost", {1.0});
  EXPECT_EQ(absl::StatusCode::kFailedPrecondition, ghost.code());
  EXPECT_THAT(std::string(ghost.message()), HasSubstr("'ghost'"));
  EXPECT_THAT(*store->LoadCalibration("j"), IsEmpty());
}

TEST_P(StoreContractTest, AgentsRoundTripUpsertAndDelete) {
  std::unique_ptr<Store> store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutAgent({"node-b", 8, "10.0.0.2:7000", 111}).ok());
  ASSERT_TRUE(store->PutAgent({"node-a", 4, "10.0.0.1:7000", 222}).ok());
  ASSERT_TRUE(store->PutAgent({"node-b", 6, "10.0.0.9:7001", 333, 444}).ok());  // lost at 444
  absl::StatusOr<std::vector<AgentRecord>> agents = store->LoadAgents();
  ASSERT_TRUE(agents.ok()) << agents.status();
  ASSERT_EQ(2u, agents->size());
  EXPECT_EQ("node-a", (*agents)[0].node_id);
  EXPECT_EQ(4, (*agents)[0].num_devices);
  EXPECT_EQ("node-b", (*agents)[1].node_id);
  EXPECT_EQ(6, (*agents)[1].num_devices);
  EXPECT_EQ("10.0.0.9:7001", (*agents)[1].address);
  EXPECT_EQ(333, (*agents)[1].registered_unix_ms);
  EXPECT_EQ(444, (*agents)[1].lost_unix_ms);
  EXPECT_EQ(0, (*agents)[0].lost_unix_ms);

  ASSERT_TRUE(store->DeleteAgent("node-a").ok());
  absl::Status again = store->DeleteAgent("node-a");
  EXPECT_EQ(absl::StatusCode::kNotFound, again.code());
  EXPECT_THAT(std::string(again.message()), HasSubstr("'node-a'"));
  EXPECT_EQ(1u, store->LoadAgents()->size());
  EXPECT_EQ(absl::StatusCode::kInvalidArgument, store->PutAgent({}).code());
}

TEST_P(StoreContractTest, DeleteJobCascadesToItsVersionsAndCalibrationOnly) {
  std::unique_ptr<Store> store = Open();
  ASSERT_NE(store, nullptr);
  for (const char* id : {"gone", "kept"}) {
    ASSERT_TRUE(store->PutJob(MakeJob(id, 1)).ok());
    ASSERT_TRUE(store->PutPlanVersion(MakeVersion(id, 1)).ok());
    ASSERT_TRUE(store->PutPlanVersion(MakeVersion(id, 2)).ok());
    ASSERT_TRUE(store->PutCalibration(id, {1.25, 0.75}).ok());
  }
  ASSERT_TRUE(store->DeleteJob("gone").ok());
  EXPECT_THAT(Ids(*store->LoadJobs()), ElementsAre("kept"));
  EXPECT_THAT(*store->LoadPlanVersions("gone"), IsEmpty());
  EXPECT_THAT(*store->LoadCalibration("gone"), IsEmpty());
  EXPECT_THAT(Versions(*store->LoadPlanVersions("kept")), ElementsAre(1, 2));
  EXPECT_THAT(*store->LoadCalibration("kept"), ElementsAre(1.25, 0.75));

  absl::Status again = store->DeleteJob("gone");
  EXPECT_EQ(absl::StatusCode::kNotFound, again.code());
  EXPECT_THAT(std::string(again.message()), HasSubstr("'gone'"));
  // A re-created job with the old id starts with no versions.
  ASSERT_TRUE(store->PutJob(MakeJob("gone", 5)).ok());
  EXPECT_THAT(*store->LoadPlanVersions("gone"), IsEmpty());
}

TEST_P(StoreContractTest, ANewStoreOnTheSameStateSeesEverything) {
  {
    std::unique_ptr<Store> store = Open();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->PutJob(MakeJob("j1", 10)).ok());
    ASSERT_TRUE(store->PutJob(MakeJob("j2", 20)).ok());
    ASSERT_TRUE(store->PutPlanVersion(MakeVersion("j1", 1)).ok());
    ASSERT_TRUE(store->PutPlanVersion(MakeVersion("j1", 2)).ok());
    ASSERT_TRUE(store->PutCalibration("j2", {0.5, 2.0}).ok());
    ASSERT_TRUE(store->PutAgent({"node-0", 8, "host:1", 42}).ok());
  }
  std::unique_ptr<Store> store = Open();
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::vector<planner::JobRecord>> jobs = store->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_THAT(Ids(*jobs), ElementsAre("j1", "j2"));
  EXPECT_TRUE(SameJob(MakeJob("j1", 10), (*jobs)[0]));
  absl::StatusOr<std::vector<proto::PlanVersion>> versions = store->LoadPlanVersions("j1");
  ASSERT_TRUE(versions.ok()) << versions.status();
  ASSERT_THAT(Versions(*versions), ElementsAre(1, 2));
  EXPECT_TRUE(MessageDifferencer::Equals(MakeVersion("j1", 2), (*versions)[1]));
  EXPECT_THAT(*store->LoadCalibration("j2"), ElementsAre(0.5, 2.0));
  ASSERT_EQ(1u, store->LoadAgents()->size());
  EXPECT_EQ("host:1", store->LoadAgents()->front().address);
}

TEST_P(StoreContractTest, JobNumbersNeverRepeatAcrossDeleteAndReopen) {
  {
    std::unique_ptr<Store> store = Open();
    EXPECT_EQ(*store->NextJobNumber(), 1);
    EXPECT_EQ(*store->NextJobNumber(), 2);
    ASSERT_TRUE(store->PutJob(MakeJob("job-2", 1)).ok());
    ASSERT_TRUE(store->DeleteJob("job-2").ok());
  }
  std::unique_ptr<Store> store = Open();
  EXPECT_EQ(*store->NextJobNumber(), 3);
}

TEST_P(StoreContractTest, ConcurrentWritersFromEightThreadsAllLand) {
  std::unique_ptr<Store> store = Open();
  ASSERT_NE(store, nullptr);
  constexpr int kThreads = 8;
  constexpr int kVersions = 20;
  std::vector<std::thread> threads;
  std::vector<absl::Status> errors(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::string id = absl::StrCat("job-", t);
      absl::Status s = store->PutJob(MakeJob(id, t));
      for (int v = 1; s.ok() && v <= kVersions; ++v) s = store->PutPlanVersion(MakeVersion(id, v));
      if (s.ok()) s = store->PutCalibration(id, {static_cast<double>(t)});
      if (s.ok()) s = store->LoadJobs().status();
      errors[t] = s;
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const absl::Status& s : errors) EXPECT_TRUE(s.ok()) << s;
  ASSERT_EQ(static_cast<size_t>(kThreads), store->LoadJobs()->size());
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(static_cast<size_t>(kVersions),
              store->LoadPlanVersions(absl::StrCat("job-", t))->size());
  }
}


// Ids with '/' and '%' are separate records, not paths into each other's keys.
TEST_P(StoreContractTest, IdsWithSlashesAndPercentsStaySeparate) {
  std::unique_ptr<Store> store = Open();
  ASSERT_NE(store, nullptr);
  for (const char* id : {"a", "a/1", "a%2F1", "a%"}) {
    ASSERT_TRUE(store->PutJob(MakeJob(id, 1)).ok()) << id;
    ASSERT_TRUE(store->PutPlanVersion(MakeVersion(id, 1)).ok()) << id;
  }
  ASSERT_TRUE(store->PutPlanVersion(MakeVersion("a/1", 2)).ok());
  EXPECT_THAT(Ids(*store->LoadJobs()), ElementsAre("a", "a%", "a%2F1", "a/1"));
  EXPECT_THAT(Versions(*store->LoadPlanVersions("a")), ElementsAre(1));
  EXPECT_THAT(Versions(*store->LoadPlanVersions("a/1")), ElementsAre(1, 2));
  ASSERT_TRUE(store->DeleteJob("a").ok());
  EXPECT_THAT(Versions(*store->LoadPlanVersions("a/1")), ElementsAre(1, 2));
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreContractTest, ::testing::Values("sqlite", "etcd"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// ---- EtcdStore only. ----

std::vector<std::string> SharedEndpoints() {
  absl::StatusOr<std::vector<std::string>> e = etcd::ParseEndpoints(SharedEtcd()->endpoints());
  EXPECT_TRUE(e.ok());
  return e.ok() ? *e : std::vector<std::string>();
}

std::unique_ptr<EtcdStore> OpenEtcd(const std::vector<std::string>& endpoints,
                                    const std::string& prefix) {
  EtcdStoreOptions o;
  o.prefix = prefix;
  o.client.attempt_timeout = absl::Seconds(1);
  absl::StatusOr<std::unique_ptr<EtcdStore>> store = EtcdStore::Open(endpoints, o);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

// A replica whose leadership ended (its lease expired or was revoked) cannot write: every write
// carries the leader key's revision, and a write after the key is gone is refused, changes
// nothing and is counted.
TEST(EtcdStoreTest, FencedWritesAreRefusedOnceTheLeaderKeyIsGone) {
  ASSERT_NE(SharedEtcd(), nullptr);
  const std::string prefix = "/test/" + TestName();
  std::unique_ptr<EtcdStore> store = OpenEtcd(SharedEndpoints(), prefix);
  ASSERT_NE(store, nullptr);
  etcd::Client& client = *store->client();
  absl::StatusOr<int64_t> lease = client.LeaseGrant(30);
  ASSERT_TRUE(lease.ok()) << lease.status();
  absl::StatusOr<v3electionpb::LeaderKey> leader =
      client.Campaign(prefix + "/leader", *lease, "replica-1", absl::Seconds(10));
  ASSERT_TRUE(leader.ok()) << leader.status();
  store->SetFence(EtcdFence{leader->key(), leader->rev()});
  ASSERT_TRUE(store->PutJob(MakeJob("j", 1)).ok());
  ASSERT_TRUE(store->PutPlanVersion(MakeVersion("j", 1)).ok());
  absl::StatusOr<int64_t> n = store->NextJobNumber();
  ASSERT_TRUE(n.ok()) << n.status();

  ASSERT_TRUE(client.LeaseRevoke(*lease).ok());  // as if the lease had expired
  planner::JobRecord changed = MakeJob("j", 1);
  changed.last_error = "written by a deposed leader";
  const absl::Status put = store->PutJob(changed);
  EXPECT_EQ(put.code(), absl::StatusCode::kAborted) << put;
  EXPECT_THAT(std::string(put.message()),
              AllOf(HasSubstr(leader->key()), HasSubstr("no longer holds")));
  EXPECT_EQ(store->PutPlanVersion(MakeVersion("j", 2)).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(store->DeleteJob("j").code(), absl::StatusCode::kAborted);
  EXPECT_EQ(store->NextJobNumber().status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(store->PutAgent({"node-0", 1, "h:1", 1}).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(store->fenced_refusals(), 5);

  // Nothing the deposed replica tried landed; reads still work.
  absl::StatusOr<std::vector<planner::JobRecord>> jobs = store->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_TRUE(SameJob(MakeJob("j", 1), (*jobs)[0]));
  EXPECT_THAT(Versions(*store->LoadPlanVersions("j")), ElementsAre(1));
  EXPECT_THAT(*store->LoadAgents(), IsEmpty());

  // The next leader (a newer key) writes; the job numbers go on without a gap or repeat.
  absl::StatusOr<int64_t> lease2 = client.LeaseGrant(30);
  ASSERT_TRUE(lease2.ok());
  absl::StatusOr<v3electionpb::LeaderKey> next =
      client.Campaign(prefix + "/leader", *lease2, "replica-2", absl::Seconds(10));
  ASSERT_TRUE(next.ok()) << next.status();
  std::unique_ptr<EtcdStore> successor = OpenEtcd(SharedEndpoints(), prefix);
  successor->SetFence(EtcdFence{next->key(), next->rev()});
  ASSERT_TRUE(successor->PutPlanVersion(MakeVersion("j", 2)).ok());
  EXPECT_EQ(*successor->NextJobNumber(), *n + 1);
  ASSERT_TRUE(client.LeaseRevoke(*lease2).ok());
}

TEST(EtcdStoreTest, NewerSchemaIsFailedPreconditionAndGarbageIsDataLoss) {
  ASSERT_NE(SharedEtcd(), nullptr);
  const std::string prefix = "/test/" + TestName();
  std::unique_ptr<EtcdStore> store = OpenEtcd(SharedEndpoints(), prefix);
  ASSERT_NE(store, nullptr);
  etcdserverpb::PutRequest put;
  put.set_key(prefix + "/schema_version");
  put.set_value("99");
  ASSERT_TRUE(store->client()->Put(put).ok());
  EtcdStoreOptions o;
  o.prefix = prefix;
  absl::StatusOr<std::unique_ptr<EtcdStore>> newer = EtcdStore::Open(SharedEndpoints(), o);
  EXPECT_EQ(newer.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(newer.status().message()),
              AllOf(HasSubstr(prefix), HasSubstr("schema version 99 is newer")));

  put.set_value("1");
  ASSERT_TRUE(store->client()->Put(put).ok());
  put.set_key(prefix + "/jobs/broken");
  put.set_value("\xff\xff not a proto");
  ASSERT_TRUE(store->client()->Put(put).ok());
  EXPECT_EQ(store->LoadJobs().status().code(), absl::StatusCode::kDataLoss);

  o.prefix = "no-slash";
  EXPECT_EQ(EtcdStore::Open(SharedEndpoints(), o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(EtcdStoreTest, CounterStartsAfterTheHighestStoredJobNumberAndNeverRepeats) {
  ASSERT_NE(SharedEtcd(), nullptr);
  const std::string prefix = "/test/" + TestName();
  std::unique_ptr<EtcdStore> a = OpenEtcd(SharedEndpoints(), prefix);
  std::unique_ptr<EtcdStore> b = OpenEtcd(SharedEndpoints(), prefix);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(a->PutJob(MakeJob("job-41", 1)).ok());
  ASSERT_TRUE(a->PutJob(MakeJob("custom", 2)).ok());
  // Two stores (two replicas) taking numbers at once: all distinct, no gaps.
  std::vector<int64_t> got_a, got_b;
  std::thread ta([&] {
    for (int i = 0; i < 20; ++i) got_a.push_back(*a->NextJobNumber());
  });
  std::thread tb([&] {
    for (int i = 0; i < 20; ++i) got_b.push_back(*b->NextJobNumber());
  });
  ta.join();
  tb.join();
  std::vector<int64_t> all = got_a;
  all.insert(all.end(), got_b.begin(), got_b.end());
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), 40u);
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i], 42 + static_cast<int64_t>(i));
}

TEST(EtcdStoreTest, AClusterThatDoesNotAnswerIsUnavailableNamingIt) {
  EtcdStoreOptions o;
  o.client.call_timeout = absl::Milliseconds(500);
  o.client.connect_timeout = absl::Milliseconds(200);
  absl::StatusOr<std::unique_ptr<EtcdStore>> store =
      EtcdStore::Open({"127.0.0.1:1", "127.0.0.1:2"}, o);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(store.status().message()),
              AllOf(HasSubstr("127.0.0.1:1"), HasSubstr("127.0.0.1:2")));
  EXPECT_EQ(ParseStoreSpec("etcd:").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseStoreSpec("postgres:x").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseStoreSpec("sqlite:").status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<StoreSpec> spec = ParseStoreSpec("etcd:10.0.0.1:2379,10.0.0.2:2379");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->kind, StoreSpec::Kind::kEtcd);
  EXPECT_THAT(spec->endpoints, ElementsAre("10.0.0.1:2379", "10.0.0.2:2379"));
}

// Three members: one lost, service goes on; two lost, writes fail with kUnavailable and change
// nothing (a job delete is all or nothing); one back, service resumes with everything there.
TEST(EtcdStoreTest, LosingMembersStopsWritesCleanlyAndServiceResumes) {
  absl::StatusOr<std::unique_ptr<etcd::EtcdCluster>> cluster = etcd::EtcdCluster::Start(3);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  etcd::EtcdCluster& c = **cluster;
  absl::StatusOr<std::vector<std::string>> endpoints = etcd::ParseEndpoints(c.endpoints());
  ASSERT_TRUE(endpoints.ok());
  std::unique_ptr<EtcdStore> store = OpenEtcd(*endpoints, "/octopipe");
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutJob(MakeJob("j", 1)).ok());
  for (int v = 1; v <= 3; ++v) ASSERT_TRUE(store->PutPlanVersion(MakeVersion("j", v)).ok());

  c.Kill(0);
  const absl::Status one_lost = store->PutPlanVersion(MakeVersion("j", 4));
  ASSERT_TRUE(one_lost.ok()) << one_lost;
  c.Kill(1);
  const absl::Status no_quorum = store->DeleteJob("j");
  EXPECT_EQ(no_quorum.code(), absl::StatusCode::kUnavailable) << no_quorum;
  EXPECT_THAT(std::string(no_quorum.message()),
              AllOf(HasSubstr("delete job 'j'"), HasSubstr("may still be applied")));

  // With a member back, the delete that timed out is either wholly applied (it sat in the
  // surviving member's log) or not at all: never a job without its versions or the reverse.
  ASSERT_TRUE(c.Restart(1).ok());
  absl::StatusOr<std::vector<planner::JobRecord>> jobs = store->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  absl::StatusOr<std::vector<proto::PlanVersion>> versions = store->LoadPlanVersions("j");
  ASSERT_TRUE(versions.ok()) << versions.status();
  if (jobs->empty()) {
    EXPECT_THAT(*versions, IsEmpty());
  } else {
    EXPECT_THAT(Ids(*jobs), ElementsAre("j"));
    EXPECT_THAT(Versions(*versions), ElementsAre(1, 2, 3, 4));
  }
  ASSERT_TRUE(store->PutJob(MakeJob("k", 2)).ok());
  ASSERT_TRUE(store->PutPlanVersion(MakeVersion("k", 1)).ok());
  ASSERT_TRUE(c.Restart(0).ok());
}

}  // namespace
}  // namespace octopipe
