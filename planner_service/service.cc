#include "planner_service/service.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <limits>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "core/leader_hint.h"
#include "core/limits.h"
#include "core/status_macros.h"
#include "logging/logging.h"
#include "planner_service/agent_jobs.h"
#include "core/clock.h"
#include "planner_service/decode_check.h"
#include "planner_service/job_convert.h"
#include "planner_service/one_shot.h"

namespace octopipe::planner {

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  // absl and gRPC share the canonical code numbering.
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

PlannerService::PlannerService(JobManager* jobs, AgentRegistry* agents, Store* store,
                               TuningPool* pool, ServiceOptions options, RpcObserver* observer)
    : jobs_(jobs), agents_(agents), store_(store), pool_(pool), options_(std::move(options)),
      observer_(observer),
      clock_(options_.clock ? options_.clock : &real_clock_),
      one_shot_(pool, clock_,
                OneShotOptions{options_.admission, options_.plan_cache_entries,
                               options_.plan_cache_bytes},
                OneShotHooks{[this](bool hit) {
                               if (observer_) observer_->OnPlanCache(hit);
                             },
                             [this](const proto::PlanResult& r) {
                               if (observer_) observer_->OnOneShotPlan(r);
                             },
                             [this] { UpdateHealth(); }}) {
  // A replica follows the leader's versions in the store for the watches it answers as a
  // follower (StoreWatcher); a lone planner always leads.
  if (options_.role != nullptr) {
    store_watcher_ = std::make_unique<StoreWatcher>(store_, absl::Milliseconds(250));
  }
  CheckDecoding();
}

namespace {

int MethodIndex(const char* method) {
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          proto::Planner::service_full_name());
  return service->FindMethodByName(method)->index();
}

absl::Status Undecodable(const char* method, const google::protobuf::Descriptor* type) {
  return absl::InvalidArgumentError(
      absl::StrCat(method, ": the request bytes are not a valid ", type->full_name(),
                   " message (protobuf parse failed)"));
}

}  // namespace

template <class Req, class Resp>
void PlannerService::CheckDecodingUnary(const char* method,
                                        grpc::ServerUnaryReactor* (PlannerService::*fn)(
                                            grpc::CallbackServerContext*, const Req*, Resp*)) {
  MarkMethodCallback(
      MethodIndex(method),
      new DecodeCheckingUnaryHandler<Req, Resp>(
          [this, fn](grpc::CallbackServerContext* ctx, const Req* request, Resp* response) {
            return (this->*fn)(ctx, request, response);
          },
          [this, method](grpc::CallbackServerContext* ctx) {
            return Done(ctx, method, Undecodable(method, Req::descriptor()));
          }));
}

void PlannerService::CheckDecoding() {
  CheckDecodingUnary("Plan", &PlannerService::Plan);
  CheckDecodingUnary("CreateJob", &PlannerService::CreateJob);
  CheckDecodingUnary("GetJob", &PlannerService::GetJob);
  CheckDecodingUnary("ListJobs", &PlannerService::ListJobs);
  CheckDecodingUnary("DeleteJob", &PlannerService::DeleteJob);
  CheckDecodingUnary("RegisterAgent", &PlannerService::RegisterAgent);
  CheckDecodingUnary("Heartbeat", &PlannerService::Heartbeat);
  CheckDecodingUnary("ReportStageTimes", &PlannerService::ReportStageTimes);
  CheckDecodingUnary("ReportNodeFailure", &PlannerService::ReportNodeFailure);
  CheckDecodingUnary("DrainNode", &PlannerService::DrainNode);
  CheckDecodingUnary("ReportJobEvent", &PlannerService::ReportJobEvent);
  CheckDecodingUnary("ListAgents", &PlannerService::ListAgents);
  MarkMethodCallback(
      MethodIndex("WatchPlan"),
      new DecodeCheckingStreamingHandler<proto::WatchPlanRequest, proto::PlanVersion>(
          [this](grpc::CallbackServerContext* ctx, const proto::WatchPlanRequest* request) {
            return WatchPlan(ctx, request);
          },
          [this](grpc::CallbackServerContext* ctx) -> grpc::ServerWriteReactor<proto::PlanVersion>* {
            const absl::Status s =
                Undecodable("WatchPlan", proto::WatchPlanRequest::descriptor());
            if (observer_) observer_->OnRpc("WatchPlan", static_cast<grpc::StatusCode>(s.code()));
            return new FinishedWriteReactor<proto::PlanVersion>(ToGrpc(s));
          }));
}

