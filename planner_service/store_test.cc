// Pins the Store's contract: round trips in the documented order, durability across a new
// Store and across a writer process that dies without closing, cascading deletes, the codes
// for duplicates, missing rows and unusable files, and that every message names the file.
#include "planner_service/store.h"

#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "planner_service/job_convert.h"

namespace octopipe {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A fresh directory per test under Bazel's TEST_TMPDIR.
std::string TestDir() {
  const char* root = std::getenv("TEST_TMPDIR");
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = absl::StrCat(info->test_suite_name(), ".", info->name());
  for (char& c : name) {
    if (c == '/') c = '_';
  }
  const std::string dir = absl::StrCat(root != nullptr ? root : "/tmp", "/store_test/", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::unique_ptr<Store> OpenOrDie(const std::string& path) {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

planner::JobRecord MakeJob(const std::string& id, int64_t created_unix_ms) {
  planner::JobRecord job;
  job.id = id;
  job.name = "name-" + id;
  job.spec.model.set_name("gpt-" + id);
  job.spec.model.add_layers()->set_kind("attention");
  job.spec.model.mutable_training()->set_num_microbatches(8);
  job.spec.cluster.set_name("cluster");
  job.spec.options.set_num_devices(4);
  job.state = planner::JobState::kReady;
  job.current_version = 2;
  job.excluded_nodes = {"node-3"};
  job.created_unix_ms = created_unix_ms;
  job.pending_reason = ReplanReason::kDrain;
  job.events.push_back({5, "started", "node-3", 2, 0, ""});
  return job;
}

// Records compare by their stored form.
bool SameJob(const planner::JobRecord& a, const planner::JobRecord& b) {
  return MessageDifferencer::Equals(planner::JobToProto(a), planner::JobToProto(b));
}

proto::PlanVersion MakeVersion(const std::string& job_id, int64_t version) {
  proto::PlanVersion v;
  v.set_job_id(job_id);
  v.set_version(version);
  v.set_reason(version == 1 ? "initial" : "measured");
  v.set_created_unix_ms(1000 + version);
  v.mutable_result()->set_feasible(true);
  v.mutable_result()->mutable_plan()->set_version(version);
  v.mutable_result()->mutable_plan()->mutable_predicted()->set_iteration_time_s(0.5 / version);
  return v;
}

std::vector<std::string> Ids(const std::vector<planner::JobRecord>& jobs) {
  std::vector<std::string> ids;
  for (const planner::JobRecord& job : jobs) ids.push_back(job.id);
  return ids;
}

std::vector<int64_t> Versions(const std::vector<proto::PlanVersion>& versions) {
  std::vector<int64_t> out;
  for (const proto::PlanVersion& v : versions) out.push_back(v.version());
  return out;
}

// A value read through a separate raw SQLite connection (bypassing Store).
std::string RawQuery(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  std::string value;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK) {
    sqlite3_exec(
        db, sql.c_str(),
        [](void* out, int n, char** values, char**) {
          if (n > 0 && values[0] != nullptr) *static_cast<std::string*>(out) = values[0];
          return 0;
        },
        &value, nullptr);
  }
  sqlite3_close_v2(db);
  return value;
}

TEST(StoreTest, JobsRoundTripOrderedByCreatedThenId) {
  std::unique_ptr<Store> store = OpenOrDie(TestDir() + "/state.db");
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutJob(MakeJob("c", 300)).ok());
  ASSERT_TRUE(store->PutJob(MakeJob("b", 200)).ok());
  ASSERT_TRUE(store->PutJob(MakeJob("a", 200)).ok());
  absl::StatusOr<std::vector<planner::JobRecord>> jobs = store->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_THAT(Ids(*jobs), ElementsAre("a", "b", "c"));
  EXPECT_TRUE(SameJob(MakeJob("c", 300), (*jobs)[2]));
}

// On disk a job is the proto::Job message every planner has stored (JobToProto of the record),
// and a message written in an older planner's form (the re-plan intent as text alone) loads.
TEST(StoreTest, JobsAreStoredAsTheProtoJobMessage) {
  const std::string path = TestDir() + "/state.db";
  std::unique_ptr<Store> store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutJob(MakeJob("j", 1)).ok());
  proto::Job old;
  old.set_id("old");
  old.set_created_unix_ms(2);
  old.set_state(proto::JOB_STATE_PLANNING);
  old.set_pending_replan_reason("node_failure");
  ASSERT_TRUE(store->PutJobMessage(old).ok());
  store.reset();

  sqlite3* db = nullptr;
  ASSERT_EQ(SQLITE_OK, sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr));
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(SQLITE_OK,
            sqlite3_prepare_v2(db, "SELECT proto FROM jobs WHERE id = 'j'", -1, &stmt, nullptr));
  ASSERT_EQ(SQLITE_ROW, sqlite3_step(stmt));
  const std::string bytes(static_cast<const char*>(sqlite3_column_blob(stmt, 0)),
                          static_cast<size_t>(sqlite3_column_bytes(stmt, 0)));
  sqlite3_finalize(stmt);
  sqlite3_close_v2(db);
  EXPECT_EQ(bytes, planner::JobToProto(MakeJob("j", 1)).SerializeAsString());

