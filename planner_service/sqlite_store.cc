#include "planner_service/sqlite_store.h"

#include <sqlite3.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace octopipe {
namespace {

// Migration i (0-based) takes the layout from version i to version i + 1. Append only: a
// released migration never changes, and kSchemaVersion == size of this list.
//
// Each table keeps the serialized proto as the source of truth plus the columns that are
// keyed, ordered or joined on.
const char* const kMigrations[] = {
    // 1: jobs, plan versions, calibration, agents.
    R"sql(
    CREATE TABLE jobs (
      id              TEXT PRIMARY KEY NOT NULL,
      name            TEXT NOT NULL,
      created_unix_ms INTEGER NOT NULL,
      proto           BLOB NOT NULL
    );
    CREATE INDEX jobs_by_created ON jobs (created_unix_ms, id);
    CREATE TABLE plan_versions (
      job_id          TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
      version         INTEGER NOT NULL,
      created_unix_ms INTEGER NOT NULL,
      proto           BLOB NOT NULL,
      PRIMARY KEY (job_id, version)
    );
    CREATE TABLE calibration (
      job_id  TEXT PRIMARY KEY NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
      factors BLOB NOT NULL  -- host-order IEEE-754 doubles, one per layer
    );
    CREATE TABLE agents (
      node_id            TEXT PRIMARY KEY NOT NULL,
      num_devices        INTEGER NOT NULL,
      address            TEXT NOT NULL,
      registered_unix_ms INTEGER NOT NULL
    );
    )sql",
    // 2: monotonic counters (job numbers never repeat, even after a delete and a restart),
    // seeded past every job number already stored as "job-N".
    R"sql(
    CREATE TABLE counters (
      name  TEXT PRIMARY KEY NOT NULL,
      value INTEGER NOT NULL
    );
    INSERT INTO counters (name, value)
      SELECT 'job', COALESCE(MAX(CAST(substr(id, 5) AS INTEGER)), 0) FROM jobs
      WHERE id GLOB 'job-[0-9]*';
    INSERT OR IGNORE INTO counters (name, value) VALUES ('job', 0);
    )sql",
    // 3: the leader's liveness transitions of agents (AgentRecord::lost_unix_ms).
    R"sql(
    ALTER TABLE agents ADD COLUMN lost_unix_ms INTEGER NOT NULL DEFAULT 0;
    )sql",
};
static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) == SqliteStore::kSchemaVersion,
              "one migration per schema version");

constexpr int kBusyTimeoutMs = 2000;

// Statement texts double as keys of the statement cache (by address).
constexpr char kBegin[] = "BEGIN IMMEDIATE";
constexpr char kCommit[] = "COMMIT";
constexpr char kRollback[] = "ROLLBACK";
constexpr char kPutJob[] =
    "INSERT INTO jobs (id, name, created_unix_ms, proto) VALUES (?1, ?2, ?3, ?4) "
    "ON CONFLICT (id) DO UPDATE SET name = excluded.name, "
    "created_unix_ms = excluded.created_unix_ms, proto = excluded.proto";
constexpr char kDeleteJob[] = "DELETE FROM jobs WHERE id = ?1";
constexpr char kLoadJob[] = "SELECT proto FROM jobs WHERE id = ?1";
constexpr char kLoadJobs[] = "SELECT id, proto FROM jobs ORDER BY created_unix_ms, id";
constexpr char kPutPlanVersion[] =
    "INSERT INTO plan_versions (job_id, version, created_unix_ms, proto) "
    "VALUES (?1, ?2, ?3, ?4)";
constexpr char kLoadPlanVersion[] =
    "SELECT proto FROM plan_versions WHERE job_id = ?1 AND version = ?2";
constexpr char kLoadPlanVersions[] =
    "SELECT version, proto FROM plan_versions WHERE job_id = ?1 ORDER BY version";
constexpr char kPutCalibration[] =
    "INSERT INTO calibration (job_id, factors) VALUES (?1, ?2) "
    "ON CONFLICT (job_id) DO UPDATE SET factors = excluded.factors";