grpc::ServerUnaryReactor* PlannerService::Done(grpc::CallbackServerContext* ctx,
                                               const char* method, const absl::Status& status) {
  const grpc::Status g = ToGrpc(status);
  if (observer_) observer_->OnRpc(method, g.error_code());
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(g);
  return reactor;
}

namespace {

// The verified client certificate's subject CN and SANs (none without mutual TLS).
std::vector<std::string> CertificateNames(const grpc::ServerContextBase& ctx) {
  std::vector<std::string> out;
  std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return out;
  for (const char* property : {"x509_common_name", "x509_subject_alternative_name"}) {
    for (const grpc::string_ref& v : auth->FindPropertyValues(property)) {
      out.emplace_back(v.data(), v.size());
    }
  }
  return out;
}

}  // namespace

absl::Status PlannerService::Authorize(grpc::ServerContextBase* ctx, const char* method,
                                       Need need, const std::string& node,
                                       std::optional<Principal>* who) const {
  if (options_.access == nullptr) {
    *who = Principal{"anonymous", AccessRole::kAdmin, ""};
    return absl::OkStatus();
  }
  std::string authorization;
  const auto& md = ctx->client_metadata();
  if (auto it = md.find("authorization"); it != md.end()) {
    authorization.assign(it->second.data(), it->second.size());
  }
  absl::StatusOr<Principal> identified =
      options_.access->Identify(authorization, CertificateNames(*ctx));
  if (!identified.ok()) return identified.status();
  *who = *identified;
  return AccessControl::Permit(**who, method, need, node);
}

grpc::ServerUnaryReactor* PlannerService::Mutating(
    grpc::CallbackServerContext* ctx, const char* method, Need need, std::string target,
    const std::function<absl::Status(std::string* target)>& body, bool audit_ok) {
  std::optional<Principal> who;
  absl::Status s = Authorize(ctx, method, need, target, &who);
  if (s.ok()) s = RequireLeader(ctx, method);
  if (s.ok()) s = body(&target);
  if (options_.audit != nullptr && (audit_ok || !s.ok())) {
    options_.audit->Record(who ? &*who : nullptr, method, target, s);
  }
  return Done(ctx, method, s);
}

grpc::ServerUnaryReactor* PlannerService::Read(grpc::CallbackServerContext* ctx,
                                               const char* method,
                                               const std::function<absl::Status()>& body) {
  std::optional<Principal> who;
  absl::Status s = Authorize(ctx, method, Need::kRead, "", &who);
  if (s.ok()) s = body();
  return Done(ctx, method, s);
}

bool PlannerService::Leading() const {
  return options_.role == nullptr || options_.role->leading();
}

absl::StatusOr<JobSnapshot> PlannerService::SnapshotFromStore(const std::string& id) const {
  JobSnapshot snapshot;
  absl::StatusOr<JobRecord> job = store_->LoadJob(id);
  if (!job.ok()) return job.status();
  snapshot.job = std::move(*job);
  absl::StatusOr<std::vector<proto::PlanVersion>> versions = store_->LoadPlanVersions(id);
  if (!versions.ok()) return versions.status();
  if (!versions->empty()) snapshot.current = std::move(versions->back());
  return snapshot;
}

absl::Status PlannerService::RequireLeader(grpc::ServerContextBase* ctx,
                                           const char* method) const {
  if (Leading()) return absl::OkStatus();
  const std::string leader = options_.role->leader_address();
  ctx->AddTrailingMetadata("octopipe-leader", leader);
  return absl::UnavailableError(absl::StrCat(
      method, ": this planner replica is a follower; ",
      leader.empty() ? std::string("no leader is elected yet; retry shortly")
                     : LeaderHint(leader)));
}

void PlannerService::SetHealthService(grpc::HealthCheckServiceInterface* health) {
  health_.store(health);
  UpdateHealth();
}

void PlannerService::UpdateHealth() {
  if (observer_) {
    observer_->OnQueueDepth("jobs", pool_->queued(TuningPool::Lane::kJobs));
    observer_->OnQueueDepth("oneshot", pool_->queued(TuningPool::Lane::kOneShot));
  }
  grpc::HealthCheckServiceInterface* health = health_.load();
  if (health == nullptr) return;
  const int serving = pool_->full(TuningPool::Lane::kOneShot) ? 0 : 1;
  if (serving_.exchange(serving) != serving) health->SetServingStatus(serving == 1);
}

