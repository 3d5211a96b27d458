// PlannerService: the thin gRPC adapter (callback API; HeartbeatStream on the asynchronous API,
// see ServeHeartbeatStreams) over JobManager, AgentRegistry and OneShotPlanner. Handlers
// identify and authorize the caller (access.h), validate, convert, call the core classes and
// convert back; absl::Status codes map 1:1 to gRPC codes. One-shot Plan calls are answered by
// OneShotPlanner (one_shot.h), from a pool worker when tuned.
#ifndef OCTOPIPE_PLANNER_SERVICE_SERVICE_H_
#define OCTOPIPE_PLANNER_SERVICE_SERVICE_H_

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "planner_service/access.h"
#include "planner_service/admission.h"
#include "planner_service/agent_registry.h"
#include "planner_service/audit_log.h"
#include "core/clock.h"
#include "planner_service/job_manager.h"
#include "planner_service/leadership.h"
#include "planner_service/one_shot.h"
#include "planner_service/planning.h"
#include "planner_service/store.h"
#include "planner_service/store_watch.h"
#include "planner_service/tuning_pool.h"
#include "proto/planner.grpc.pb.h"

namespace octopipe::planner {

// Told about every finished RPC (metrics); no-op by default.
class RpcObserver {
 public:
  virtual ~RpcObserver() = default;
  virtual void OnRpc(const std::string& method, grpc::StatusCode code) {}
  // One message of a stream handled as a call of its own (HeartbeatStream's heartbeats, as
  // "Heartbeat"): its status and seconds from its arrival to its status. Unary calls' latency
  // is measured by the server's interceptor instead.
  virtual void OnStreamedCall(const std::string& method, grpc::StatusCode code, double seconds) {}
  virtual void OnOneShotPlan(const proto::PlanResult& result) {}
  virtual void OnAgentsAlive(int alive) {}
  // Tuning tasks waiting in each lane of the pool ("jobs", "oneshot"), reported when a Plan or
  // CreateJob call queues work and when a one-shot task starts. For a gauge such as
  // octopipe_tuning_queue_depth{lane}.
  virtual void OnQueueDepth(const std::string& lane, int depth) {}
  // A Plan call looked in the cache of identical requests: served from it (hit) or not.
  virtual void OnPlanCache(bool hit) {}
};

struct ServiceOptions {
  // Who may call what (planner_service/access.h); not owned. Null: every caller is an
  // anonymous admin.
  const AccessControl* access = nullptr;
  // Where mutating calls are recorded (planner_service/audit_log.h): CreateJob, DeleteJob,
  // DrainNode, ReportNodeFailure, RegisterAgent, ReportStageTimes, ReportJobEvent, and
  // Heartbeats that were refused (an accepted heartbeat changes only liveness: one a second
  // per node would drown the log). Not owned; null: none.
  AuditLog* audit = nullptr;
  // With per-node identities: a node registered and alive keeps its agent's address; a
  // registration with another address is FAILED_PRECONDITION until that agent is gone, so
  // whoever holds a node's credential cannot redirect its peers while it runs.
  bool pin_agent_addresses = false;
  PlanningLimits limits;
  int64_t heartbeat_interval_ms = 1000;  // told to agents at registration
  // One-shot Plan calls under load (planner_service/admission.h).
  AdmissionOptions admission;
  // Answers to identical Plan requests (planner_service/plan_cache.h); 0 entries: no cache.
  int plan_cache_entries = 256;
  int64_t plan_cache_bytes = 64 << 20;
  const Clock* clock = nullptr;  // for deadlines; null: a RealClock
  // This replica's role among replicas on one etcd store (leadership.h); null: a lone planner,
  // always the leader. A follower answers one-shot Plan calls, health checks, GetJob, ListJobs
  // and ListAgents from the store (agents' liveness as the leader last stored it: its
  // registrations and the losses it declared, not heartbeats), and WatchPlan from the store too
  // (StoreWatcher: versions polled every 250 ms; with include_events, only the leader streams
  // events); every other job and agent call (the writes) gets UNAVAILABLE naming the leader
  // (trailing metadata octopipe-leader too), for the client to retry there.
  const Role* role = nullptr;
};

// One-shot Plan calls: their cache, coalescing, admission and expiry are OneShotPlanner's
// (planner_service/one_shot.h, which states the contract).
//
// Agent registration (documented contract): registering a node that is already registered
// and alive with the same num_devices is a retry or an agent restart and replaces the
// address (with ServiceOptions::pin_agent_addresses only the same address); a different num_devices while it is alive is FAILED_PRECONDITION (two agents claim
// one node) — drain it or let it time out first. DrainNode / ReportNodeFailure for a node no
// agent registered and no job's cluster has is NOT_FOUND.

grpc::Status ToGrpc(const absl::Status& status);

// The generated service with every method on the callback API but HeartbeatStream, which is on
// the asynchronous API (marked async first: a method marked callback keeps its handler).
using PlannerServiceBase = proto::Planner::WithCallbackMethod_Plan<
    proto::Planner::WithCallbackMethod_CreateJob<proto::Planner::WithCallbackMethod_GetJob<
        proto::Planner::WithCallbackMethod_ListJobs<proto::Planner::WithCallbackMethod_DeleteJob<
            proto::Planner::WithCallbackMethod_WatchPlan<
                proto::Planner::WithCallbackMethod_RegisterAgent<
                    proto::Planner::WithCallbackMethod_Heartbeat<
                        proto::Planner::WithCallbackMethod_ReportStageTimes<
                            proto::Planner::WithCallbackMethod_ReportNodeFailure<
                                proto::Planner::WithCallbackMethod_DrainNode<
                                    proto::Planner::WithCallbackMethod_ReportJobEvent<
                                        proto::Planner::WithCallbackMethod_ListAgents<
                                            proto::Planner::WithAsyncMethod_HeartbeatStream<
                                                proto::Planner::Service>>>>>>>>>>>>>>;

// HeartbeatStream is served with gRPC's asynchronous API from completion queues of the server's
// own (ServeHeartbeatStreams), every other method with the callback API.
class PlannerService final : public PlannerServiceBase {
 public:
  PlannerService(JobManager* jobs, AgentRegistry* agents, Store* store, TuningPool* pool,
                 ServiceOptions options, RpcObserver* observer = nullptr);