constexpr char kLoadCalibration[] = "SELECT factors FROM calibration WHERE job_id = ?1";
constexpr char kPutAgent[] =
    "INSERT INTO agents (node_id, num_devices, address, registered_unix_ms, lost_unix_ms) "
    "VALUES (?1, ?2, ?3, ?4, ?5) "
    "ON CONFLICT (node_id) DO UPDATE SET num_devices = excluded.num_devices, "
    "address = excluded.address, registered_unix_ms = excluded.registered_unix_ms, "
    "lost_unix_ms = excluded.lost_unix_ms";
constexpr char kDeleteAgent[] = "DELETE FROM agents WHERE node_id = ?1";
constexpr char kBumpCounter[] =
    "UPDATE counters SET value = value + 1 WHERE name = ?1 RETURNING value";
constexpr char kLoadAgents[] =
    "SELECT node_id, num_devices, address, registered_unix_ms, lost_unix_ms FROM agents "
    "ORDER BY node_id";

// What the caller should do about a SQLite result code (the status codes of
// docs/contributing.md, "Error handling").
absl::StatusCode CodeFor(int rc) {
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_IOERR:
    case SQLITE_PROTOCOL:
      return absl::StatusCode::kUnavailable;
    case SQLITE_FULL:
    case SQLITE_NOMEM:
      return absl::StatusCode::kResourceExhausted;
    case SQLITE_CANTOPEN:
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return absl::StatusCode::kFailedPrecondition;
    case SQLITE_CONSTRAINT:  // see SqliteStore::Error
      return rc == SQLITE_CONSTRAINT_NOTNULL ? absl::StatusCode::kResourceExhausted
                                             : absl::StatusCode::kInternal;
    default:  // SQLITE_ERROR, SQLITE_MISUSE, SQLITE_RANGE...: a bug here, not the caller's.
      return absl::StatusCode::kInternal;
  }
}

// Resets a cached statement when the scope ends, so it holds no lock and no stale bindings.
class ResetOnExit {
 public:
  explicit ResetOnExit(sqlite3_stmt* stmt) : stmt_(stmt) {}
  ~ResetOnExit() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  ResetOnExit(const ResetOnExit&) = delete;
  ResetOnExit& operator=(const ResetOnExit&) = delete;

 private:
  sqlite3_stmt* const stmt_;
};

void BindText(sqlite3_stmt* stmt, int index, const std::string& text) {
  sqlite3_bind_text(stmt, index, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
}

// A zero-length blob, not NULL, when `bytes` is empty (the columns are NOT NULL).
void BindBlob(sqlite3_stmt* stmt, int index, const void* data, size_t bytes) {
  if (bytes == 0) {
    sqlite3_bind_zeroblob(stmt, index, 0);
  } else {
    sqlite3_bind_blob(stmt, index, data, static_cast<int>(bytes), SQLITE_TRANSIENT);
  }
}

std::string ColumnText(sqlite3_stmt* stmt, int column) {
  const unsigned char* text = sqlite3_column_text(stmt, column);
  return text == nullptr
             ? std::string()
             : std::string(reinterpret_cast<const char*>(text), sqlite3_column_bytes(stmt, column));
}

std::string ColumnBlob(sqlite3_stmt* stmt, int column) {
  const void* blob = sqlite3_column_blob(stmt, column);
  return blob == nullptr
             ? std::string()
             : std::string(static_cast<const char*>(blob), sqlite3_column_bytes(stmt, column));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::Open(const std::string& path,
                                                               int max_value_bytes) {
  if (path.empty()) return absl::InvalidArgumentError("store path is empty");
  if (path != ":memory:") {
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(parent, ec);
      if (ec) {
        return absl::FailedPreconditionError(absl::StrCat(
            "store ", path, ": cannot create directory ", parent.string(), ": ", ec.message()));
      }
    }
  }
  if (path != ":memory:") {
    // SQLite takes an empty file for an empty database; here it means the state was lost
    // (truncated, or replaced by a failed copy): refuse rather than serve no jobs.
    std::error_code ec;
    if (std::filesystem::exists(path, ec) && std::filesystem::is_regular_file(path, ec) &&
        std::filesystem::file_size(path, ec) == 0 && !ec) {
      return absl::FailedPreconditionError(absl::StrCat(
          "store ", path, ": the database file is empty (0 bytes); its state is lost. Restore "
          "it from a backup, or delete it to start with no jobs"));
    }
  }
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    absl::Status status(CodeFor(rc),
                        absl::StrCat("store ", path, ": open: ",
                                     db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc)));
    sqlite3_close_v2(db);
    return status;
  }
  if (max_value_bytes > 0) sqlite3_limit(db, SQLITE_LIMIT_LENGTH, max_value_bytes);
  std::unique_ptr<SqliteStore> store = absl::WrapUnique(new SqliteStore(path, db));
  RETURN_IF_ERROR(store->Init());
  return store;
}