namespace {

// Seconds to the client's gRPC deadline; infinity when it set none.
double ClientRemaining(const grpc::CallbackServerContext* ctx) {
  const auto deadline = ctx->deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) {
    return std::numeric_limits<double>::infinity();
  }
  return std::chrono::duration<double>(deadline - std::chrono::system_clock::now()).count();
}

}  // namespace

grpc::ServerUnaryReactor* PlannerService::Plan(grpc::CallbackServerContext* ctx,
                                               const proto::PlanRequest* request,
                                               proto::PlanResponse* response) {
  const double arrival = clock_->NowSeconds();
  std::optional<Principal> who;
  if (absl::Status s = Authorize(ctx, "Plan", Need::kSchedule, "", &who); !s.ok()) {
    return Done(ctx, "Plan", s);
  }
  absl::StatusOr<PlanningInput> input =
      PrepareInput(request->model(), request->cluster(), request->options(), {},
                   options_.limits);
  if (!input.ok()) return Done(ctx, "Plan", input.status());
  // The call is not finished before its answer, so `ctx` and `response` stay valid until
  // then; tuning stops when the client cancels or its deadline passes (gRPC cancels the call).
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  one_shot_.Plan(KeyOf(*request), std::move(*input), arrival, ClientRemaining(ctx),
                 [ctx] { return ctx->IsCancelled(); },
                 [this, reactor, response](OneShotAnswer answer) {
                   if (answer.status.ok()) {
                     *response->mutable_result() = std::move(answer.result);
                     response->set_from_cache(answer.from_cache);
                     response->set_tuning_budget_s(answer.tuning_budget_s);
                   }
                   const grpc::Status g = ToGrpc(answer.status);
                   if (observer_) observer_->OnRpc("Plan", g.error_code());
                   reactor->Finish(g);
                 });
  return reactor;
}

grpc::ServerUnaryReactor* PlannerService::CreateJob(grpc::CallbackServerContext* ctx,
                                                    const proto::CreateJobRequest* request,
                                                    proto::Job* response) {
  return Mutating(ctx, "CreateJob", Need::kSchedule, request->name(), [&](std::string* target) {
    absl::StatusOr<proto::CreateJobRequest> resolved = ResolveAgentTraining(*request);
    if (!resolved.ok()) return resolved.status();
    absl::StatusOr<JobRecord> job = jobs_->Create(NewJobFromProto(*resolved));
    if (job.ok()) {
      *response = JobToProto(*job);
      *target = job->id;
    }
    UpdateHealth();
    return job.status();
  });
}

grpc::ServerUnaryReactor* PlannerService::GetJob(grpc::CallbackServerContext* ctx,
                                                 const proto::GetJobRequest* request,
                                                 proto::GetJobResponse* response) {
  return Read(ctx, "GetJob", [&]() -> absl::Status {
    absl::StatusOr<JobSnapshot> r =
        Leading() ? jobs_->Get(request->job_id()) : SnapshotFromStore(request->job_id());
    if (r.ok()) *response = GetJobResponseOf(r->job, r->current ? &*r->current : nullptr);
    return r.status();
  });
}

grpc::ServerUnaryReactor* PlannerService::ListJobs(grpc::CallbackServerContext* ctx,
                                                   const proto::ListJobsRequest* request,
                                                   proto::ListJobsResponse* response) {
  return Read(ctx, "ListJobs", [&]() -> absl::Status {
    std::vector<JobRecord> jobs;
    if (Leading()) {
      jobs = jobs_->List();
    } else {  // a follower reads the store (same order: created, then id)
      absl::StatusOr<std::vector<JobRecord>> stored = store_->LoadJobs();
      if (!stored.ok()) return stored.status();
      jobs = std::move(*stored);
    }
    absl::StatusOr<proto::ListJobsResponse> page =
        ListJobsPage(jobs, request->page_size(), request->page_token());
    if (page.ok()) *response = std::move(*page);
    return page.status();
  });
}

grpc::ServerUnaryReactor* PlannerService::DeleteJob(grpc::CallbackServerContext* ctx,
                                                    const proto::DeleteJobRequest* request,
                                                    proto::DeleteJobResponse* response) {
  return Mutating(ctx, "DeleteJob", Need::kSchedule, request->job_id(),
                  [&](std::string*) { return jobs_->Delete(request->job_id()); });
}

