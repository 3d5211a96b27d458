#include "worker_agent/grpc_planner_link.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "core/convert.h"
#include "core/replan_reason.h"
#include "planner_client/heartbeat_stream.h"
#include "planner_client/planner_client.h"
#include "proto/planner.grpc.pb.h"

namespace octopipe::agent {
namespace {

absl::Status FromGrpc(const char* method, const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat("planner ", method, ": ", s.error_message()));
}

class GrpcPlannerLink final : public PlannerLink {
 public:
  explicit GrpcPlannerLink(std::unique_ptr<client::PlannerClient> planner)
      : planner_(std::move(planner)) {}

  absl::StatusOr<double> Register(const std::string& node, int num_devices,
                                  const std::string& address) override {
    proto::RegisterAgentRequest req;
    req.set_node_id(node);
    req.set_num_devices(num_devices);
    req.set_address(address);
    proto::RegisterAgentResponse resp;
    absl::Status s = Rpc("RegisterAgent", Route::kLeader, &proto::Planner::Stub::RegisterAgent, req, &resp);
    if (!s.ok()) return s;
    return resp.heartbeat_interval_ms() / 1000.0;
  }

  // Heartbeats go on a HeartbeatStream to the leader once a unary Heartbeat found it (and
  // confirmed the node): each later beat is one message on it. A stream the planner ended says
  // what the beat would have: drained, or its error (NOT_FOUND: register again) — one interval
  // after the beat that caused it, which was reported OK. A stream that broke (the leader gone,
  // a follower now, a restart, a host that stopped answering pings: PlannerClientOptions::
  // keepalive_s) is not an answer: the beat goes by a unary call, which fails over to the new
  // leader, and a new stream opens there (the beat the planner missed meanwhile is one of the
  // several its heartbeat timeout allows).
  absl::StatusOr<bool> Heartbeat(const std::string& node) override {
    absl::MutexLock lock(&heartbeat_mu_);
    // A beat still being written is skipped (the next one goes); a stream that ended since
    // the last beat is read below.
    if (stream_ != nullptr && !stream_->ended() && (stream_->Beat() || !stream_->ended())) {
      return false;
    }
    if (stream_ != nullptr) {
      const grpc::Status ended = stream_->status();
      const bool drained = stream_->drained();
      stream_.reset();
      if (drained) return true;
      if (!ended.ok() && ended.error_code() != grpc::StatusCode::UNAVAILABLE &&
          ended.error_code() != grpc::StatusCode::CANCELLED) {
        return FromGrpc("HeartbeatStream", ended);
      }
    }
    proto::HeartbeatRequest req;
    req.set_node_id(node);
    proto::HeartbeatResponse resp;
    absl::Status s = Rpc("Heartbeat", Route::kLeader, &proto::Planner::Stub::Heartbeat, req, &resp);
    if (!s.ok()) return s;
    if (!resp.drained()) {
      const size_t leader = planner_->leader();  // the replica this write just reached
      stream_ = std::make_unique<client::HeartbeatStream>(&planner_->stub(leader),
                                                          planner_->StreamContext(), node);
    }
    return resp.drained();
  }

  absl::StatusOr<std::vector<AgentJob>> AgentJobs() override {
    proto::ListJobsResponse list;
    {
      absl::Status s =
          Rpc("ListJobs", Route::kAny, &proto::Planner::Stub::ListJobs, proto::ListJobsRequest(),
              &list);
      if (!s.ok()) return s;
    }
    std::vector<AgentJob> out;
    for (const proto::Job& job : list.jobs()) {
      if (!job.has_training() || job.current_version() == 0) continue;
      proto::GetJobRequest req;
      req.set_job_id(job.id());
      proto::GetJobResponse got;
      absl::Status s = Rpc("GetJob", Route::kAny, &proto::Planner::Stub::GetJob, req, &got);
      if (absl::IsNotFound(s)) continue;  // deleted meanwhile
      if (!s.ok()) return s;
      if (!got.has_current() || !got.current().result().feasible()) continue;
      absl::StatusOr<Plan> plan = PlanFromProto(got.current().result().plan());
      if (!plan.ok()) continue;  // reported as refused by nobody: not runnable
      AgentJob a;
      a.job_id = job.id();
      a.version = got.current().version();
      a.created_unix_ms = got.current().created_unix_ms();
      if (absl::StatusOr<ReplanReason> r = ReplanReasonFromProto(got.current().reason_kind());
          r.ok()) {
        a.reason = std::string(ReplanReasonName(*r));
      }
      a.plan = std::move(*plan);
      if (got.current().result().has_layout_plan()) {
        absl::StatusOr<LayoutPlan> layout =
            LayoutPlanFromProto(got.current().result().layout_plan());
        if (!layout.ok()) continue;  // not runnable; the planner validated what it wrote
        a.layout = std::move(*layout);
      }
      for (const proto::DeviceSlot& slot : got.current().device_slots()) {
        a.slots.push_back({slot.node_id(), slot.local_device()});
      }
      const proto::AgentTraining& t = job.training();
      a.reference_model = t.reference_model();
      a.iterations = static_cast<int>(t.iterations());
      a.checkpoint_interval = static_cast<int>(t.checkpoint_interval());
      if (t.lr() > 0) a.lr = t.lr();
      if (t.data_seed() != 0) a.data_seed = t.data_seed();
      out.push_back(std::move(a));
    }
    return out;
  }