SqliteStore::SqliteStore(std::string path, sqlite3* db) : path_(std::move(path)), db_(db) {}

SqliteStore::~SqliteStore() {
  absl::MutexLock lock(&mu_);
  for (auto& entry : statements_) sqlite3_finalize(entry.second);
  sqlite3_close_v2(db_);  // the last connection checkpoints the WAL into the main file
}

absl::Status SqliteStore::Error(int rc, absl::string_view what) {
  // Every column is NOT NULL and every value is bound: a NULL reaching a column means binding
  // it failed — out of memory, or a value over SQLite's size limit. Other constraints are the
  // schema's own and a violation is a bug here. Neither answer carries SQL text.
  if (rc == SQLITE_CONSTRAINT_NOTNULL) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "store ", path_, ": ", what, ": a value could not be stored (out of memory, or larger "
        "than the store accepts); nothing was written"));
  }
  if ((rc & 0xff) == SQLITE_CONSTRAINT) {
    return absl::InternalError(absl::StrCat("store ", path_, ": ", what,
                                            ": the store refused the write (constraint ", rc,
                                            "); nothing was written"));
  }
  return absl::Status(CodeFor(rc),
                      absl::StrCat("store ", path_, ": ", what, ": ", sqlite3_errmsg(db_)));
}

absl::Status SqliteStore::Exec(absl::string_view sql) {
  const std::string text(sql);
  const int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return Error(rc, text);
  return absl::OkStatus();
}

absl::StatusOr<sqlite3_stmt*> SqliteStore::Prepare(const char* sql) {
  auto it = statements_.find(sql);
  if (it != statements_.end()) return it->second;
  sqlite3_stmt* stmt = nullptr;
  const int rc = sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) return Error(rc, absl::StrCat("prepare ", sql));
  statements_.emplace(sql, stmt);
  return stmt;
}

template <typename Body>
absl::Status SqliteStore::InTransaction(Body body) {
  // BEGIN IMMEDIATE takes the write lock up front, so a busy database fails here (after the
  // busy timeout) rather than half-way through the body.
  {
    ASSIGN_OR_RETURN(sqlite3_stmt * begin, Prepare(kBegin));
    ResetOnExit reset(begin);
    const int rc = sqlite3_step(begin);
    if (rc != SQLITE_DONE) return Error(rc, kBegin);
  }
  absl::Status status = body();
  if (status.ok()) {
    ASSIGN_OR_RETURN(sqlite3_stmt * commit, Prepare(kCommit));
    ResetOnExit reset(commit);
    const int rc = sqlite3_step(commit);
    if (rc == SQLITE_DONE) return absl::OkStatus();
    status = Error(rc, kCommit);
  }
  // SQLite may have rolled back already (e.g. on SQLITE_FULL); otherwise undo the body.
  if (!sqlite3_get_autocommit(db_)) {
    auto rollback = Prepare(kRollback);
    if (rollback.ok()) {
      ResetOnExit reset(*rollback);
      sqlite3_step(*rollback);
    }
  }
  return status;
}