namespace {

// Streams plan versions. The JobManager's callbacks may outlive the reactor, so they hold
// shared state with an `alive` flag; the reactor deletes itself in OnDone.
class WatchReactor : public grpc::ServerWriteReactor<proto::PlanVersion> {
 public:
  struct Shared {
    absl::Mutex mu;
    WatchReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;
  };

  WatchReactor(JobManager* jobs, RpcObserver* observer)
      : jobs_(jobs), observer_(observer), shared_(std::make_shared<Shared>()) {
    absl::MutexLock lock(&shared_->mu);
    shared_->reactor = this;
  }

  // What a subscription calls: a new version (queued for writing) and the job's end. They
  // hold the shared state only, so they may outlive the reactor.
  std::function<void(const proto::PlanVersion&)> OnVersion() const {
    return [shared = shared_](const proto::PlanVersion& v) {
      absl::MutexLock lock(&shared->mu);
      if (shared->reactor) shared->reactor->Enqueue(v);
    };
  }
  std::function<void()> OnEnd() const {
    return [shared = shared_] {
      absl::MutexLock lock(&shared->mu);
      if (shared->reactor) shared->reactor->EndWhenDrained();
    };
  }

  // A follower's watch: the versions as the store has them (StoreWatcher), without events.
  void StartFromStore(StoreWatcher* watcher, const proto::WatchPlanRequest& request) {
    absl::StatusOr<int64_t> sub =
        watcher->Watch(request.job_id(), request.after_version(), OnVersion(), OnEnd());
    if (!sub.ok()) {
      FinishWith(ToGrpc(sub.status()));
      return;
    }
    absl::MutexLock lock(&mu_);
    subscription_ = *sub;
    unwatch_ = [watcher](int64_t id) { watcher->Unwatch(id); };
  }

  void Start(const proto::WatchPlanRequest& request) {
    std::shared_ptr<Shared> shared = shared_;
    absl::StatusOr<int64_t> sub = jobs_->Watch(
        request.job_id(), request.after_version(), OnVersion(), OnEnd(),
        request.include_events() ? std::function<void(const JobEvent&)>(
                                       [shared, job = request.job_id()](const JobEvent& e) {
                                         proto::PlanVersion m;
                                         m.set_job_id(job);
                                         *m.mutable_event() = JobEventToProto(e);
                                         absl::MutexLock lock(&shared->mu);
                                         if (shared->reactor) shared->reactor->Enqueue(m);
                                       })
                                 : nullptr);
    if (!sub.ok()) {
      FinishWith(ToGrpc(sub.status()));
      return;
    }
    absl::MutexLock lock(&mu_);
    subscription_ = *sub;
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      // The stream is broken; no later write can succeed. OnDone only follows a Finish, so
      // finish here rather than rely on OnCancel (and never start another write).
      if (!finished_) {
        finished_ = true;
        code_ = grpc::StatusCode::CANCELLED;
        Finish(grpc::Status::CANCELLED);
      }
      return;
    }
    queue_.pop_front();
    WriteNextLocked();
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    if (!finished_) {
      finished_ = true;
      code_ = grpc::StatusCode::CANCELLED;
      Finish(grpc::Status::CANCELLED);
    }
  }

  void FinishWith(const grpc::Status& status) {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    finished_ = true;
    code_ = status.error_code();
    Finish(status);
  }

  void OnDone() override {
    {
      absl::MutexLock lock(&shared_->mu);
      shared_->reactor = nullptr;
    }
    int64_t sub = 0;
    grpc::StatusCode code;
    std::function<void(int64_t)> unwatch;
    {
      absl::MutexLock lock(&mu_);
      sub = subscription_;
      code = code_;
      unwatch = unwatch_;
    }
    if (sub) unwatch ? unwatch(sub) : jobs_->Unwatch(sub);
    if (observer_) observer_->OnRpc("WatchPlan", code);
    delete this;
  }

 private:
  void Enqueue(const proto::PlanVersion& v) {
    absl::MutexLock lock(&mu_);
    if (finished_ || (!v.has_event() && v.version() <= last_queued_)) return;
    if (!v.has_event()) last_queued_ = v.version();
    queue_.push_back(v);
    WriteNextLocked();
  }

