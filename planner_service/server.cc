#include "planner_service/server.h"

#include <filesystem>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/status_macros.h"
#include "planner_service/agent_registry.h"
#include "core/clock.h"
#include "planner_service/job_manager.h"
#include "planner_service/measured_bubble.h"
#include "logging/logging.h"
#include "planner_service/metrics/exposer.h"
#include "planner_service/metrics/planner_metrics.h"
#include "planner_service/rpc_log.h"
#include "planner_service/service.h"
#include "planner_service/etcd_store.h"
#include "planner_service/leadership.h"
#include "planner_service/open_store.h"
#include "planner_service/store.h"
#include "planner_service/tls_files.h"
#include "planner_service/tuning_pool.h"

namespace octopipe::planner {
namespace {

// Completion queues of batched heartbeat streams: each keeps about 1/8 of the open streams' reads.
constexpr int kHeartbeatQueues = 8;

// Feeds the metrics from the job manager and the service.
class MetricsObserver : public JobObserver, public RpcObserver {
 public:
  explicit MetricsObserver(metrics::PlannerMetrics* m) : m_(m) {}

  void OnPlanComputed(const std::string& job_id, const proto::PlanResult& r) override {
    m_->PlansComputed(metrics::PlanKind::kJob).Increment();
    m_->TuningSeconds().Observe(r.tuning_wall_s());
    m_->SetJobPrediction(job_id, r.plan().predicted().iteration_time_s(),
                         r.plan().predicted().bubble_ratio());
    logging::Event(*logging::Logger("jobs"), spdlog::level::info, "plan computed",
                   {{"job", job_id},
                    {"feasible", r.feasible()},
                    {"predicted_iteration_s", r.plan().predicted().iteration_time_s()},
                    {"tuning_s", r.tuning_wall_s()}});
  }
  void OnReplan(ReplanReason reason) override { m_->Replans(reason).Increment(); }
  void OnJobRemoved(const std::string& job_id) override {
    bubble_.Remove(job_id);
    m_->RemoveJob(job_id);
  }
  void OnDeviceBusy(const std::string& job_id, int64_t version, int num_devices,
                    const std::vector<DeviceBusy>& devices) override {
    if (std::optional<PipelineMeasure> measure =
            bubble_.Record(job_id, version, num_devices, devices)) {
      m_->SetJobMeasurement(job_id, measure->iteration_s, measure->bubble_ratio);
    }
  }
  void OnJobCount(int jobs) override { m_->Jobs().Set(jobs); }
  void OnJobPhases(const std::map<std::string, int>& jobs_by_phase) override {
    for (const auto& [phase, jobs] : jobs_by_phase) m_->SetJobsInPhase(phase, jobs);
  }
  void OnRpc(const std::string& method, grpc::StatusCode code) override {
    m_->Rpcs(method, static_cast<absl::StatusCode>(code)).Increment();
  }
  void OnStreamedCall(const std::string& method, grpc::StatusCode code, double seconds) override {
    OnRpc(method, code);
    m_->RpcLatency(method).Observe(seconds);
  }
  void OnOneShotPlan(const proto::PlanResult& r) override {
    m_->PlansComputed(metrics::PlanKind::kOneshot).Increment();
    m_->TuningSeconds().Observe(r.tuning_wall_s());
  }
  void OnAgentsAlive(int alive) override { m_->AgentsAlive().Set(alive); }
  void OnQueueDepth(const std::string& lane, int depth) override {
    m_->TuningQueueDepth(lane).Set(depth);
  }
  void OnPlanCache(bool hit) override { m_->PlanCacheLookups(hit).Increment(); }

 private:
  metrics::PlannerMetrics* m_;
  PipelineBubble bubble_;  // the measured series from the agents' per-device reports
};

// The service's view of this replica's role before the leadership exists (the gRPC server must
// be serving, on its final port, before the replica can campaign with its address): a
// follower with no known leader until then.
class RoleSlot : public Role {
 public:
  void Set(const Role* role) {
    absl::MutexLock lock(&mu_);
    role_ = role;
  }
  bool leading() const override {
    absl::MutexLock lock(&mu_);
    return role_ != nullptr && role_->leading();
  }
  std::string leader_address() const override {
    absl::MutexLock lock(&mu_);
    return role_ != nullptr ? role_->leader_address() : std::string();
  }