absl::Status SqliteStore::Init() {
  absl::MutexLock lock(&mu_);
  sqlite3_extended_result_codes(db_, 1);
  sqlite3_busy_timeout(db_, kBusyTimeoutMs);
  // The first statement to read the file: reports a corrupt file or one that is not a
  // database.
  std::string journal_mode;
  {
    const char* sql = "PRAGMA journal_mode = WAL";
    const int rc = sqlite3_exec(
        db_, sql,
        [](void* out, int columns, char** values, char**) {
          if (columns > 0 && values[0] != nullptr) *static_cast<std::string*>(out) = values[0];
          return 0;
        },
        &journal_mode, nullptr);
    if (rc != SQLITE_OK) return Error(rc, sql);
  }
  if (journal_mode != "wal" && !(path_ == ":memory:" && journal_mode == "memory")) {
    return absl::FailedPreconditionError(
        absl::StrCat("store ", path_, ": cannot use write-ahead logging (journal_mode is '",
                     journal_mode, "'; is the filesystem read-only or without shared memory?)"));
  }
  RETURN_IF_ERROR(Exec("PRAGMA synchronous = FULL"));
  RETURN_IF_ERROR(Exec("PRAGMA foreign_keys = ON"));
  if (sqlite3_db_readonly(db_, "main") == 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("store ", path_, ": the database is read-only; the planner must write it"));
  }
  RETURN_IF_ERROR(Migrate());
  // Prove the file is writable now, not at the first acknowledged request: a read-only file
  // (or directory) passes the reads above and would fail every mutating call.
  return InTransaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    return Exec("UPDATE schema_version SET version = version");
  });
}

absl::Status SqliteStore::Migrate() {
  return InTransaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    RETURN_IF_ERROR(Exec("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)"));
    int current = 0;
    {
      const char* sql = "SELECT MAX(version) FROM schema_version";
      sqlite3_stmt* stmt = nullptr;
      int rc = sqlite3_prepare_v2(db_, sql, -1, &stmt, nullptr);
      if (rc != SQLITE_OK) return Error(rc, sql);
      rc = sqlite3_step(stmt);
      if (rc == SQLITE_ROW) current = sqlite3_column_int(stmt, 0);  // NULL (no row yet) -> 0
      absl::Status status = rc == SQLITE_ROW ? absl::OkStatus() : Error(rc, sql);
      sqlite3_finalize(stmt);
      RETURN_IF_ERROR(status);
    }
    if (current > kSchemaVersion) {
      return absl::FailedPreconditionError(
          absl::StrCat("store ", path_, ": schema version ", current,
                       " is newer than this binary supports (", kSchemaVersion, ")"));
    }
    if (current == kSchemaVersion) return absl::OkStatus();
    for (int v = current; v < kSchemaVersion; ++v) {
      RETURN_IF_ERROR(Exec(kMigrations[v]));
    }
    RETURN_IF_ERROR(Exec("DELETE FROM schema_version"));
    return Exec(absl::StrCat("INSERT INTO schema_version (version) VALUES (", kSchemaVersion, ")"));
  });
}

// ---- Jobs. ----

absl::Status SqliteStore::WriteJob(const proto::Job& job, const std::string& bytes) {
  absl::MutexLock lock(&mu_);
  return InTransaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Prepare(kPutJob));
    ResetOnExit reset(stmt);
    BindText(stmt, 1, job.id());
    BindText(stmt, 2, job.name());
    sqlite3_bind_int64(stmt, 3, job.created_unix_ms());
    BindBlob(stmt, 4, bytes.data(), bytes.size());
    const int rc = sqlite3_step(stmt);
    if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("put job '", job.id(), "'"));
    return absl::OkStatus();
  });
}

absl::Status SqliteStore::DeleteJob(const std::string& id) {
  absl::MutexLock lock(&mu_);
  return InTransaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Prepare(kDeleteJob));
    ResetOnExit reset(stmt);
    BindText(stmt, 1, id);
    const int rc = sqlite3_step(stmt);
    if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("delete job '", id, "'"));
    if (sqlite3_changes(db_) == 0) {
      return absl::NotFoundError(absl::StrCat("store ", path_, ": no job '", id, "'"));
    }
    return absl::OkStatus();  // plan versions and calibration go by ON DELETE CASCADE
  });
}