  // The server's health service (after the server is built): set NOT_SERVING while the
  // one-shot Plan queue is full, SERVING again when it has room. Not owned; may stay unset.
  void SetHealthService(grpc::HealthCheckServiceInterface* health);

  grpc::ServerUnaryReactor* Plan(grpc::CallbackServerContext* ctx,
                                 const proto::PlanRequest* request,
                                 proto::PlanResponse* response) override;
  grpc::ServerUnaryReactor* CreateJob(grpc::CallbackServerContext* ctx,
                                      const proto::CreateJobRequest* request,
                                      proto::Job* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx,
                                   const proto::GetJobRequest* request,
                                   proto::GetJobResponse* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx,
                                     const proto::ListJobsRequest* request,
                                     proto::ListJobsResponse* response) override;
  grpc::ServerUnaryReactor* DeleteJob(grpc::CallbackServerContext* ctx,
                                      const proto::DeleteJobRequest* request,
                                      proto::DeleteJobResponse* response) override;
  grpc::ServerWriteReactor<proto::PlanVersion>* WatchPlan(
      grpc::CallbackServerContext* ctx, const proto::WatchPlanRequest* request) override;
  grpc::ServerUnaryReactor* RegisterAgent(grpc::CallbackServerContext* ctx,
                                          const proto::RegisterAgentRequest* request,
                                          proto::RegisterAgentResponse* response) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const proto::HeartbeatRequest* request,
                                      proto::HeartbeatResponse* response) override;
  // HeartbeatStream calls, served from `cqs` (queues the server was built with) on the calling
  // thread until the queues are shut down (after the server) and drained. Each heartbeat is
  // authorized (the caller identified from the stream's credentials again, so an identities
  // reload reaches open streams too), required to reach the leader and handled by Beat, as a
  // unary Heartbeat would be, and recorded as a "Heartbeat" call (counter and latency). Nothing
  // is written back while the node is fine; a drained node gets {drained: true} and the stream
  // ends OK; a refused heartbeat ends the stream with its error, audited as a refused unary one.
  // `batch` > 0: the thread wakes every `batch` and handles every heartbeat that completed on
  // any queue meanwhile — one wake-up for dozens of heartbeats instead of one each, at most
  // `batch` later while they keep coming; their latency is counted from the last time their
  // queue was found empty, an upper bound of the time they waited. Wake-ups that find nothing
  // double the wait, up to 32 x `batch` and at most 100 ms (or `batch`, if longer): an idle
  // planner wakes a few times a second, and the first heartbeat after a quiet spell waits up
  // to that long. A queue gives at most 256 completions a round, so one stream that beats
  // without pause cannot hold the thread. Several queues keep each one's outstanding
  // operations (one read per open stream) few: the debug build of libgrpc searches them
  // linearly on every completion.
  // `batch` zero: one queue, each completion handled as it arrives.
  void ServeHeartbeatStreams(const std::vector<grpc::ServerCompletionQueue*>& cqs,
                             absl::Duration batch);
  // Shuts `cqs` down once no HeartbeatStream operation can start on them any more; call after
  // the server's Shutdown (which cancels the streams), then join the thread serving them. Calls
  // that complete afterwards are released without starting another operation.
  void StopHeartbeatStreams(const std::vector<grpc::ServerCompletionQueue*>& cqs);
  grpc::ServerUnaryReactor* ReportStageTimes(grpc::CallbackServerContext* ctx,
                                             const proto::ReportStageTimesRequest* request,
                                             proto::ReportStageTimesResponse* response) override;
  grpc::ServerUnaryReactor* ReportNodeFailure(grpc::CallbackServerContext* ctx,
                                              const proto::NodeRequest* request,
                                              proto::NodeResponse* response) override;
  grpc::ServerUnaryReactor* DrainNode(grpc::CallbackServerContext* ctx,
                                      const proto::NodeRequest* request,
                                      proto::NodeResponse* response) override;
  grpc::ServerUnaryReactor* ReportJobEvent(grpc::CallbackServerContext* ctx,
                                           const proto::ReportJobEventRequest* request,
                                           proto::ReportJobEventResponse* response) override;
  grpc::ServerUnaryReactor* ListAgents(grpc::CallbackServerContext* ctx,
                                       const proto::ListAgentsRequest* request,
                                       proto::ListAgentsResponse* response) override;

