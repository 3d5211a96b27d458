// What SqliteStore adds to the Store contract (store_contract_test.cc runs that against both
// implementations): the file's journal mode and schema migrations, durability across a writer
// process that dies without closing, and the codes for unusable files, each naming the file.
#include "planner_service/sqlite_store.h"

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
#include "planner_service/store_test_util.h"

namespace octopipe {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using testing::Ids;
using testing::MakeJob;
using testing::MakeVersion;
using testing::SameJob;
using testing::TestDir;
using testing::Versions;

std::unique_ptr<SqliteStore> OpenOrDie(const std::string& path) {
  absl::StatusOr<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(path);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
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

// On disk a job is the proto::Job message every planner has stored (JobToProto of the record),
// and a message written directly (with a re-plan intent, as a planner stopped mid-way leaves it) loads.
TEST(SqliteStoreTest, JobsAreStoredAsTheProtoJobMessage) {
  const std::string path = TestDir() + "/state.db";
  std::unique_ptr<SqliteStore> store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutJob(MakeJob("j", 1)).ok());
  proto::Job old;
  old.set_id("old");
  old.set_created_unix_ms(2);
  old.set_state(proto::JOB_STATE_PLANNING);
  old.set_pending_reason(proto::PLAN_REASON_NODE_FAILURE);
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

// A value the store cannot take (over its length limit here; out of memory in production,
// where binding the value fails the same way) is RESOURCE_EXHAUSTED saying so — not SQLite's
// "NOT NULL constraint failed" text — and writes nothing; the store goes on working.
TEST(SqliteStoreTest, AValueTooLargeIsResourceExhaustedAndWritesNothing) {
  const std::string path = TestDir() + "/small.db";
  absl::StatusOr<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(path, 4096);
  ASSERT_TRUE(store.ok()) << store.status();
  planner::JobRecord big = MakeJob("big", 1);
  big.last_error = std::string(10000, 'x');
  absl::Status s = (*store)->PutJob(big);
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("put job 'big': a value could not be stored"));
  EXPECT_THAT(std::string(s.message()), Not(HasSubstr("constraint")));
  ASSERT_TRUE((*store)->PutJob(MakeJob("small", 2)).ok());
  absl::StatusOr<std::vector<planner::JobRecord>> jobs = (*store)->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_THAT(Ids(*jobs), ElementsAre("small"));
}

TEST(SqliteStoreTest, CreatesTheParentDirectories) {
  const std::string path = TestDir() + "/nested/dirs/state.db";
  ASSERT_NE(OpenOrDie(path), nullptr);
  EXPECT_TRUE(std::filesystem::exists(path));
}

TEST(SqliteStoreTest, FileIsWalWithTheCurrentSchemaVersion) {
  const std::string path = TestDir() + "/state.db";
  ASSERT_NE(OpenOrDie(path), nullptr);
  EXPECT_EQ("wal", RawQuery(path, "PRAGMA journal_mode"));
  EXPECT_EQ(absl::StrCat(SqliteStore::kSchemaVersion),
            RawQuery(path, "SELECT MAX(version) FROM schema_version"));
  // Opening again does not migrate twice.
  ASSERT_NE(OpenOrDie(path), nullptr);
  EXPECT_EQ("1", RawQuery(path, "SELECT COUNT(*) FROM schema_version"));
}

TEST(SqliteStoreTest, NewerSchemaIsFailedPrecondition) {
  const std::string path = TestDir() + "/state.db";
  ASSERT_NE(OpenOrDie(path), nullptr);
  RawQuery(path, "UPDATE schema_version SET version = 99");
  absl::StatusOr<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(path);
  EXPECT_EQ(absl::StatusCode::kFailedPrecondition, store.status().code());
  EXPECT_THAT(std::string(store.status().message()),
              AllOf(HasSubstr(path), HasSubstr("schema version 99 is newer")));
}

TEST(SqliteStoreTest, SchemaOneFileContinuesAfterItsHighestJobNumber) {
  const std::string path = TestDir() + "/v1.db";
  {
    std::unique_ptr<SqliteStore> store = OpenOrDie(path);
    ASSERT_TRUE(store->PutJob(MakeJob("job-41", 1)).ok());
    ASSERT_TRUE(store->PutJob(MakeJob("custom", 2)).ok());
    ASSERT_TRUE(store->PutAgent(AgentRecord{"node0", 2, "10.0.0.1:7000", 5, 0}).ok());
  }
  // As a schema-1 binary left it: no counters table, no agents' liveness column.
  RawQuery(path, "DROP TABLE counters");
  RawQuery(path, "ALTER TABLE agents DROP COLUMN lost_unix_ms");
  RawQuery(path, "UPDATE schema_version SET version = 1");
  std::unique_ptr<SqliteStore> store = OpenOrDie(path);
  EXPECT_EQ(*store->NextJobNumber(), 42);
  // The agent stored before the liveness column reads as alive.
  absl::StatusOr<std::vector<AgentRecord>> agents = store->LoadAgents();
  ASSERT_TRUE(agents.ok()) << agents.status();
  ASSERT_EQ(agents->size(), 1u);
  EXPECT_EQ((*agents)[0].address, "10.0.0.1:7000");
  EXPECT_EQ((*agents)[0].lost_unix_ms, 0);
}

TEST(SqliteStoreTest, EmptyFileIsFailedPreconditionNotAnEmptyStore) {
  const std::string path = TestDir() + "/empty.db";
  std::ofstream(path).close();
  absl::StatusOr<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(path);
  EXPECT_EQ(absl::StatusCode::kFailedPrecondition, store.status().code());
  EXPECT_THAT(std::string(store.status().message()),
              AllOf(HasSubstr(path), HasSubstr("empty (0 bytes)")));
}

TEST(SqliteStoreTest, FileThatIsNotADatabaseIsFailedPreconditionNamingIt) {
  const std::string path = TestDir() + "/garbage.db";
  {
    std::ofstream out(path);
    for (int i = 0; i < 100; ++i) out << "this is not an SQLite database\n";
  }
  absl::StatusOr<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(path);
  EXPECT_EQ(absl::StatusCode::kFailedPrecondition, store.status().code());
  EXPECT_THAT(std::string(store.status().message()),
              AllOf(HasSubstr(path), HasSubstr("not a database")));
}

TEST(SqliteStoreTest, UncreatableOrUnopenablePathIsFailedPreconditionNamingIt) {
  const std::string dir = TestDir();
  { std::ofstream(dir + "/plain-file") << "x"; }
  // The parent "directory" is a regular file (fails even as root, unlike permissions).
  const std::string under_file = dir + "/plain-file/sub/state.db";
  absl::StatusOr<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(under_file);
  EXPECT_EQ(absl::StatusCode::kFailedPrecondition, store.status().code());
  EXPECT_THAT(std::string(store.status().message()), HasSubstr(under_file));

  // The path is a directory.
  store = SqliteStore::Open(dir);
  EXPECT_EQ(absl::StatusCode::kFailedPrecondition, store.status().code());
  EXPECT_THAT(std::string(store.status().message()),
              AllOf(HasSubstr(dir), HasSubstr("unable to open")));

  EXPECT_EQ(absl::StatusCode::kInvalidArgument, SqliteStore::Open("").status().code());
}

TEST(SqliteStoreTest, InMemoryStoreWorksForCallersTests) {
  std::unique_ptr<SqliteStore> store = OpenOrDie(":memory:");
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutJob(MakeJob("j", 1)).ok());
  ASSERT_TRUE(store->PutPlanVersion(MakeVersion("j", 1)).ok());
  EXPECT_THAT(Ids(*store->LoadJobs()), ElementsAre("j"));
  EXPECT_TRUE(store->PutPlanVersion(MakeVersion("j", 1)).ok()) << "identical: a retry";
  proto::PlanVersion other = MakeVersion("j", 1);
  other.set_reason_kind(proto::PLAN_REASON_DRAIN);
  EXPECT_EQ(absl::StatusCode::kAlreadyExists, store->PutPlanVersion(other).code());
}