absl::StatusOr<std::vector<proto::Job>> SqliteStore::ReadJobs() {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Prepare(kLoadJobs));
  ResetOnExit reset(stmt);
  std::vector<proto::Job> jobs;
  int rc;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    proto::Job job;
    if (!job.ParseFromString(ColumnBlob(stmt, 1))) {
      return absl::DataLossError(absl::StrCat("store ", path_, ": job '", ColumnText(stmt, 0),
                                              "' does not parse as octopipe.proto.Job"));
    }
    jobs.push_back(std::move(job));
  }
  if (rc != SQLITE_DONE) return Error(rc, "load jobs");
  return jobs;
}

absl::StatusOr<std::optional<proto::Job>> SqliteStore::ReadJob(const std::string& id) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Prepare(kLoadJob));
  ResetOnExit reset(stmt);
  BindText(stmt, 1, id);
  const int rc = sqlite3_step(stmt);
  if (rc == SQLITE_DONE) return std::optional<proto::Job>();
  if (rc != SQLITE_ROW) return Error(rc, absl::StrCat("load job '", id, "'"));
  proto::Job job;
  if (!job.ParseFromString(ColumnBlob(stmt, 0))) {
    return absl::DataLossError(absl::StrCat("store ", path_, ": job '", id,
                                            "' does not parse as octopipe.proto.Job"));
  }
  return std::optional<proto::Job>(std::move(job));
}

// ---- Plan versions. ----

absl::Status SqliteStore::WritePlanVersion(const proto::PlanVersion& version,
                                           const std::string& bytes) {
  absl::MutexLock lock(&mu_);
  return InTransaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Prepare(kPutPlanVersion));
    ResetOnExit reset(stmt);
    BindText(stmt, 1, version.job_id());
    sqlite3_bind_int64(stmt, 2, version.version());
    sqlite3_bind_int64(stmt, 3, version.created_unix_ms());
    BindBlob(stmt, 4, bytes.data(), bytes.size());
    const int rc = sqlite3_step(stmt);
    if (rc == SQLITE_CONSTRAINT_PRIMARYKEY) {
      // Writing the identical version again succeeds (the contract of store.h).
      ASSIGN_OR_RETURN(sqlite3_stmt * read, Prepare(kLoadPlanVersion));
      ResetOnExit reset_read(read);
      BindText(read, 1, version.job_id());
      sqlite3_bind_int64(read, 2, version.version());
      if (sqlite3_step(read) == SQLITE_ROW && ColumnBlob(read, 0) == bytes) {
        return absl::OkStatus();
      }
      return absl::AlreadyExistsError(absl::StrCat("store ", path_, ": plan version ",
                                                   version.version(), " of job '", version.job_id(),
                                                   "' already exists"));
    }
    if (rc == SQLITE_CONSTRAINT_FOREIGNKEY) {
      return absl::FailedPreconditionError(
          absl::StrCat("store ", path_, ": plan version ", version.version(), " for job '",
                       version.job_id(), "', which is not stored (PutJob first)"));
    }
    if (rc != SQLITE_DONE) {
      return Error(rc, absl::StrCat("put plan version ", version.version(), " of job '",
                                    version.job_id(), "'"));
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<proto::PlanVersion>> SqliteStore::LoadPlanVersions(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Prepare(kLoadPlanVersions));
  ResetOnExit reset(stmt);
  BindText(stmt, 1, job_id);
  std::vector<proto::PlanVersion> versions;
  int rc;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    proto::PlanVersion version;
    if (!version.ParseFromString(ColumnBlob(stmt, 1))) {
      return absl::DataLossError(absl::StrCat("store ", path_, ": plan version ",
                                              sqlite3_column_int64(stmt, 0), " of job '", job_id,
                                              "' does not parse as octopipe.proto.PlanVersion"));
    }
    versions.push_back(std::move(version));
  }
  if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("load plan versions of job '", job_id, "'"));
  return versions;
}

// ---- Calibration. ----

