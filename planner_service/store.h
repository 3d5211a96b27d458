// The planner service's durable state — jobs, their plan versions, per-job calibration, the
// registered agents and the job-number counter — behind one interface with two implementations:
// SqliteStore (sqlite_store.h: one local file, the embedded default) and EtcdStore
// (etcd_store.h: a replicated etcd cluster, for planner replicas). OpenStore (open_store.h)
// picks one from a --store value. The same contract test suite runs against both
// (store_contract_test.cc).
//
// Durability: a call that returned OK is durable (SQLite: committed with synchronous=FULL;
// etcd: committed by a quorum of members) and survives the planner process being killed. A call
// that failed changed nothing. Every write is one transaction.
//
// Jobs are kept as the planner's domain records (planner_service/job_state.h) and persisted as
// the proto::Job message the planner has always stored (job_convert.h converts at this
// boundary), so state written before job state had a domain form loads unchanged.
//
// Integrity: plan versions and calibration belong to a job: writing either for a job that is
// not stored is kFailedPrecondition, and DeleteJob removes them with the job. PutJob is an
// upsert that keeps the job's plan versions and calibration.
//
// Error codes (by what the caller should do, docs/contributing.md), every message naming the
// store (Describe()) and the backend's own message:
//   kInvalidArgument     a malformed argument (empty id, version < 1, non-finite factor);
//   kNotFound            deleting a job or an agent that is not stored;
//   kAlreadyExists       a plan version that is already stored for the job;
//   kFailedPrecondition  the store cannot be opened or is from a newer schema (details per
//                        backend); a write for a job that is not stored;
//   kAborted             a fenced write refused because this process no longer holds the
//                        fence (EtcdStore with a leader fence: it lost the leadership);
//   kUnavailable         the backend is busy or unreachable (SQLite locked by another process
//                        or an I/O error; no etcd quorum); retrying may succeed;
//   kResourceExhausted   the disk (SQLite) or the etcd quota is full, or a value is larger
//                        than etcd accepts;
//   kDataLoss            a stored proto no longer parses.
//
// Thread safety: all methods may be called concurrently.
#ifndef OCTOPIPE_PLANNER_SERVICE_STORE_H_
#define OCTOPIPE_PLANNER_SERVICE_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "planner_service/job_state.h"
#include "proto/planner.pb.h"

namespace octopipe {

// A registered worker agent as stored. Heartbeats are not persisted, but the leader's liveness
// transitions are: a registration stores the node alive (lost_unix_ms 0), the leader's failure
// detector, a failure report or a drain stores when the node was lost — so followers answer
// ListAgents from the store. (A restarted or new leader still gives every stored agent a full
// heartbeat timeout, whatever was stored.)
struct AgentRecord {
  std::string node_id;
  int num_devices = 0;
  std::string address;
  int64_t registered_unix_ms = 0;
  int64_t lost_unix_ms = 0;  // 0: alive as far as the leader knew when it last wrote
};

class Store {
 public:
  virtual ~Store() = default;

  // Where the state lives, for messages and logs ("sqlite:/var/lib/octopipe/planner.db",
  // "etcd:10.0.0.1:2379,10.0.0.2:2379 prefix /octopipe").
  virtual std::string Describe() const = 0;

  // ---- Jobs. ----
  // Inserts or replaces the job with job.id (non-empty), stored as JobToProto(job). Keeps its
  // plan versions and calibration.
  absl::Status PutJob(const planner::JobRecord& job);
  // The same for a job given in its stored form, written as it is: for tools and for tests
  // that store what older planners wrote.
  absl::Status PutJobMessage(const proto::Job& job);
  // Removes the job with its plan versions and calibration; kNotFound if not stored.
  virtual absl::Status DeleteJob(const std::string& id) = 0;
  // Every job (JobFromProto of what is stored), ordered by created_unix_ms, then id.
  absl::StatusOr<std::vector<planner::JobRecord>> LoadJobs();
  // One job; kNotFound when it is not stored.
  absl::StatusOr<planner::JobRecord> LoadJob(const std::string& id);

  // ---- Plan versions (immutable once written). ----
  // Adds version.version() (>= 1) of job version.job_id(); kAlreadyExists if a different
  // version with that number is stored (the identical one again is OK: a retried write),
  // kFailedPrecondition if the job is not.
  absl::Status PutPlanVersion(const proto::PlanVersion& version);
  // The job's versions in ascending order (empty when none or when the job is unknown).
  virtual absl::StatusOr<std::vector<proto::PlanVersion>> LoadPlanVersions(
      const std::string& job_id) = 0;

  // ---- Calibration: per-layer factors measured/predicted, one vector per job. ----
  // Replaces the job's factors (each must be finite); kFailedPrecondition if the job is not
  // stored.
  absl::Status PutCalibration(const std::string& job_id, const std::vector<double>& layer_factors);
  // The job's factors; an empty vector when none are stored.
  virtual absl::StatusOr<std::vector<double>> LoadCalibration(const std::string& job_id) = 0;

  // ---- Counters. ----
  // The next job number: 1, 2, ... durable and never repeated, even after the job with the
  // highest number is deleted and the process restarts (a store that has jobs but no counter
  // yet continues after the highest stored "job-N").
  virtual absl::StatusOr<int64_t> NextJobNumber() = 0;

  // ---- Agents. ----
  // Inserts or replaces the agent with record.node_id (non-empty).
  absl::Status PutAgent(const AgentRecord& record);
  // kNotFound if not stored.
  virtual absl::Status DeleteAgent(const std::string& node_id) = 0;
  // Every agent, ordered by node_id.
  virtual absl::StatusOr<std::vector<AgentRecord>> LoadAgents() = 0;

 protected:
  Store() = default;
  // The writes and the job load after the public methods validated their arguments; `bytes` is
  // the serialized message.
  virtual absl::Status WriteJob(const proto::Job& job, const std::string& bytes) = 0;
  virtual absl::StatusOr<std::vector<proto::Job>> ReadJobs() = 0;
  // nullopt when the job is not stored.
  virtual absl::StatusOr<std::optional<proto::Job>> ReadJob(const std::string& id) = 0;
  virtual absl::Status WritePlanVersion(const proto::PlanVersion& version,
                                        const std::string& bytes) = 0;
  virtual absl::Status WriteCalibration(const std::string& job_id,
                                        const std::vector<double>& layer_factors) = 0;
  virtual absl::Status WriteAgent(const AgentRecord& record) = 0;

  // Orders jobs as LoadJobs promises (created_unix_ms, then id).
  static void SortJobs(std::vector<proto::Job>& jobs);
};

}  // namespace octopipe

#endif  // OCTOPIPE_PLANNER_SERVICE_STORE_H_
