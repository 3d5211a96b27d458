// EtcdStore: the Store (store.h) in an etcd cluster (--store=etcd:HOST:PORT[,HOST:PORT...]),
// so that several planner replicas share one state and a lost machine loses nothing.
//
// Key layout (every key under the prefix, "/octopipe" by default; ids are escaped so that
// '/' and '%' in them become %2F and %25):
//   PREFIX/schema_version            "1" (this binary's EtcdStore::kSchemaVersion)
//   PREFIX/jobs/ID                   proto::Job, serialized
//   PREFIX/plans/ID/VVVVVVVVVVVVVVVVVVVV   proto::PlanVersion; V = the version, 20 digits
//   PREFIX/calibration/ID            store::StoredCalibration
//   PREFIX/agents/NODE               store::StoredAgent
//   PREFIX/counters/job              the last job number handed out, decimal
//   PREFIX/leader                    the election of planner replicas (leadership.h)
//
// Every write is one etcd transaction: a plan version is written only if its job exists and
// the version does not (kFailedPrecondition / kAlreadyExists otherwise, decided from the
// same transaction's failure branch); DeleteJob deletes the job, its versions and its
// calibration atomically; the job counter is a compare-and-swap on its mod revision.
//
// Fencing: with SetFence(key, revision), every write also requires `key` to still have
// creation revision `revision` — the leader key this replica won (leadership.h). A replica
// that lost the leadership (its lease expired while it was paused or partitioned) therefore
// cannot write: the transaction fails and the call returns kAborted naming the fence; such
// refusals are counted (fenced_refusals()).
//
// Errors: those of store.h; kUnavailable when no member answers or there is no quorum (the
// message names the members), kResourceExhausted for etcd's quota or request-size limit
// (--max-request-bytes, 1.5 MiB by default; the message names the key and the size).
//
// Thread safety: all methods may be called concurrently.
#ifndef OCTOPIPE_PLANNER_SERVICE_ETCD_STORE_H_
#define OCTOPIPE_PLANNER_SERVICE_ETCD_STORE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "etcd/client.h"
#include "planner_service/store.h"

namespace octopipe {

struct EtcdStoreOptions {
  std::string prefix = "/octopipe";  // no trailing '/'
  etcd::ClientOptions client;
};

// The condition every write of a fenced store carries.
struct EtcdFence {
  std::string key;
  int64_t create_revision = 0;
};

class EtcdStore : public Store {
 public:
  static constexpr int kSchemaVersion = 1;

  // Connects to `endpoints` (etcd::ParseEndpoints), checks the schema version (writing it into
  // an empty prefix) and fails with kUnavailable when the cluster does not answer.
  static absl::StatusOr<std::unique_ptr<EtcdStore>> Open(std::vector<std::string> endpoints,
                                                         EtcdStoreOptions options = {});
  // The same over an existing client (shared with the leader election).
  static absl::StatusOr<std::unique_ptr<EtcdStore>> Open(std::shared_ptr<etcd::Client> client,
                                                         EtcdStoreOptions options = {});

  std::string Describe() const override;
  const std::string& prefix() const { return options_.prefix; }
  const std::shared_ptr<etcd::Client>& client() const { return client_; }

  // Conditions every later write on `fence` (nullopt: none).
  void SetFence(std::optional<EtcdFence> fence) ABSL_LOCKS_EXCLUDED(mu_);
  // Writes refused because the fence no longer held.
  int64_t fenced_refusals() const { return fenced_refusals_.load(); }

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
  EtcdStore(std::shared_ptr<etcd::Client> client, EtcdStoreOptions options);
  absl::Status Init();

  std::string Key(const char* kind, const std::string& id) const;
  std::string PlanKey(const std::string& job_id, int64_t version) const;
  // Every key-value under `prefix`, in key order (paged).
  absl::StatusOr<std::vector<etcdserverpb::KeyValue>> List(const std::string& prefix,
                                                          bool keys_only);
  // Runs `txn` with the fence's compare added (first) and, in the failure branch, a read of
  // the fence key and of each key in `explain` (in that order). A failure caused by the fence
  // is kAborted; otherwise the response is returned for the caller to explain.
  absl::StatusOr<etcdserverpb::TxnResponse> FencedTxn(etcdserverpb::TxnRequest txn,
                                                      const std::vector<std::string>& explain,
                                                      const std::string& what);
  // `status` with "store DESCRIBE: WHAT: " in front and etcd's size limit as
  // kResourceExhausted.
  absl::Status Wrap(const absl::Status& status, const std::string& what) const;

  const std::shared_ptr<etcd::Client> client_;
  const EtcdStoreOptions options_;
  mutable absl::Mutex mu_;
  std::optional<EtcdFence> fence_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> fenced_refusals_{0};
};

}  // namespace octopipe

#endif  // OCTOPIPE_PLANNER_SERVICE_ETCD_STORE_H_