absl::Status SqliteStore::WriteCalibration(const std::string& job_id,
                                           const std::vector<double>& layer_factors) {
  absl::MutexLock lock(&mu_);
  return InTransaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Prepare(kPutCalibration));
    ResetOnExit reset(stmt);
    BindText(stmt, 1, job_id);
    BindBlob(stmt, 2, layer_factors.data(), layer_factors.size() * sizeof(double));
    const int rc = sqlite3_step(stmt);
    if (rc == SQLITE_CONSTRAINT_FOREIGNKEY) {
      return absl::FailedPreconditionError(absl::StrCat("store ", path_, ": calibration for job '",
                                                        job_id,
                                                        "', which is not stored (PutJob first)"));
    }
    if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("put calibration of job '", job_id, "'"));
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<double>> SqliteStore::LoadCalibration(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Prepare(kLoadCalibration));
  ResetOnExit reset(stmt);
  BindText(stmt, 1, job_id);
  const int rc = sqlite3_step(stmt);
  if (rc == SQLITE_DONE) return std::vector<double>();
  if (rc != SQLITE_ROW) return Error(rc, absl::StrCat("load calibration of job '", job_id, "'"));
  const std::string bytes = ColumnBlob(stmt, 0);
  if (bytes.size() % sizeof(double) != 0) {
    return absl::DataLossError(absl::StrCat("store ", path_, ": calibration of job '", job_id,
                                            "' has ", bytes.size(),
                                            " bytes, not a whole number of doubles"));
  }
  std::vector<double> factors(bytes.size() / sizeof(double));
  if (!bytes.empty()) std::memcpy(factors.data(), bytes.data(), bytes.size());
  return factors;
}

// ---- Counters. ----

absl::StatusOr<int64_t> SqliteStore::NextJobNumber() {
  absl::MutexLock lock(&mu_);
  int64_t value = 0;
  RETURN_IF_ERROR(InTransaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Prepare(kBumpCounter));
    ResetOnExit reset(stmt);
    BindText(stmt, 1, "job");
    const int rc = sqlite3_step(stmt);
    if (rc != SQLITE_ROW) return Error(rc, "next job number");
    value = sqlite3_column_int64(stmt, 0);
    return absl::OkStatus();
  }));
  return value;
}

// ---- Agents. ----

absl::Status SqliteStore::WriteAgent(const AgentRecord& record) {
  absl::MutexLock lock(&mu_);
  return InTransaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Prepare(kPutAgent));
    ResetOnExit reset(stmt);
    BindText(stmt, 1, record.node_id);
    sqlite3_bind_int(stmt, 2, record.num_devices);
    BindText(stmt, 3, record.address);
    sqlite3_bind_int64(stmt, 4, record.registered_unix_ms);
    sqlite3_bind_int64(stmt, 5, record.lost_unix_ms);
    const int rc = sqlite3_step(stmt);
    if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("put agent '", record.node_id, "'"));
    return absl::OkStatus();
  });
}

absl::Status SqliteStore::DeleteAgent(const std::string& node_id) {
  absl::MutexLock lock(&mu_);
  return InTransaction([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Prepare(kDeleteAgent));
    ResetOnExit reset(stmt);
    BindText(stmt, 1, node_id);
    const int rc = sqlite3_step(stmt);
    if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("delete agent '", node_id, "'"));
    if (sqlite3_changes(db_) == 0) {
      return absl::NotFoundError(absl::StrCat("store ", path_, ": no agent '", node_id, "'"));
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<AgentRecord>> SqliteStore::LoadAgents() {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Prepare(kLoadAgents));
  ResetOnExit reset(stmt);
  std::vector<AgentRecord> agents;
  int rc;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    AgentRecord record;
    record.node_id = ColumnText(stmt, 0);
    record.num_devices = sqlite3_column_int(stmt, 1);
    record.address = ColumnText(stmt, 2);
    record.registered_unix_ms = sqlite3_column_int64(stmt, 3);
    record.lost_unix_ms = sqlite3_column_int64(stmt, 4);
    agents.push_back(std::move(record));
  }
  if (rc != SQLITE_DONE) return Error(rc, "load agents");
  return agents;
}

}  // namespace octopipe