 private:
  mutable absl::Mutex mu_;
  const Role* role_ ABSL_GUARDED_BY(mu_) = nullptr;
};

// The gRPC server's credentials: TLS when a certificate and key are given (with client
// certificates checked against `client_ca` when set), else insecure.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const std::string& cert, const std::string& key, const std::string& client_ca) {
  if (!cert.empty() || !key.empty()) {
    if (cert.empty() || key.empty()) {
      return absl::InvalidArgumentError("--tls_cert and --tls_key must be given together");
    }
    absl::StatusOr<grpc::SslServerCredentialsOptions> ssl = LoadServerTls({cert, key, client_ca});
    if (!ssl.ok()) return ssl.status();
    return grpc::SslServerCredentials(*ssl);
  }
  if (!client_ca.empty()) {
    return absl::InvalidArgumentError("--tls_client_ca needs --tls_cert and --tls_key");
  }
  return grpc::InsecureServerCredentials();
}

}  // namespace

// Takes office for a replica that won the election, and reports losing it.
class PlannerServer::Office : public Leadership::Listener {
 public:
  explicit Office(PlannerServer* server) : server_(server) {}
  absl::Status OnElected(const v3electionpb::LeaderKey& key) override {
    return server_->TakeOffice(key);
  }
  void OnLeading() override { server_->PublishRole(); }
  void OnTick() override { server_->PublishRole(); }
  void OnDeposed(const std::string& why) override {
    server_->PublishRole();
    if (server_->options_.on_deposed) server_->options_.on_deposed(why);
  }

 private:
  PlannerServer* const server_;
};

struct PlannerServer::Impl {
  RealClock clock;
  metrics::PlannerMetrics* metrics = nullptr;  // owned by PlannerServer::metrics_
  std::unique_ptr<MetricsObserver> observer;
  std::unique_ptr<metrics::MetricsEndpoint> exporter;
  std::unique_ptr<Store> store;
  EtcdStore* etcd = nullptr;  // store, when it is etcd: replicas elect a leader
  RoleSlot role;
  std::unique_ptr<Office> office;
  std::unique_ptr<Leadership> leadership;
  std::unique_ptr<TuningPool> pool;
  std::unique_ptr<AgentRegistry> agents;
  std::unique_ptr<JobManager> jobs;
  std::unique_ptr<AccessControl> access;
  std::unique_ptr<AuditLog> audit;
  std::unique_ptr<PlannerService> service;
  std::unique_ptr<grpc::Server> server;
  // HeartbeatStream's completion queues and their thread (PlannerService::ServeHeartbeatStreams).
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> heartbeat_queues;
  std::thread heartbeat_thread;
  std::vector<grpc::ServerCompletionQueue*> HeartbeatQueues() const {
    std::vector<grpc::ServerCompletionQueue*> out;
    for (const auto& q : heartbeat_queues) out.push_back(q.get());
    return out;
  }
};

PlannerServer::PlannerServer(PlannerServerOptions options,
                             std::shared_ptr<prometheus::Registry> registry,
                             std::unique_ptr<metrics::PlannerMetrics> metrics)
    : options_(std::move(options)),
      registry_(registry ? std::move(registry) : std::make_shared<prometheus::Registry>()),
      metrics_(std::move(metrics)) {}

PlannerServer::~PlannerServer() { Shutdown(0); }

int PlannerServer::metrics_port() const {
  return impl_ && impl_->exporter ? impl_->exporter->port() : -1;
}