  void EndWhenDrained() {
    absl::MutexLock lock(&mu_);
    end_ = true;
    WriteNextLocked();
  }

  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_) return;
    if (!queue_.empty()) {
      writing_ = true;
      StartWrite(&queue_.front());
    } else if (end_) {
      finished_ = true;
      code_ = grpc::StatusCode::NOT_FOUND;
      Finish(grpc::Status(grpc::StatusCode::NOT_FOUND, "job_id: the job was deleted"));
    }
  }

  JobManager* const jobs_;
  RpcObserver* const observer_;
  std::shared_ptr<Shared> shared_;
  absl::Mutex mu_;
  // A deque: StartWrite keeps a pointer to the front while new versions are appended.
  std::deque<proto::PlanVersion> queue_ ABSL_GUARDED_BY(mu_);
  grpc::StatusCode code_ ABSL_GUARDED_BY(mu_) = grpc::StatusCode::OK;
  int64_t last_queued_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t subscription_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<void(int64_t)> unwatch_ ABSL_GUARDED_BY(mu_);  // empty: the JobManager's
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool end_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerWriteReactor<proto::PlanVersion>* PlannerService::WatchPlan(
    grpc::CallbackServerContext* ctx, const proto::WatchPlanRequest* request) {
  auto* reactor = new WatchReactor(jobs_, observer_);
  std::optional<Principal> who;
  if (absl::Status s = Authorize(ctx, "WatchPlan", Need::kRead, "", &who); !s.ok()) {
    reactor->FinishWith(ToGrpc(s));
    return reactor;
  }
  if (!Leading() && store_watcher_ != nullptr && !request->include_events()) {
    reactor->StartFromStore(store_watcher_.get(), *request);
    return reactor;
  }
  if (absl::Status s = RequireLeader(ctx, "WatchPlan"); !s.ok()) {
    reactor->FinishWith(ToGrpc(s));
    return reactor;
  }
  reactor->Start(*request);
  return reactor;
}

grpc::ServerUnaryReactor* PlannerService::RegisterAgent(
    grpc::CallbackServerContext* ctx, const proto::RegisterAgentRequest* request,
    proto::RegisterAgentResponse* response) {
  return Mutating(ctx, "RegisterAgent", Need::kNode, request->node_id(), [&](std::string*) {
    RETURN_IF_ERROR(CheckRegistration(*request));
    AgentRecord record;
    record.node_id = request->node_id();
    record.num_devices = request->num_devices();
    record.address = request->address();
    record.registered_unix_ms = UnixMillis();
    // Persist before registering: a failed store write leaves the node as it was.
    RETURN_IF_ERROR(store_->PutAgent(record));
    agents_->Register(request->node_id(), request->num_devices(), request->address(),
                      record.registered_unix_ms);
    // A registering agent says its node is up, so every job still excluding it takes it back
    // (a no-op for the others). Not only when the registry saw the node as new or failed:
    // agents restored from the store on a restart come back alive, so a node excluded before
    // the restart would otherwise never rejoin.
    const std::vector<std::string> rejoined = jobs_->NodeJoined(request->node_id());
    logging::Event(*logging::Logger("agents"), spdlog::level::info, "agent registered",
                   {{"node", request->node_id()}, {"devices", request->num_devices()},
                    {"address", request->address()}, {"rejoined_jobs", rejoined}});
    if (observer_) observer_->OnAgentsAlive(agents_->AliveCount());
    response->set_heartbeat_interval_ms(options_.heartbeat_interval_ms);
    return absl::OkStatus();
  });
}

absl::Status PlannerService::Beat(const std::string& node, bool* drained) {
  *drained = false;
  if (node.empty()) return absl::InvalidArgumentError("node_id is empty");
  if (agents_->IsDrained(node)) {
    *drained = true;  // the agent leaves instead of registering again
    return absl::OkStatus();
  }
  return agents_->Heartbeat(node);
}

grpc::ServerUnaryReactor* PlannerService::Heartbeat(grpc::CallbackServerContext* ctx,
                                                    const proto::HeartbeatRequest* request,
                                                    proto::HeartbeatResponse* response) {
  return Mutating(
      ctx, "Heartbeat", Need::kNode, request->node_id(),
      [&](std::string*) {
        bool drained = false;
        absl::Status s = Beat(request->node_id(), &drained);
        response->set_drained(drained);
        return s;
      },
      /*audit_ok=*/false);
}