// A writer process that dies without closing its Store (no destructors, no WAL checkpoint)
// must leave every write that returned OK readable by the next process.
enum class Death { kExit, kSigkill };

class SqliteStoreCrashTest : public ::testing::TestWithParam<Death> {};

TEST_P(SqliteStoreCrashTest, CommittedWritesSurviveAWriterThatDiesWithoutClosing) {
  const std::string path = TestDir() + "/state.db";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0) << "fork failed";
  if (pid == 0) {
    absl::StatusOr<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(path);
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

  std::unique_ptr<SqliteStore> store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::vector<planner::JobRecord>> jobs = store->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(1u, jobs->size());
  EXPECT_TRUE(SameJob(MakeJob("survivor", 7), jobs->front()));
  EXPECT_THAT(Versions(*store->LoadPlanVersions("survivor")), ElementsAre(1));
  EXPECT_THAT(*store->LoadCalibration("survivor"), ElementsAre(1.5, 0.5));
  EXPECT_EQ(1u, store->LoadAgents()->size());
}

INSTANTIATE_TEST_SUITE_P(Deaths, SqliteStoreCrashTest, ::testing::Values(Death::kExit, Death::kSigkill),
                         [](const ::testing::TestParamInfo<Death>& info) {
                           return info.param == Death::kExit ? "Exit" : "Sigkill";
                         });

}  // namespace
}  // namespace octopipe