  store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::vector<planner::JobRecord>> jobs = store->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_THAT(Ids(*jobs), ElementsAre("j", "old"));
  ASSERT_TRUE((*jobs)[1].pending_reason.has_value());
  EXPECT_EQ(*(*jobs)[1].pending_reason, ReplanReason::kNodeFailure);
  EXPECT_EQ((*jobs)[1].state, planner::JobState::kPlanning);
}

TEST(StoreTest, PutJobUpsertsAndKeepsVersionsAndCalibration) {
  std::unique_ptr<Store> store = OpenOrDie(TestDir() + "/state.db");
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

TEST(StoreTest, PlanVersionsAscendingAndDuplicateIsAlreadyExists) {
  const std::string path = TestDir() + "/state.db";
  std::unique_ptr<Store> store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutJob(MakeJob("j", 1)).ok());
  ASSERT_TRUE(store->PutJob(MakeJob("other", 2)).ok());
  for (int64_t v : {2, 1, 3}) ASSERT_TRUE(store->PutPlanVersion(MakeVersion("j", v)).ok());
  ASSERT_TRUE(store->PutPlanVersion(MakeVersion("other", 1)).ok());

  proto::PlanVersion again = MakeVersion("j", 2);
  again.set_reason("node_failure");
  absl::Status dup = store->PutPlanVersion(again);
  EXPECT_EQ(absl::StatusCode::kAlreadyExists, dup.code());
  EXPECT_THAT(std::string(dup.message()),
              AllOf(HasSubstr("plan version 2"), HasSubstr("'j'"), HasSubstr(path)));

  absl::StatusOr<std::vector<proto::PlanVersion>> versions = store->LoadPlanVersions("j");
  ASSERT_TRUE(versions.ok()) << versions.status();
  EXPECT_THAT(Versions(*versions), ElementsAre(1, 2, 3));
  EXPECT_TRUE(MessageDifferencer::Equals(MakeVersion("j", 2), (*versions)[1]))
      << "the rejected duplicate must not overwrite the stored version";
  EXPECT_THAT(*store->LoadPlanVersions("nobody"), IsEmpty());
}