 private:
  friend class AsyncHeartbeatCall;
  // One heartbeat of `node` (unary or streamed; the caller is authorized and this replica
  // leads): refused for an empty or unknown node, `drained` set for a drained one.
  absl::Status Beat(const std::string& node, bool* drained);
  // Finishes a unary call, recording it.
  grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx, const char* method,
                                 const absl::Status& status);
  // Replaces the generated handlers so that request bytes that do not parse are answered
  // INVALID_ARGUMENT naming the method (planner_service/decode_check.h), not gRPC's bare
  // UNIMPLEMENTED.
  void CheckDecoding();
  template <class Req, class Resp>
  void CheckDecodingUnary(const char* method,
                          grpc::ServerUnaryReactor* (PlannerService::*fn)(
                              grpc::CallbackServerContext*, const Req*, Resp*));
  // Identifies the caller (AccessControl::Identify: its bearer token or client certificate)
  // and checks that it may call `method` (AccessControl::Permit, for `node` with Need::kNode).
  // `who` is set once the caller is identified, also when it is then refused.
  absl::Status Authorize(grpc::ServerContextBase* ctx, const char* method, Need need,
                         const std::string& node, std::optional<Principal>* who) const;
  // A mutating unary call: authorizes it, requires the leader, runs `body` (which may refine
  // *target, e.g. to the job it created), records it in the audit log (`audit_ok`: also when
  // it succeeded) and finishes it.
  grpc::ServerUnaryReactor* Mutating(grpc::CallbackServerContext* ctx, const char* method,
                                     Need need, std::string target,
                                     const std::function<absl::Status(std::string* target)>& body,
                                     bool audit_ok = true);
  // A read: authorizes it (Need::kRead), then runs `body` and finishes the call.
  grpc::ServerUnaryReactor* Read(grpc::CallbackServerContext* ctx, const char* method,
                                 const std::function<absl::Status()>& body);
  // Whether this replica leads (always, for a lone planner).
  bool Leading() const;
  // A follower's GetJob: the job and its newest plan version as stored.
  absl::StatusOr<JobSnapshot> SnapshotFromStore(const std::string& id) const;
  // OK on the leader (or a lone planner); on a follower UNAVAILABLE naming the leader.
  absl::Status RequireLeader(grpc::ServerContextBase* ctx, const char* method) const;
  absl::Status LoseNode(const proto::NodeRequest& request, ReplanReason reason,
                        proto::NodeResponse* response);
  // Stores that the leader declared `node_id` lost, for followers' ListAgents (a failed write
  // is logged: liveness in the leader's memory is what matters while it leads).
  void PersistLoss(const std::string& node_id);
  absl::Status CheckRegistration(const proto::RegisterAgentRequest& request) const;
  // Health follows the one-shot queue: NOT_SERVING exactly while it is full. Also reports
  // both queue depths to the observer.
  void UpdateHealth();

  // Serializes HeartbeatStream completions with StopHeartbeatStreams: an operation must not
  // start on a completion queue that is shut down.
  absl::Mutex heartbeat_mu_;
  bool heartbeat_stopping_ ABSL_GUARDED_BY(heartbeat_mu_) = false;
  JobManager* const jobs_;
  AgentRegistry* const agents_;
  Store* const store_;
  TuningPool* const pool_;
  const ServiceOptions options_;
  RpcObserver* const observer_;
  RealClock real_clock_;
  const Clock* const clock_;
  std::atomic<grpc::HealthCheckServiceInterface*> health_{nullptr};
  std::atomic<int> serving_{-1};  // last status set: -1 unknown, 0 NOT_SERVING, 1 SERVING
  // A replica's: WatchPlan answered as a follower, from the store. Null for a lone planner.
  std::unique_ptr<StoreWatcher> store_watcher_;
  // One-shot Plan calls. Last: destroyed (its expiry thread joined) first.
  OneShotPlanner one_shot_;
};

}  // namespace octopipe::planner

#endif  // OCTOPIPE_PLANNER_SERVICE_SERVICE_H_