  absl::StatusOr<std::vector<AgentEndpoint>> Agents() override {
    std::vector<AgentEndpoint> out;
    proto::ListAgentsRequest req;
    do {  // every page (the planner pages by node id)
      proto::ListAgentsResponse resp;
      absl::Status s = Rpc("ListAgents", Route::kAny, &proto::Planner::Stub::ListAgents, req, &resp);
      if (!s.ok()) return s;
      for (const proto::AgentStatus& a : resp.agents()) {
        out.push_back({a.node_id(), a.address(), a.alive()});
      }
      req.set_page_token(resp.next_page_token());
    } while (!req.page_token().empty());
    return out;
  }

  absl::Status ReportStageTimes(const std::string& job_id, int64_t version,
                                const std::string& node,
                                const std::vector<StageTimeReport>& times,
                                const std::vector<LayerTimeReport>& layer_times,
                                const std::vector<DeviceBusyReport>& device_times,
                                const ProgressReport& progress) override {
    proto::ReportStageTimesRequest req;
    req.set_job_id(job_id);
    req.set_plan_version(version);
    req.set_node_id(node);
    for (const StageTimeReport& t : times) {
      proto::StageTime* p = req.add_times();
      p->set_stage(t.stage);
      if (absl::StatusOr<OpKind> k = ParseOpKind(t.op_kind); k.ok()) p->set_kind(OpKindToProto(*k));
      p->set_seconds(t.seconds);
      p->set_samples(t.samples);
    }
    for (const LayerTimeReport& t : layer_times) {
      proto::LayerOpTime* p = req.add_layer_times();
      p->set_layer(t.layer);
      if (absl::StatusOr<OpKind> k = ParseOpKind(t.op_kind); k.ok()) p->set_kind(OpKindToProto(*k));
      p->set_seconds(t.seconds);
      p->set_samples(t.samples);
    }
    for (const DeviceBusyReport& t : device_times) {
      proto::DeviceBusyTime* p = req.add_device_times();
      p->set_device(t.device);
      p->set_busy_seconds(t.busy_s);
      p->set_iteration_seconds(t.iteration_s);
      p->set_iterations(t.iterations);
    }
    proto::JobProgress* p = req.mutable_progress();
    p->set_iteration(progress.iteration);
    p->set_has_loss(progress.has_loss);
    p->set_loss(progress.loss);
    p->set_tokens_per_s(progress.tokens_per_s);
    proto::ReportStageTimesResponse resp;
    return Rpc("ReportStageTimes", Route::kLeader, &proto::Planner::Stub::ReportStageTimes, req,
               &resp, /*idempotent=*/false);
  }

  absl::Status ReportEvent(const std::string& job_id, const JobEventReport& e) override {
    proto::ReportJobEventRequest req;
    req.set_job_id(job_id);
    proto::JobEvent* ev = req.mutable_event();
    ev->set_kind(std::string(JobEventKindName(e.kind)));
    ev->set_node_id(e.node);
    ev->set_plan_version(e.plan_version);
    ev->set_iteration(e.iteration);
    ev->set_message(e.message);
    proto::ReportJobEventResponse resp;
    return Rpc("ReportJobEvent", Route::kLeader, &proto::Planner::Stub::ReportJobEvent, req,
               &resp, /*idempotent=*/false);
  }

 private:
  using Route = client::PlannerClient::Route;

  // Writes go to the leader; a write that reached a replica and then lost it is repeated
  // elsewhere only when it is idempotent (registrations and heartbeats are; stage-time
  // reports and events are not: the error says it may have taken effect, and the next report
  // carries on).
  template <typename Req, typename Resp>
  absl::Status Rpc(const char* method, Route route,
                   grpc::Status (proto::Planner::Stub::*fn)(grpc::ClientContext*, const Req&,
                                                            Resp*),
                   const Req& req, Resp* resp, bool idempotent = true) {
    return FromGrpc(method, planner_->Call(route, fn, req, resp, idempotent));
  }

  std::unique_ptr<client::PlannerClient> planner_;
  absl::Mutex heartbeat_mu_;
  // Destroyed (cancelled, waited for) before planner_, whose stub it uses.
  std::unique_ptr<client::HeartbeatStream> stream_ ABSL_GUARDED_BY(heartbeat_mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<PlannerLink>> ConnectPlanner(const PlannerConnectionOptions& o) {
  client::PlannerClientOptions c;
  c.address = o.address;
  c.token = o.token;
  c.tls_ca = o.tls_ca;
  c.tls_cert = o.tls_cert;
  c.tls_key = o.tls_key;
  c.timeout_s = o.rpc_timeout_s;
  // Replicas being replaced: a call waits for the new leader about as long as a lease lasts,
  // not longer; the agent's own loop retries after that (and keeps training meanwhile).
  c.failover_window_s = o.failover_window_s;
  absl::StatusOr<std::unique_ptr<client::PlannerClient>> planner =
      client::ConnectPlannerClient(c);
  if (!planner.ok()) return planner.status();
  return std::unique_ptr<PlannerLink>(new GrpcPlannerLink(std::move(*planner)));
}

}  // namespace octopipe::agent