// One HeartbeatStream call on a completion queue (PlannerService::ServeHeartbeatStreams). At
// most one operation of a call is outstanding, so the call itself is its tag and `state_` says
// which operation completed: the request for a call, a read, the write of {drained: true}, the
// finish. The call deletes itself when it is finished or never started.
class AsyncHeartbeatCall {
 public:
  AsyncHeartbeatCall(PlannerService* service, grpc::ServerCompletionQueue* cq)
      : service_(service), cq_(cq), stream_(&ctx_) {
    service_->RequestHeartbeatStream(&ctx_, &stream_, cq_, cq_, this);
  }

  // `arrival`: the earliest the completion can have been queued (for the latency recorded).
  void Proceed(bool ok, std::chrono::steady_clock::time_point arrival) {
    absl::MutexLock lock(&service_->heartbeat_mu_);
    if (service_->heartbeat_stopping_) {  // the server is shut down: start nothing more
      delete this;
      return;
    }
    switch (state_) {
      case State::kRequested:
        if (!ok) {  // the server is shutting down
          delete this;
          return;
        }
        new AsyncHeartbeatCall(service_, cq_);  // waits for the next stream
        Read();
        return;
      case State::kReading:
        if (!ok) {  // the agent closed its side, or the call is cancelled
          Finish(absl::OkStatus());
          return;
        }
        OnBeat(arrival);
        return;
      case State::kWriting:
        Finish(absl::OkStatus());
        return;
      case State::kFinishing:
        delete this;
        return;
    }
  }

 private:
  enum class State { kRequested, kReading, kWriting, kFinishing };

  void Read() {
    state_ = State::kReading;
    stream_.Read(&request_, this);
  }

  void Finish(const absl::Status& s) {
    state_ = State::kFinishing;
    stream_.Finish(ToGrpc(s), this);
  }

  void OnBeat(std::chrono::steady_clock::time_point arrival) {
    bool drained = false;
    std::optional<Principal> who;
    absl::Status s =
        service_->Authorize(&ctx_, "Heartbeat", Need::kNode, request_.node_id(), &who);
    if (s.ok()) s = service_->RequireLeader(&ctx_, "Heartbeat");
    if (s.ok()) s = service_->Beat(request_.node_id(), &drained);
    if (service_->observer_ != nullptr) {
      service_->observer_->OnStreamedCall(
          "Heartbeat", ToGrpc(s).error_code(),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - arrival).count());
    }
    if (!s.ok()) {
      if (service_->options_.audit != nullptr) {
        service_->options_.audit->Record(who ? &*who : nullptr, "Heartbeat",
                                         request_.node_id(), s);
      }
      Finish(s);
    } else if (drained) {
      response_.set_drained(true);
      state_ = State::kWriting;
      stream_.Write(response_, this);
    } else {
      Read();
    }
  }

  PlannerService* const service_;
  grpc::ServerCompletionQueue* const cq_;
  grpc::ServerContext ctx_;
  grpc::ServerAsyncReaderWriter<proto::HeartbeatResponse, proto::HeartbeatRequest> stream_;
  State state_ = State::kRequested;
  proto::HeartbeatRequest request_;
  proto::HeartbeatResponse response_;
};

void PlannerService::StopHeartbeatStreams(const std::vector<grpc::ServerCompletionQueue*>& cqs) {
  absl::MutexLock lock(&heartbeat_mu_);
  heartbeat_stopping_ = true;
  for (grpc::ServerCompletionQueue* cq : cqs) cq->Shutdown();
}