TEST(StoreTest, PlanVersionNeedsAStoredJobAndAPositiveVersion) {
  std::unique_ptr<Store> store = OpenOrDie(TestDir() + "/state.db");
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

TEST(StoreTest, CalibrationRoundTripsExactlyAndIsEmptyWhenNone) {
  std::unique_ptr<Store> store = OpenOrDie(TestDir() + "/state.db");
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

TEST(StoreTest, CalibrationRejectsNonFiniteFactorsAndUnknownJobs) {
  std::unique_ptr<Store> store = OpenOrDie(TestDir() + "/state.db");
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

TEST(StoreTest, AgentsRoundTripUpsertAndDelete) {
  std::unique_ptr<Store> store = OpenOrDie(TestDir() + "/state.db");
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutAgent({"node-b", 8, "10.0.0.2:7000", 111}).ok());
  ASSERT_TRUE(store->PutAgent({"node-a", 4, "10.0.0.1:7000", 222}).ok());
  ASSERT_TRUE(store->PutAgent({"node-b", 6, "10.0.0.9:7001", 333}).ok());
  absl::StatusOr<std::vector<AgentRecord>> agents = store->LoadAgents();
  ASSERT_TRUE(agents.ok()) << agents.status();
  ASSERT_EQ(2u, agents->size());
  EXPECT_EQ("node-a", (*agents)[0].node_id);
  EXPECT_EQ(4, (*agents)[0].num_devices);
  EXPECT_EQ("node-b", (*agents)[1].node_id);
  EXPECT_EQ(6, (*agents)[1].num_devices);
  EXPECT_EQ("10.0.0.9:7001", (*agents)[1].address);
  EXPECT_EQ(333, (*agents)[1].registered_unix_ms);

  ASSERT_TRUE(store->DeleteAgent("node-a").ok());
  absl::Status again = store->DeleteAgent("node-a");
  EXPECT_EQ(absl::StatusCode::kNotFound, again.code());
  EXPECT_THAT(std::string(again.message()), HasSubstr("'node-a'"));
  EXPECT_EQ(1u, store->LoadAgents()->size());
  EXPECT_EQ(absl::StatusCode::kInvalidArgument, store->PutAgent({}).code());
}

TEST(StoreTest, DeleteJobCascadesToItsVersionsAndCalibrationOnly) {
  std::unique_ptr<Store> store = OpenOrDie(TestDir() + "/state.db");
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

TEST(StoreTest, ANewStoreOnTheSameFileSeesEverything) {
  const std::string path = TestDir() + "/nested/dirs/state.db";  // parents created by Open
  {
    std::unique_ptr<Store> store = OpenOrDie(path);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->PutJob(MakeJob("j1", 10)).ok());
    ASSERT_TRUE(store->PutJob(MakeJob("j2", 20)).ok());
    ASSERT_TRUE(store->PutPlanVersion(MakeVersion("j1", 1)).ok());
    ASSERT_TRUE(store->PutPlanVersion(MakeVersion("j1", 2)).ok());
    ASSERT_TRUE(store->PutCalibration("j2", {0.5, 2.0}).ok());
    ASSERT_TRUE(store->PutAgent({"node-0", 8, "host:1", 42}).ok());
  }
  std::unique_ptr<Store> store = OpenOrDie(path);
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

TEST(StoreTest, FileIsWalWithTheCurrentSchemaVersion) {
  const std::string path = TestDir() + "/state.db";
  ASSERT_NE(OpenOrDie(path), nullptr);
  EXPECT_EQ("wal", RawQuery(path, "PRAGMA journal_mode"));
  EXPECT_EQ(absl::StrCat(Store::kSchemaVersion),
            RawQuery(path, "SELECT MAX(version) FROM schema_version"));
  // Opening again does not migrate twice.
  ASSERT_NE(OpenOrDie(path), nullptr);
  EXPECT_EQ("1", RawQuery(path, "SELECT COUNT(*) FROM schema_version"));
}

TEST(StoreTest, NewerSchemaIsFailedPrecondition) {
  const std::string path = TestDir() + "/state.db";
  ASSERT_NE(OpenOrDie(path), nullptr);
  RawQuery(path, "UPDATE schema_version SET version = 99");
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
  EXPECT_EQ(absl::StatusCode::kFailedPrecondition, store.status().code());
  EXPECT_THAT(std::string(store.status().message()),
              AllOf(HasSubstr(path), HasSubstr("schema version 99 is newer")));
}

TEST(StoreTest, JobNumbersNeverRepeatAcrossDeleteAndReopen) {
  const std::string path = TestDir() + "/numbers.db";
  {
    std::unique_ptr<Store> store = OpenOrDie(path);
    EXPECT_EQ(*store->NextJobNumber(), 1);
    EXPECT_EQ(*store->NextJobNumber(), 2);
    ASSERT_TRUE(store->PutJob(MakeJob("job-2", 1)).ok());
    ASSERT_TRUE(store->DeleteJob("job-2").ok());
  }
  std::unique_ptr<Store> store = OpenOrDie(path);
  EXPECT_EQ(*store->NextJobNumber(), 3);
}

TEST(StoreTest, SchemaOneFileContinuesAfterItsHighestJobNumber) {
  const std::string path = TestDir() + "/v1.db";
  {
    std::unique_ptr<Store> store = OpenOrDie(path);
    ASSERT_TRUE(store->PutJob(MakeJob("job-41", 1)).ok());
    ASSERT_TRUE(store->PutJob(MakeJob("custom", 2)).ok());
  }
  // As a schema-1 binary left it: no counters table.
  RawQuery(path, "DROP TABLE counters");
  RawQuery(path, "UPDATE schema_version SET version = 1");
  std::unique_ptr<Store> store = OpenOrDie(path);
  EXPECT_EQ(*store->NextJobNumber(), 42);
}

TEST(StoreTest, EmptyFileIsFailedPreconditionNotAnEmptyStore) {
  const std::string path = TestDir() + "/empty.db";
  std::ofstream(path).close();
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
  EXPECT_EQ(absl::StatusCode::kFailedPrecondition, store.status().code());
  EXPECT_THAT(std::string(store.status().message()),
              AllOf(HasSubstr(path), HasSubstr("empty (0 bytes)")));
}

TEST(StoreTest, FileThatIsNotADatabaseIsFailedPreconditionNamingIt) {
  const std::string path = TestDir() + "/garbage.db";
  {
    std::ofstream out(path);
    for (int i = 0; i < 100; ++i) out << "this is not an SQLite database\n";
  }
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
  EXPECT_EQ(absl::StatusCode::kFailedPrecondition, store.status().code());
  EXPECT_THAT(std::string(store.status().message()),
              AllOf(HasSubstr(path), HasSubstr("not a database")));
}

TEST(StoreTest, UncreatableOrUnopenablePathIsFailedPreconditionNamingIt) {
  const std::string dir = TestDir();
  { std::ofstream(dir + "/plain-file") << "x"; }
  // The parent "directory" is a regular file (fails even as root, unlike permissions).
  const std::string under_file = dir + "/plain-file/sub/state.db";
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(under_file);
  EXPECT_EQ(absl::StatusCode::kFailedPrecondition, store.status().code());
  EXPECT_THAT(std::string(store.status().message()), HasSubstr(under_file));

  // The path is a directory.
  store = Store::Open(dir);
  EXPECT_EQ(absl::StatusCode::kFailedPrecondition, store.status().code());
  EXPECT_THAT(std::string(store.status().message()),
              AllOf(HasSubstr(dir), HasSubstr("unable to open")));

  EXPECT_EQ(absl::StatusCode::kInvalidArgument, Store::Open("").status().code());
}

TEST(StoreTest, InMemoryStoreWorksForCallersTests) {
  std::unique_ptr<Store> store = OpenOrDie(":memory:");
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutJob(MakeJob("j", 1)).ok());
  ASSERT_TRUE(store->PutPlanVersion(MakeVersion("j", 1)).ok());
  EXPECT_THAT(Ids(*store->LoadJobs()), ElementsAre("j"));
  EXPECT_EQ(absl::StatusCode::kAlreadyExists, store->PutPlanVersion(MakeVersion("j", 1)).code());
}

TEST(StoreTest, ConcurrentWritersFromEightThreadsAllLand) {
  std::unique_ptr<Store> store = OpenOrDie(TestDir() + "/state.db");
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

// A writer process that dies without closing its Store (no destructors, no WAL checkpoint)
// must leave every write that returned OK readable by the next process.
enum class Death { kExit, kSigkill };

class StoreCrashTest : public ::testing::TestWithParam<Death> {};

TEST_P(StoreCrashTest, CommittedWritesSurviveAWriterThatDiesWithoutClosing) {
  const std::string path = TestDir() + "/state.db";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0) << "fork failed";
  if (pid == 0) {
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path);
    if (!store.ok()) _exit(2);
    if (!(*store)->PutJob(MakeJob("survivor", 7)).ok()) _exit(3);
    if (!(*store)->PutPlanVersion(MakeVersion("survivor", 1)).ok()) _exit(4);
    if (!(*store)->PutCalibration("survivor", {1.5, 0.5}).ok()) _exit(5);
    if (!(*store)->PutAgent({"node-7", 2, "h:7", 7}).ok()) _exit(6);
    if (GetParam() == Death::kSigkill) kill(getpid(), SIGKILL);
    _exit(0);
  }
  int wstatus = 0;
  ASSERT_EQ(pid, waitpid(pid, &wstatus, 0));
  if (GetParam() == Death::kSigkill) {
    ASSERT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL) << wstatus;
  } else {
    ASSERT_TRUE(WIFEXITED(wstatus)) << wstatus;
    ASSERT_EQ(0, WEXITSTATUS(wstatus)) << "child failed at step " << WEXITSTATUS(wstatus);
  }
  // The writes are still in the write-ahead log: nobody checkpointed them.
  ASSERT_TRUE(std::filesystem::exists(path + "-wal"));
  EXPECT_GT(std::filesystem::file_size(path + "-wal"), 0u);

  std::unique_ptr<Store> store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::vector<planner::JobRecord>> jobs = store->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(1u, jobs->size());
  EXPECT_TRUE(SameJob(MakeJob("survivor", 7), jobs->front()));
  EXPECT_THAT(Versions(*store->LoadPlanVersions("survivor")), ElementsAre(1));
  EXPECT_THAT(*store->LoadCalibration("survivor"), ElementsAre(1.5, 0.5));
  EXPECT_EQ(1u, store->LoadAgents()->size());
}

INSTANTIATE_TEST_SUITE_P(Deaths, StoreCrashTest, ::testing::Values(Death::kExit, Death::kSigkill),
                         [](const ::testing::TestParamInfo<Death>& info) {
                           return info.param == Death::kExit ? "Exit" : "Sigkill";
                         });

}  // namespace
}  // namespace octopipe
