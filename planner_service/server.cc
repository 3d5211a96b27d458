#include "planner_service/server.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "planner_service/agent_registry.h"
#include "planner_service/clock.h"
#include "planner_service/job_manager.h"
#include "planner_service/metrics/http_exporter.h"
#include "planner_service/metrics/planner_metrics.h"
#include "planner_service/service.h"
#include "planner_service/store.h"
#include "planner_service/tuning_pool.h"

namespace octopipe::planner {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& flag, const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("--", flag, ": cannot read '", path, "'"));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Feeds the metrics from the job manager and the service.
class MetricsObserver : public JobObserver, public RpcObserver {
 public:
  explicit MetricsObserver(metrics::PlannerMetrics* m) : m_(m) {}

  void OnPlanComputed(const std::string& job_id, const proto::PlanResult& r) override {
    m_->PlansComputed(metrics::PlanKind::kJob).Inc();
    m_->TuningSeconds().Observe(r.tuning_wall_s());
    m_->predicted_iteration_seconds->WithLabels({job_id}).Set(
        r.plan().predicted().iteration_time_s());
    m_->predicted_bubble_ratio->WithLabels({job_id}).Set(r.plan().predicted().bubble_ratio());
  }
  void OnReplan(ReplanReason reason) override { m_->Replans(reason).Inc(); }
  void OnJobRemoved(const std::string& job_id) override {
    m_->predicted_iteration_seconds->Remove({job_id});
    m_->predicted_bubble_ratio->Remove({job_id});
  }
  void OnJobCount(int jobs) override { m_->jobs->Set(jobs); }
  void OnRpc(const std::string& method, grpc::StatusCode code) override {
    m_->Rpcs(method, static_cast<absl::StatusCode>(code)).Inc();
  }
  void OnOneShotPlan(const proto::PlanResult& r) override {
    m_->PlansComputed(metrics::PlanKind::kOneshot).Inc();
    m_->TuningSeconds().Observe(r.tuning_wall_s());
  }
  void OnAgentsAlive(int alive) override { m_->agents_alive->Set(alive); }
  void OnQueueDepth(const std::string& lane, int depth) override {
    m_->tuning_queue_depth->WithLabels({lane}).Set(depth);
  }

 private:
  metrics::PlannerMetrics* m_;
};

}  // namespace

struct PlannerServer::Impl {
  RealClock clock;
  metrics::Registry registry;
  std::unique_ptr<metrics::PlannerMetrics> metrics;
  std::unique_ptr<MetricsObserver> observer;
  std::unique_ptr<metrics::HttpExporter> exporter;
  std::unique_ptr<Store> store;
  std::unique_ptr<TuningPool> pool;
  std::unique_ptr<AgentRegistry> agents;
  std::unique_ptr<JobManager> jobs;
  std::unique_ptr<PlannerService> service;
  std::unique_ptr<grpc::Server> server;
};

PlannerServer::PlannerServer(PlannerServerOptions options) : options_(std::move(options)) {}

PlannerServer::~PlannerServer() { Shutdown(0); }

int PlannerServer::metrics_port() const {
  return impl_ && impl_->exporter ? impl_->exporter->port() : -1;
}

