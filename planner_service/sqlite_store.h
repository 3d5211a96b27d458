// SqliteStore: the Store (store.h) in one local SQLite file — the embedded default
// (--store=sqlite:DIR keeps DIR/planner.db).
//
// Durability: the database runs in WAL mode with synchronous=FULL, and every write is one
// transaction committed before the call returns OK (with FULL, also across a power loss on a
// filesystem that honours fsync).
//
// Integrity is enforced by foreign keys (ON DELETE CASCADE) from plan versions and calibration
// to jobs.
//
// Schema: a schema_version table records the version of the layout; Open applies the newer
// migrations (kMigrations in sqlite_store.cc) in one transaction and refuses
// (kFailedPrecondition) a file written by a newer binary.
//
// Backend-specific error codes (the rest as store.h), every message naming the file and
// SQLite's own message: kFailedPrecondition when the file cannot be created or opened, is not
// a database, is corrupt or read-only (checked at Open with a write), is empty (0 bytes: an
// existing file is never taken for a new store) or is from a newer schema; kUnavailable when
// the database is busy (locked by another process) or on an I/O error; kResourceExhausted when
// the disk is full.
//
// Thread safety: one connection serialised by a mutex (calls do not run in parallel). Meant
// as one Store per file: a second process on the same file works (SQLite's locks; a writer
// waits up to 2 s for another) but may see kUnavailable. A Store must not be used across
// fork(); the child opens its own.
#ifndef OCTOPIPE_PLANNER_SERVICE_SQLITE_STORE_H_
#define OCTOPIPE_PLANNER_SERVICE_SQLITE_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "planner_service/store.h"

struct sqlite3;
struct sqlite3_stmt;

namespace octopipe {

class SqliteStore : public Store {
 public:
  // The layout version this binary writes (schema_version.version after Open).
  static constexpr int kSchemaVersion = 3;

  // Opens (creating if missing) the database at `path`, creating its parent directories and
  // the schema as needed. ":memory:" gives a private in-memory database (no durability; for
  // tests of callers). `max_value_bytes` > 0 caps one stored value (a job or plan version
  // record; SQLite's length limit): a larger write is RESOURCE_EXHAUSTED and writes nothing,
  // as a write is when memory runs out. 0: SQLite's default (1e9 bytes).
  static absl::StatusOr<std::unique_ptr<SqliteStore>> Open(const std::string& path,
                                                           int max_value_bytes = 0);

  ~SqliteStore() override;
  SqliteStore(const SqliteStore&) = delete;
  SqliteStore& operator=(const SqliteStore&) = delete;

  const std::string& path() const { return path_; }
  std::string Describe() const override { return "sqlite:" + path_; }

  absl::Status DeleteJob(const std::string& id) override;
  absl::StatusOr<std::vector<proto::PlanVersion>> LoadPlanVersions(
      const std::string& job_id) override;
  absl::StatusOr<std::vector<double>> LoadCalibration(const std::string& job_id) override;
  absl::StatusOr<int64_t> NextJobNumber() override;
  absl::Status DeleteAgent(const std::string& node_id) override;
  absl::StatusOr<std::vector<AgentRecord>> LoadAgents() override;

 protected:
  absl::Status WriteJob(const proto::Job& job, const std::string& bytes) override;
  absl::StatusOr<std::vector<proto::Job>> ReadJobs() override;
  absl::StatusOr<std::optional<proto::Job>> ReadJob(const std::string& id) override;
  absl::Status WritePlanVersion(const proto::PlanVersion& version,
                                const std::string& bytes) override;
  absl::Status WriteCalibration(const std::string& job_id,
                                const std::vector<double>& layer_factors) override;
  absl::Status WriteAgent(const AgentRecord& record) override;

 private:
  SqliteStore(std::string path, sqlite3* db);

  absl::Status Init() ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Migrate() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs `sql` (no parameters, no rows wanted).
  absl::Status Exec(absl::string_view sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The cached prepared statement for `sql`, reset and with no bindings.
  absl::StatusOr<sqlite3_stmt*> Prepare(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // BEGIN IMMEDIATE; body(); COMMIT — or ROLLBACK when body or COMMIT fails.
  template <typename Body>
  absl::Status InTransaction(Body body) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An error for SQLite result `rc` during `what`, with the connection's message.
  absl::Status Error(int rc, absl::string_view what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  absl::Mutex mu_;
  sqlite3* const db_;  // the connection itself is used only under mu_
  absl::flat_hash_map<const char*, sqlite3_stmt*> statements_ ABSL_GUARDED_BY(mu_);
};

}  // namespace octopipe

#endif  // OCTOPIPE_PLANNER_SERVICE_SQLITE_STORE_H_