void PlannerService::ServeHeartbeatStreams(const std::vector<grpc::ServerCompletionQueue*>& cqs,
                                           absl::Duration batch) {
  {
    absl::MutexLock lock(&heartbeat_mu_);
    if (!heartbeat_stopping_) {
      for (grpc::ServerCompletionQueue* cq : cqs) new AsyncHeartbeatCall(this, cq);
    }
  }  // and drains the queues in any case
  void* tag = nullptr;
  bool ok = false;
  auto drain_until_shut_down = [&] {
    for (grpc::ServerCompletionQueue* cq : cqs) {
      while (cq->Next(&tag, &ok)) {
        static_cast<AsyncHeartbeatCall*>(tag)->Proceed(ok, std::chrono::steady_clock::now());
      }
    }
  };
  if (batch <= absl::ZeroDuration()) {  // one queue, each completion as it arrives
    drain_until_shut_down();
    return;
  }
  // Quiet wake-ups (nothing completed) double the wait, up to kQuietWaits x `batch` and at most
  // kLongestWait, so an idle planner wakes a few times a second; the first heartbeat handled
  // brings it back to `batch`. A queue gives at most kPerRound completions a round (a stream
  // whose agent sends without pause completes its next read at once), and a round that left
  // some starts the next one without waiting.
  constexpr int kQuietWaits = 32;
  constexpr int kPerRound = 256;
  const absl::Duration longest = std::max(batch, absl::Milliseconds(100));
  absl::Duration wait = batch;
  // Per queue: its completions handled in a round were queued after this (the last time it was
  // found empty): the latency recorded is counted from there.
  std::vector<std::chrono::steady_clock::time_point> since(cqs.size(),
                                                           std::chrono::steady_clock::now());
  for (;;) {
    bool handled = false, more = false;
    for (size_t q = 0; q < cqs.size(); ++q) {
      int n = 0;
      for (; n < kPerRound; ++n) {
        const grpc::CompletionQueue::NextStatus next =
            cqs[q]->AsyncNext(&tag, &ok, gpr_time_0(GPR_CLOCK_MONOTONIC));
        if (next != grpc::CompletionQueue::GOT_EVENT) {  // none now, or shut down
          since[q] = std::chrono::steady_clock::now();
          break;
        }
        static_cast<AsyncHeartbeatCall*>(tag)->Proceed(ok, since[q]);
        handled = true;
      }
      more = more || n == kPerRound;
    }
    wait = handled ? batch : std::min({2 * wait, kQuietWaits * batch, longest});
    absl::MutexLock lock(&heartbeat_mu_);
    if (heartbeat_mu_.AwaitWithTimeout(absl::Condition(&heartbeat_stopping_),
                                       more ? absl::ZeroDuration() : wait)) {
      break;
    }
  }
  drain_until_shut_down();  // StopHeartbeatStreams shut the queues down
}

grpc::ServerUnaryReactor* PlannerService::ReportJobEvent(
    grpc::CallbackServerContext* ctx, const proto::ReportJobEventRequest* request,
    proto::ReportJobEventResponse* response) {
  return Mutating(ctx, "ReportJobEvent", Need::kNode, request->event().node_id(),
                  [&](std::string* target) {
                    *target = request->job_id();
                    if (request->event().kind().empty()) {
                      return absl::InvalidArgumentError("event.kind is empty");
                    }
                    return jobs_->AddEvent(request->job_id(),
                                           JobEventFromProto(request->event()));
                  });
}