absl::Status PlannerServer::Start() {
  impl_ = std::make_unique<Impl>();
  Impl& m = *impl_;
  auto metrics = metrics::PlannerMetrics::Create(m.registry);
  if (!metrics.ok()) return metrics.status();
  m.metrics = std::move(*metrics);
  m.observer = std::make_unique<MetricsObserver>(m.metrics.get());

  std::error_code ec;
  std::filesystem::create_directories(options_.state_dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(absl::StrCat("--state_dir: cannot create '",
                                                   options_.state_dir, "': ", ec.message()));
  }
  auto store = Store::Open((std::filesystem::path(options_.state_dir) / "planner.db").string());
  if (!store.ok()) return store.status();
  m.store = std::move(*store);
  m.pool = std::make_unique<TuningPool>(options_.workers, options_.max_queued);
  m.agents = std::make_unique<AgentRegistry>(&m.clock, options_.heartbeat_timeout_s);
  JobManagerOptions jm;
  jm.limits = options_.limits;
  jm.replan = options_.replan;
  m.jobs = std::make_unique<JobManager>(m.store.get(), m.pool.get(), &m.clock, jm,
                                        m.observer.get());
  if (absl::Status s = m.jobs->Recover(); !s.ok()) return s;
  // Agents registered before a restart are known but must register again: their next
  // heartbeat is refused (FAILED_PRECONDITION) and the registration that follows re-admits the
  // node to the jobs that excluded it. No job is re-planned for the restart itself.
  auto agents = m.store->LoadAgents();
  if (!agents.ok()) return agents.status();
  for (const AgentRecord& a : *agents) {
    m.agents->Register(a.node_id, a.num_devices, a.address);
    m.agents->MarkFailed(a.node_id);
  }
  m.metrics->agents_alive->Set(m.agents->AliveCount());

  ServiceOptions so;
  so.token = options_.token;
  so.limits = options_.limits;
  so.heartbeat_interval_ms =
      std::max<int64_t>(50, static_cast<int64_t>(options_.heartbeat_timeout_s * 1000 / 4));
  m.service = std::make_unique<PlannerService>(m.jobs.get(), m.agents.get(), m.store.get(),
                                               m.pool.get(), so, m.observer.get());

  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (!options_.tls_cert.empty() || !options_.tls_key.empty()) {
    if (options_.tls_cert.empty() || options_.tls_key.empty()) {
      return absl::InvalidArgumentError("--tls_cert and --tls_key must be given together");
    }
    auto cert = ReadPem("tls_cert", options_.tls_cert);
    if (!cert.ok()) return cert.status();
    auto key = ReadPem("tls_key", options_.tls_key);
    if (!key.ok()) return key.status();
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({*key, *cert});
    if (!options_.tls_client_ca.empty()) {
      auto ca = ReadPem("tls_client_ca", options_.tls_client_ca);
      if (!ca.ok()) return ca.status();
      ssl.pem_root_certs = *ca;
      ssl.client_certificate_request =
          GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    }
    creds = grpc::SslServerCredentials(ssl);
  } else if (!options_.tls_client_ca.empty()) {
    return absl::InvalidArgumentError("--tls_client_ca needs --tls_cert and --tls_key");
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat(options_.host, ":", options_.port), creds, &port_);
  builder.RegisterService(m.service.get());
  builder.SetMaxReceiveMessageSize(options_.max_request_bytes);
  m.server = builder.BuildAndStart();
  if (!m.server || port_ == 0) {
    return absl::UnavailableError(absl::StrCat("--port: cannot listen on ", options_.host, ":",
                                               options_.port));
  }
  m.service->SetHealthService(m.server->GetHealthCheckService());
  if (options_.metrics_port >= 0) {
    metrics::HttpExporterOptions eo;
    eo.host = options_.metrics_host;
    eo.port = options_.metrics_port;
    m.exporter = std::make_unique<metrics::HttpExporter>(m.registry, eo);
    if (absl::Status s = m.exporter->Start(); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("--metrics_port: ", s.message()));
    }
  }
  detector_ = std::thread([this] { DetectFailures(); });
  return absl::OkStatus();
}

void PlannerServer::DetectFailures() {
  const absl::Duration period =
      absl::Seconds(std::max(0.02, options_.heartbeat_timeout_s / 8));
  absl::MutexLock lock(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&stopping_), period)) {
    mu_.Unlock();
    for (const std::string& node : impl_->agents->DetectFailures()) {
      impl_->jobs->NodeLost(node, ReplanReason::kNodeFailure);
    }
    impl_->metrics->agents_alive->Set(impl_->agents->AliveCount());
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
  if (impl_->pool) impl_->pool->Cancel();  // running tuning ends now, not after its budget
  if (impl_->server) {
    impl_->server->Shutdown(std::chrono::system_clock::now() +
                            std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000)));
  }
  if (impl_->pool) impl_->pool->Shutdown();
  if (impl_->exporter) impl_->exporter->Stop();
  if (impl_->server) impl_->server->Wait();
}

}  // namespace octopipe::planner