absl::Status PlannerServer::Start() {
  impl_ = std::make_unique<Impl>();
  RETURN_IF_ERROR(OpenState());
  RETURN_IF_ERROR(MakeService());
  RETURN_IF_ERROR(StartGrpc());
  RETURN_IF_ERROR(StartMetricsEndpoint());
  detector_ = std::thread([this] { DetectFailures(); });
  return Campaign();
}

absl::Status PlannerServer::OpenState() {
  Impl& m = *impl_;
  if (metrics_ == nullptr) {
    auto metrics = metrics::PlannerMetrics::Create(*registry_);
    if (!metrics.ok()) return metrics.status();
    metrics_ = std::move(*metrics);
  }
  m.metrics = metrics_.get();
  m.observer = std::make_unique<MetricsObserver>(m.metrics);

  absl::StatusOr<StoreSpec> spec =
      ParseStoreSpec(options_.store.empty() ? "sqlite:" + options_.state_dir : options_.store);
  if (!spec.ok()) return spec.status();
  EtcdStoreOptions etcd;
  etcd.prefix = options_.etcd_prefix;
  auto store = OpenStore(*spec, etcd);
  if (!store.ok()) return store.status();
  m.store = std::move(*store);
  m.pool = std::make_unique<TuningPool>(options_.workers, options_.max_queued);
  m.agents = std::make_unique<AgentRegistry>(&m.clock, options_.heartbeat_timeout_s);
  JobManagerOptions jm;
  jm.limits = options_.limits;
  jm.replan = options_.replan;
  m.jobs = std::make_unique<JobManager>(m.store.get(), m.pool.get(), &m.clock, jm,
                                        m.observer.get());
  m.etcd = dynamic_cast<EtcdStore*>(m.store.get());
  if (m.etcd == nullptr) {
    // A lone planner leads from the start.
    if (absl::Status s = RecoverState(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status PlannerServer::MakeService() {
  Impl& m = *impl_;
  if (!options_.token.empty() && !options_.identities_file.empty()) {
    return absl::InvalidArgumentError(
        "--identities and --token/--token_file are mutually exclusive (give the shared token's "
        "holder a principal with role admin in the identities file)");
  }
  if (!options_.identities_file.empty()) {
    absl::StatusOr<std::unique_ptr<AccessControl>> access =
        AccessControl::FromFile(options_.identities_file);
    if (!access.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--identities: ", access.status().message()));
    }
    m.access = std::move(*access);
  } else if (!options_.token.empty()) {
    m.access = AccessControl::SharedToken(options_.token);
  }
  if (!options_.audit_log.empty()) {
    absl::StatusOr<std::unique_ptr<AuditLog>> audit = AuditLog::Open(options_.audit_log);
    if (!audit.ok()) return audit.status();
    m.audit = std::move(*audit);
  }
  ServiceOptions so;
  so.access = m.access.get();
  so.pin_agent_addresses = !options_.identities_file.empty();
  so.audit = m.audit.get();
  so.limits = options_.limits;
  so.plan_cache_entries = options_.plan_cache_entries;
  so.clock = &m.clock;
  if (m.etcd != nullptr) so.role = &m.role;
  so.heartbeat_interval_ms =
      std::max<int64_t>(50, static_cast<int64_t>(options_.heartbeat_timeout_s * 1000 / 4));
  m.service = std::make_unique<PlannerService>(m.jobs.get(), m.agents.get(), m.store.get(),
                                               m.pool.get(), so, m.observer.get());
  return absl::OkStatus();
}

absl::Status PlannerServer::StartGrpc() {
  Impl& m = *impl_;
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> creds,
                   ServerCredentials(options_.tls_cert, options_.tls_key, options_.tls_client_ca));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat(options_.host, ":", options_.port), creds, &port_);
  builder.RegisterService(m.service.get());
  builder.SetMaxReceiveMessageSize(options_.max_request_bytes);
  // Clients ping while their calls are open to notice a planner host that is gone
  // (planner_client.h, keepalive_s; gRPC's default would answer pings more often than every
  // 5 minutes with GOAWAY "too_many_pings").
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 500);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  metrics::PlannerMetrics* metrics = m.metrics;
  interceptors.push_back(std::make_unique<RpcLogInterceptorFactory>(
      [metrics](const std::string& method, double seconds) {
        if (metrics != nullptr) metrics->RpcLatency(method).Observe(seconds);
      }));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  // Heartbeat streams are served from completion queues by one thread of ours, in batches
  // (PlannerService::ServeHeartbeatStreams; bench/control_plane in docs/benchmarks.md).
  const absl::Duration batch = absl::Milliseconds(options_.heartbeat_batch_ms);
  const int queues = batch > absl::ZeroDuration() ? kHeartbeatQueues : 1;
  for (int i = 0; i < queues; ++i) m.heartbeat_queues.push_back(builder.AddCompletionQueue());
  m.server = builder.BuildAndStart();
  if (!m.server || port_ == 0) {
    return absl::UnavailableError(absl::StrCat("--port: cannot listen on ", options_.host, ":",
                                               options_.port));
  }
  m.heartbeat_thread = std::thread(
      [&m, batch] { m.service->ServeHeartbeatStreams(m.HeartbeatQueues(), batch); });
  m.service->SetHealthService(m.server->GetHealthCheckService());
  PublishRole();
  return absl::OkStatus();
}

absl::Status PlannerServer::StartMetricsEndpoint() {
  if (options_.metrics_port < 0) return absl::OkStatus();
  metrics::MetricsEndpointOptions eo;
  eo.host = options_.metrics_host;
  eo.port = options_.metrics_port;
  eo.num_threads = options_.metrics_threads;
  eo.request_timeout_ms = options_.metrics_request_timeout_ms;
  auto exporter = metrics::MetricsEndpoint::Start(registry_, eo);
  if (!exporter.ok()) {
    return absl::Status(exporter.status().code(),
                        absl::StrCat("--metrics_port: ", exporter.status().message()));
  }
  impl_->exporter = std::move(*exporter);
  return absl::OkStatus();
}

absl::Status PlannerServer::Campaign() {
  Impl& m = *impl_;
  if (m.etcd == nullptr) return absl::OkStatus();
  LeadershipOptions lo;
  lo.election = options_.etcd_prefix + "/leader";
  lo.address = options_.advertise_address.empty() ? absl::StrCat(options_.host, ":", port_)
                                                  : options_.advertise_address;
  lo.ttl = absl::Seconds(options_.leader_ttl_s);
  m.office = std::make_unique<Office>(this);
  m.leadership = std::make_unique<Leadership>(m.etcd->client(), lo, m.office.get());
  if (absl::Status s = m.leadership->Start(); !s.ok()) return s;
  m.role.Set(m.leadership.get());
  logging::Event(
      *logging::Logger("leader"), spdlog::level::info, "campaigning",
      {{"election", lo.election}, {"address", lo.address}, {"ttl_s", options_.leader_ttl_s}});
  return absl::OkStatus();
}

absl::Status PlannerServer::RecoverState() {
  Impl& m = *impl_;
  if (absl::Status s = m.jobs->Recover(); !s.ok()) return s;
  logging::Event(*logging::Logger("store"), spdlog::level::info, "state opened",
                 {{"store", m.store->Describe()}, {"jobs", m.jobs->num_jobs()}});
  // Agents registered before a restart (or with the previous leader) come back alive with a
  // full heartbeat timeout from now: their next heartbeat is accepted, and a node that died
  // meanwhile is declared failed one timeout from now, like any silent node. No job is
  // re-planned for the restart itself.
  auto agents = m.store->LoadAgents();
  if (!agents.ok()) return agents.status();
  for (const AgentRecord& a : *agents) {
    m.agents->Register(a.node_id, a.num_devices, a.address, a.registered_unix_ms);
  }
  m.metrics->AgentsAlive().Set(m.agents->AliveCount());
  return absl::OkStatus();
}

absl::Status PlannerServer::TakeOffice(const v3electionpb::LeaderKey& key) {
  Impl& m = *impl_;
  m.etcd->SetFence(EtcdFence{key.key(), key.rev()});
  if (absl::Status s = RecoverState(); !s.ok()) return s;
  logging::Event(*logging::Logger("leader"), spdlog::level::info, "took office",
                 {{"jobs", m.jobs->num_jobs()},
                  {"agents", m.agents->AliveCount()},
                  {"failure_detector_grace_s", options_.heartbeat_timeout_s}});
  return absl::OkStatus();
}

void PlannerServer::PublishRole() {
  if (impl_ == nullptr || impl_->server == nullptr) return;
  if (grpc::HealthCheckServiceInterface* health = impl_->server->GetHealthCheckService()) {
    health->SetServingStatus(kLeaderHealthService, leading());
  }
}

absl::Status PlannerServer::ReloadIdentities() {
  if (impl_ == nullptr || impl_->access == nullptr) return absl::OkStatus();
  absl::Status s = impl_->access->Reload();
  if (s.ok()) {
    logging::Event(*logging::Logger("planner"), spdlog::level::info, "identities reloaded",
                   {{"access", impl_->access->Describe()}});
  } else {
    logging::Event(*logging::Logger("planner"), spdlog::level::err,
                   "identities not reloaded; the previous principals stay",
                   {{"error", std::string(s.message())}});
  }
  return s;
}

bool PlannerServer::leading() const {
  return impl_ != nullptr && (impl_->etcd == nullptr || impl_->role.leading());
}

void PlannerServer::DetectFailures() {
  const absl::Duration period =
      absl::Seconds(std::max(0.02, options_.heartbeat_timeout_s / 8));
  absl::MutexLock lock(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&stopping_), period)) {
    mu_.Unlock();
    PublishRole();
    if (!leading()) {  // followers keep no agents; the leader detects failures
      mu_.Lock();
      continue;
    }
    for (const std::string& node : impl_->agents->DetectFailures()) {
      // Followers answer ListAgents from the store: the loss goes there too.
      if (absl::optional<AgentInfo> info = impl_->agents->Get(node)) {
        if (absl::Status s = impl_->store->PutAgent(LostAgentRecord(*info, UnixMillis()));
            !s.ok()) {
          logging::Event(*logging::Logger("store"), spdlog::level::warn,
                         "could not store that a node was lost (followers list it alive)",
                         {{"node", node}, {"error", std::string(s.message())}});
        }
      }
      const std::vector<std::string> jobs = impl_->jobs->NodeLost(node, ReplanReason::kNodeFailure);
      logging::Event(*logging::Logger("agents"), spdlog::level::warn, "heartbeats lost",
                     {{"node", node},
                      {"timeout_s", options_.heartbeat_timeout_s},
                      {"replanned_jobs", jobs}});
    }
    impl_->metrics->AgentsAlive().Set(impl_->agents->AliveCount());
    mu_.Lock();
  }
}

void PlannerServer::Shutdown(double grace_s) {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (detector_.joinable()) detector_.join();
  if (!impl_) return;
  if (impl_->leadership) impl_->leadership->Stop();  // a leader resigns: hand-over at once
  if (impl_->pool) impl_->pool->Cancel();  // running tuning ends now, not after its budget
  if (impl_->server) {
    impl_->server->Shutdown(std::chrono::system_clock::now() +
                            std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000)));
  }
  if (impl_->pool) impl_->pool->Shutdown();
  impl_->exporter.reset();
  if (impl_->server) impl_->server->Wait();
  // After the server: its calls are cancelled and no call is requested any more.
  if (!impl_->heartbeat_queues.empty()) {
    impl_->service->StopHeartbeatStreams(impl_->HeartbeatQueues());
    if (impl_->heartbeat_thread.joinable()) {
      impl_->heartbeat_thread.join();
    } else {  // the server never started: drain the queues here
      void* tag = nullptr;
      bool ok = false;
      for (const auto& q : impl_->heartbeat_queues) {
        while (q->Next(&tag, &ok)) {
        }
      }
    }
  }
}

}  // namespace octopipe::planner