grpc::ServerUnaryReactor* PlannerService::ListAgents(grpc::CallbackServerContext* ctx,
                                                     const proto::ListAgentsRequest* request,
                                                     proto::ListAgentsResponse* response) {
  return Read(ctx, "ListAgents", [&]() -> absl::Status {
    // The leader knows liveness from heartbeats; a follower answers from the store, which holds
    // the leader's liveness transitions (AgentRecord::lost_unix_ms).
    std::vector<AgentInfo> agents;
    if (Leading()) {
      agents = agents_->List();
    } else {
      ASSIGN_OR_RETURN(std::vector<AgentRecord> stored, store_->LoadAgents());
      for (const AgentRecord& r : stored) {
        AgentInfo a;
        a.node_id = r.node_id;
        a.num_devices = r.num_devices;
        a.address = r.address;
        a.alive = r.lost_unix_ms == 0;
        a.registered_unix_ms = r.registered_unix_ms;
        agents.push_back(std::move(a));
      }
    }
    absl::StatusOr<AgentPage> page =
        PageOfAgents(agents, request->page_size(), request->page_token());
    if (!page.ok()) return page.status();
    for (const AgentInfo& a : page->agents) {
      proto::AgentStatus* s = response->add_agents();
      s->set_node_id(a.node_id);
      s->set_num_devices(a.num_devices);
      s->set_address(a.address);
      s->set_alive(a.alive);
    }
    response->set_next_page_token(page->next_page_token);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* PlannerService::ReportStageTimes(
    grpc::CallbackServerContext* ctx, const proto::ReportStageTimesRequest* request,
    proto::ReportStageTimesResponse* response) {
  return Mutating(ctx, "ReportStageTimes", Need::kNode, request->node_id(),
                  [&](std::string* target) {
                    *target = request->job_id();
                    absl::StatusOr<proto::ReportStageTimesResponse> r =
                        jobs_->ReportStageTimes(*request);
                    if (r.ok()) *response = std::move(*r);
                    return r.status();
                  });
}

absl::Status PlannerService::CheckRegistration(const proto::RegisterAgentRequest& r) const {
  if (r.node_id().empty()) return absl::InvalidArgumentError("node_id is empty");
  const int64_t max_name = options_.limits.max_name_bytes;
  if (static_cast<int64_t>(r.node_id().size()) > max_name) {
    return absl::InvalidArgumentError(absl::StrCat("node_id: ", r.node_id().size(),
                                                   " bytes exceed the limit of ", max_name));
  }
  if (r.address().size() > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("address: ", r.address().size(), " bytes exceed the limit of 1024"));
  }
  if (r.num_devices() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_devices must be >= 0, got ", r.num_devices()));
  }
  RETURN_IF_ERROR(CheckLimit("num_devices", r.num_devices(), options_.limits.max_devices,
                             "max_devices"));
  absl::optional<AgentInfo> known = agents_->Get(r.node_id());
  if (known && known->alive && known->num_devices != r.num_devices()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "node_id: node '", r.node_id(), "' is registered and alive with ", known->num_devices,
        " devices (agent at ", known->address, "); a registration with ", r.num_devices(),
        " devices conflicts. Drain the node or let its heartbeats time out first"));
  }
  if (options_.pin_agent_addresses && known && known->alive && known->address != r.address()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "address: node '", r.node_id(), "' is alive with its agent at ", known->address,
        "; its address changes only once that agent is gone (heartbeats stopped for the "
        "heartbeat timeout, or the node drained or reported failed), not to '",
        r.address().substr(0, 128), "'"));
  }
  return absl::OkStatus();
}

void PlannerService::PersistLoss(const std::string& node_id) {
  absl::optional<AgentInfo> info = agents_->Get(node_id);
  if (!info) return;  // a node only a job's cluster names: no registration to update
  if (absl::Status s = store_->PutAgent(LostAgentRecord(*info, UnixMillis())); !s.ok()) {
    logging::Event(*logging::Logger("store"), spdlog::level::warn,
                   "could not store that a node was lost (followers list it alive)",
                   {{"node", node_id}, {"error", std::string(s.message())}});
  }
}

absl::Status PlannerService::LoseNode(const proto::NodeRequest& request, ReplanReason reason,
                                      proto::NodeResponse* response) {
  if (request.node_id().empty()) return absl::InvalidArgumentError("node_id is empty");
  if (!agents_->Get(request.node_id()) && !jobs_->KnowsNode(request.node_id())) {
    return absl::NotFoundError(absl::StrCat(
        "node_id: no node '", request.node_id().substr(0, 256),
        "' (no agent registered it and no job's cluster has it)"));
  }
  if (reason == ReplanReason::kDrain) {
    agents_->MarkDrained(request.node_id());
  } else {
    agents_->MarkFailed(request.node_id());
  }
  PersistLoss(request.node_id());
  if (observer_) observer_->OnAgentsAlive(agents_->AliveCount());
  const std::vector<std::string> replanned = jobs_->NodeLost(request.node_id(), reason);
  logging::Event(*logging::Logger("agents"), spdlog::level::warn,
                 reason == ReplanReason::kDrain ? "node drained" : "node failure reported",
                 {{"node", request.node_id()}, {"replanned_jobs", replanned}});
  for (const std::string& id : replanned) response->add_replanned_job_ids(id);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* PlannerService::ReportNodeFailure(grpc::CallbackServerContext* ctx,
                                                            const proto::NodeRequest* request,
                                                            proto::NodeResponse* response) {
  return Mutating(ctx, "ReportNodeFailure", Need::kSchedule, request->node_id(),
                  [&](std::string*) {
                    return LoseNode(*request, ReplanReason::kNodeFailure, response);
                  });
}

grpc::ServerUnaryReactor* PlannerService::DrainNode(grpc::CallbackServerContext* ctx,
                                                    const proto::NodeRequest* request,
                                                    proto::NodeResponse* response) {
  return Mutating(ctx, "DrainNode", Need::kSchedule, request->node_id(), [&](std::string*) {
    return LoseNode(*request, ReplanReason::kDrain, response);
  });
}

}  // namespace octopipe::planner
