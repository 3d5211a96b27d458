// The planner service's durable state — jobs, their plan versions, per-job calibration and the
// registered agents — in one SQLite file, so a restart of the service loses nothing.
//
// Durability: the database runs in WAL mode with synchronous=FULL, and every write is one
// transaction committed before the call returns OK. A call that returned OK survives the
// process being killed (and, with FULL, a power loss on a filesystem that honours fsync).
// A call that failed changed nothing.
//
// Jobs are kept as the planner's domain records (planner_service/job_state.h) and persisted as
// the proto::Job message the planner has always stored (job_convert.h converts at this
// boundary), so files written before job state had a domain form load unchanged.
//
// Integrity: plan versions and calibration belong to a job (foreign keys, ON DELETE
// CASCADE): writing either for a job that is not stored is kFailedPrecondition, and
// DeleteJob removes them with the job. PutJob is an upsert that keeps the job's plan
// versions and calibration.
//
// Schema: a schema_version table records the version of the layout; Open applies the newer
// migrations (kMigrations in store.cc) in one transaction and refuses (kFailedPrecondition) a
// file written by a newer binary.
//
// Error codes (by what the caller should do, docs/contributing.md), every message naming the
// file and SQLite's own message:
//   kInvalidArgument     a malformed argument (empty id, version < 1, non-finite factor);
//   kNotFound            deleting a job or an agent that is not stored;
//   kAlreadyExists       a plan version that is already stored for the job;
//   kFailedPrecondition  the file cannot be created or opened, is not a database, is
//                        corrupt or read-only (checked at Open with a write), is empty
//                        (0 bytes: an existing file is never taken for a new store), or is
//                        from a newer schema; a write for a job that is not stored;
//   kUnavailable         the database is busy (locked by another process) or an I/O error;
//                        retrying may succeed;
//   kResourceExhausted   the disk is full;
//   kDataLoss            a stored proto no longer parses.
//
// Thread safety: all methods may be called concurrently; one connection is serialised by a
// mutex (so calls do not run in parallel). Meant as one Store per file: a second process on
// the same file works (SQLite's locks; a writer waits up to 2 s for another) but may see
// kUnavailable. A Store must not be used across fork(); the child opens its own.
#ifndef OCTOPIPE_PLANNER_SERVICE_STORE_H_
#define OCTOPIPE_PLANNER_SERVICE_STORE_H_

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
#include "planner_service/job_state.h"
#include "proto/planner.pb.h"

struct sqlite3;
struct sqlite3_stmt;

namespace octopipe {

// A registered worker agent as stored; liveness is not persisted (after a restart every
// agent must heartbeat again within the timeout).
struct AgentRecord {
  std::string node_id;
  int num_devices = 0;
  std::string address;
  int64_t registered_unix_ms = 0;
};

class Store {
 public:
  // The layout version this binary writes (schema_version.version after Open).
  static constexpr int kSchemaVersion = 2;

  // Opens (creating if missing) the database at `path`, creating its parent directories and
  // the schema as needed. ":memory:" gives a private in-memory database (no durability; for
  // tests of callers).
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& path);

  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::string& path() const { return path_; }

  // ---- Jobs. ----
  // Inserts or replaces the job with job.id (non-empty), stored as JobToProto(job). Keeps its
  // plan versions and calibration.
  absl::Status PutJob(const planner::JobRecord& job);
  // The same for a job given in its stored form, written as it is: for tools and for tests
  // that store what older planners wrote.
  absl::Status PutJobMessage(const proto::Job& job);
  // Removes the job with its plan versions and calibration; kNotFound if not stored.
  absl::Status DeleteJob(const std::string& id);
  // Every job (JobFromProto of what is stored), ordered by created_unix_ms, then id.
  absl::StatusOr<std::vector<planner::JobRecord>> LoadJobs();

  // ---- Plan versions (immutable once written). ----
  // Adds version.version() (>= 1) of job version.job_id(); kAlreadyExists if that version is
  // stored, kFailedPrecondition if the job is not.
  absl::Status PutPlanVersion(const proto::PlanVersion& version);
  // The job's versions in ascending order (empty when none or when the job is unknown).
  absl::StatusOr<std::vector<proto::PlanVersion>> LoadPlanVersions(const std::string& job_id);

  // ---- Calibration: per-layer factors measured/predicted, one vector per job. ----
  // Replaces the job's factors (each must be finite); kFailedPrecondition if the job is not
  // stored.
  absl::Status PutCalibration(const std::string& job_id, const std::vector<double>& layer_factors);
  // The job's factors; an empty vector when none are stored.
  absl::StatusOr<std::vector<double>> LoadCalibration(const std::string& job_id);

  // ---- Counters. ----
  // The next job number: 1, 2, ... durable and never repeated, even after the job with the
  // highest number is deleted and the process restarts (a file from schema 1 continues after
  // the highest stored "job-N").
  absl::StatusOr<int64_t> NextJobNumber();

  // ---- Agents. ----
  // Inserts or replaces the agent with record.node_id (non-empty).
  absl::Status PutAgent(const AgentRecord& record);
  // kNotFound if not stored.
  absl::Status DeleteAgent(const std::string& node_id);
  // Every agent, ordered by node_id.
  absl::StatusOr<std::vector<AgentRecord>> LoadAgents();

 private:
  Store(std::string path, sqlite3* db);

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

#endif  // OCTOPIPE_PLANNER_SERVICE_STORE_H_
