// PlannerService: the thin gRPC adapter (callback API) over JobManager, AgentRegistry and the
// tuning pool. Handlers check the bearer token, validate, convert, call the core classes and
// convert back; absl::Status codes map 1:1 to gRPC codes. One-shot Plan calls tune on the
// bounded pool (a full queue answers RESOURCE_EXHAUSTED) and finish from the worker thread.
#ifndef OCTOPIPE_PLANNER_SERVICE_SERVICE_H_
#define OCTOPIPE_PLANNER_SERVICE_SERVICE_H_

#include <string>

#include <grpcpp/grpcpp.h>

#include "planner_service/agent_registry.h"
#include "planner_service/job_manager.h"
#include "planner_service/planning.h"
#include "planner_service/store.h"
#include "planner_service/tuning_pool.h"
#include "proto/planner.grpc.pb.h"

namespace octopipe::planner {

// Told about every finished RPC (metrics); no-op by default.
class RpcObserver {
 public:
  virtual ~RpcObserver() = default;
  virtual void OnRpc(const std::string& method, grpc::StatusCode code) {}
  virtual void OnOneShotPlan(const proto::PlanResult& result) {}
  virtual void OnAgentsAlive(int alive) {}
};

struct ServiceOptions {
  // Required from agents and on mutating calls when non-empty ("authorization: Bearer ...").
  std::string token;
  PlanningLimits limits;
  int64_t heartbeat_interval_ms = 1000;  // told to agents at registration
};

grpc::Status ToGrpc(const absl::Status& status);

class PlannerService final : public proto::Planner::CallbackService {
 public:
  PlannerService(JobManager* jobs, AgentRegistry* agents, Store* store, TuningPool* pool,
                 ServiceOptions options, RpcObserver* observer = nullptr);

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
  // Finishes a unary call, recording it.
  grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx, const char* method,
                                 const absl::Status& status);
  absl::Status Authorize(grpc::CallbackServerContext* ctx) const;
  absl::Status LoseNode(const proto::NodeRequest& request, const std::string& reason,
                        proto::NodeResponse* response);

  JobManager* const jobs_;
  AgentRegistry* const agents_;
  Store* const store_;
  TuningPool* const pool_;
  const ServiceOptions options_;
  RpcObserver* const observer_;
};

}  // namespace octopipe::planner

#endif  // OCTOPIPE_PLANNER_SERVICE_SERVICE_H_
