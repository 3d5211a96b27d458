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
#include "core/leader_hint.h"
#include "core/replan_reason.h"
#include "proto/planner.grpc.pb.h"

namespace octopipe::agent {
namespace {

absl::Status FromGrpc(const char* method, const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat("planner ", method, ": ", s.error_message()));
}

absl::StatusOr<std::string> ReadPem(const char* flag, const std::string& path) {
  absl::StatusOr<std::string> text = ReadWholeFile(path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": cannot read '", path, "'"));
  }
  return text;
}

// The planner replicas the agent knows (--planner=A,B,...): calls go to the current one; a
// replica that is unreachable or a follower (UNAVAILABLE naming the leader: "the leader is at
// HOST:PORT") is left for the leader it names, or else the next one, at most once per replica
// per call. A replica whose channel is not connected gets up to a second to connect first: a
// synchronous call that fails fast does not drive the reconnection, and a planner back after a
// restart should be used again within a second.
class PlannerReplicas {
 public:
  PlannerReplicas(std::vector<std::string> addresses,
                  std::shared_ptr<grpc::ChannelCredentials> creds, grpc::ChannelArguments args)
      : addresses_(std::move(addresses)), creds_(std::move(creds)), args_(std::move(args)) {}

  grpc::Status Call(const std::function<grpc::Status(proto::Planner::Stub*)>& call) {
    std::string address = Current();
    grpc::Status last;
    for (size_t attempt = 0; attempt <= addresses_.size(); ++attempt) {
      Replica& r = ReplicaAt(address);
      if (r.channel->GetState(/*try_to_connect=*/true) != GRPC_CHANNEL_READY) {
        r.channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(1));
      }
      last = call(r.stub.get());
      if (last.error_code() != grpc::StatusCode::UNAVAILABLE) {
        SetCurrent(address);
        return last;
      }
      const std::optional<std::string> leader = LeaderNamedIn(last.error_message());
      address = leader.has_value() ? *leader : Next(address);
    }
    return last;
  }

 private:
  struct Replica {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<proto::Planner::Stub> stub;
  };
  std::string Current() {
    absl::MutexLock lock(&mu_);
    return current_.empty() ? addresses_.front() : current_;
  }
  void SetCurrent(const std::string& address) {
    absl::MutexLock lock(&mu_);
    current_ = address;
  }
  std::string Next(const std::string& address) const {
    for (size_t i = 0; i < addresses_.size(); ++i) {
      if (addresses_[i] == address) return addresses_[(i + 1) % addresses_.size()];
    }
    return addresses_.front();
  }
  Replica& ReplicaAt(const std::string& address) {
    absl::MutexLock lock(&mu_);
    std::unique_ptr<Replica>& r = replicas_[address];
    if (r == nullptr) {
      r = std::make_unique<Replica>();
      r->channel = grpc::CreateCustomChannel(address, creds_, args_);
      r->stub = proto::Planner::NewStub(r->channel);
    }
    return *r;
  }

  const std::vector<std::string> addresses_;
  const std::shared_ptr<grpc::ChannelCredentials> creds_;
  const grpc::ChannelArguments args_;
  absl::Mutex mu_;
  std::string current_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<Replica>> replicas_ ABSL_GUARDED_BY(mu_);
};

class GrpcPlannerLink final : public PlannerLink {
 public:
  GrpcPlannerLink(std::unique_ptr<PlannerReplicas> replicas, PlannerConnectionOptions o)
      : replicas_(std::move(replicas)), options_(std::move(o)) {}

  absl::StatusOr<double> Register(const std::string& node, int num_devices,
                                  const std::string& address) override {
    proto::RegisterAgentRequest req;
    req.set_node_id(node);
    req.set_num_devices(num_devices);
    req.set_address(address);
    proto::RegisterAgentResponse resp;
    absl::Status s = Rpc("RegisterAgent", &proto::Planner::Stub::RegisterAgent, req, &resp);
    if (!s.ok()) return s;
    return resp.heartbeat_interval_ms() / 1000.0;
  }

  absl::StatusOr<bool> Heartbeat(const std::string& node) override {
    proto::HeartbeatRequest req;
    req.set_node_id(node);
    proto::HeartbeatResponse resp;
    absl::Status s = Rpc("Heartbeat", &proto::Planner::Stub::Heartbeat, req, &resp);
    if (!s.ok()) return s;
    return resp.drained();
  }

  absl::StatusOr<std::vector<AgentJob>> AgentJobs() override {
    proto::ListJobsResponse list;
    {
      absl::Status s =
          Rpc("ListJobs", &proto::Planner::Stub::ListJobs, proto::ListJobsRequest(), &list);
      if (!s.ok()) return s;
    }
    std::vector<AgentJob> out;
    for (const proto::Job& job : list.jobs()) {
      if (!job.has_training() || job.current_version() == 0) continue;
      proto::GetJobRequest req;
      req.set_job_id(job.id());
      proto::GetJobResponse got;
      absl::Status s = Rpc("GetJob", &proto::Planner::Stub::GetJob, req, &got);
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
      absl::Status s = Rpc("ListAgents", &proto::Planner::Stub::ListAgents, req, &resp);
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
    return Rpc("ReportStageTimes", &proto::Planner::Stub::ReportStageTimes, req, &resp);
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
    return Rpc("ReportJobEvent", &proto::Planner::Stub::ReportJobEvent, req, &resp);
  }

 private:
  std::unique_ptr<grpc::ClientContext> Context() const {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(static_cast<int64_t>(options_.rpc_timeout_s * 1e3)));
    if (!options_.token.empty()) ctx->AddMetadata("authorization", "Bearer " + options_.token);
    return ctx;
  }

  template <typename Req, typename Resp>
  absl::Status Rpc(const char* method,
                   grpc::Status (proto::Planner::Stub::*fn)(grpc::ClientContext*, const Req&,
                                                            Resp*),
                   const Req& req, Resp* resp) {
    return FromGrpc(method, replicas_->Call([&](proto::Planner::Stub* stub) {
      auto ctx = Context();
      return (stub->*fn)(ctx.get(), req, resp);
    }));
  }

  std::unique_ptr<PlannerReplicas> replicas_;
  const PlannerConnectionOptions options_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PlannerLink>> ConnectPlanner(const PlannerConnectionOptions& o) {
  if (o.address.empty()) return absl::InvalidArgumentError("--planner: HOST:PORT is required");
  const std::vector<std::string> addresses = absl::StrSplit(o.address, ',');
  for (const std::string& a : addresses) {
    if (a.empty() || a.find(':') == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--planner: '", a, "' in '", o.address, "' is not HOST:PORT (a list: A,B,C)"));
    }
  }
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!o.tls_ca.empty()) {
    grpc::SslCredentialsOptions ssl;
    absl::StatusOr<std::string> ca = ReadPem("tls_ca", o.tls_ca);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
    if (!o.tls_cert.empty() || !o.tls_key.empty()) {
      absl::StatusOr<std::string> cert = ReadPem("tls_cert", o.tls_cert);
      if (!cert.ok()) return cert.status();
      absl::StatusOr<std::string> key = ReadPem("tls_key", o.tls_key);
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = *cert;
      ssl.pem_private_key = *key;
    }
    creds = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  // Reconnect quickly after a planner restart (the agent's own loop backs off between calls).
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return std::unique_ptr<PlannerLink>(new GrpcPlannerLink(
      std::make_unique<PlannerReplicas>(addresses, creds, args), o));
}

}  // namespace octopipe::agent
