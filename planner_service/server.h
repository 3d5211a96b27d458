// PlannerServer: wires the planner together — SQLite store, job manager, agent registry and
// failure detector, tuning pool, gRPC service (with health and reflection, optional TLS/mTLS),
// the planner's metrics (PlannerMetrics on a prometheus-cpp Registry, both built by `main` and
// passed in) and the /metrics endpoint that serves that registry. `main` parses flags into PlannerServerOptions and
// runs one; tests run one in-process or as a process. Logs on the "rpc" (one line per call),
// "agents" (heartbeat loss) and "jobs" (plans computed) loggers of logging/logging.h.
#ifndef OCTOPIPE_PLANNER_SERVICE_SERVER_H_
#define OCTOPIPE_PLANNER_SERVICE_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <prometheus/registry.h>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "etcd/election.pb.h"
#include "planner_service/metrics/planner_metrics.h"
#include "planner_service/planning.h"
#include "planner_service/replan_policy.h"

namespace octopipe::planner {

struct PlannerServerOptions {
  std::string host = "127.0.0.1";  // gRPC address; "0.0.0.0" to serve other hosts
  int port = 50051;                // 0: pick a free port (see PlannerServer::port())
  std::string state_dir = "octopipe-state";  // holds planner.db (jobs, plans, calibration)
  // Where the state lives (open_store.h): "sqlite:DIR" or "etcd:HOST:PORT[,...]"; empty:
  // sqlite:state_dir.
  std::string store;
  std::string etcd_prefix = "/octopipe";  // keys of an etcd store (etcd_store.h)
  // Replicas on an etcd store (leadership.h): the lease of the leadership, and the address
  // other replicas and clients reach this one at (empty: HOST:PORT as bound).
  double leader_ttl_s = 3;
  std::string advertise_address;
  // Called once when this replica loses the leadership (or fails to take office); main
  // restarts the process so that it rejoins as a follower with a clean memory. Null: it stays
  // a follower.
  std::function<void(const std::string& why)> on_deposed;
  int metrics_port = 9464;         // Prometheus /metrics; 0: pick; -1: off
  std::string metrics_host = "127.0.0.1";
  // /metrics HTTP workers and the time a connection may take to send its request: slow or
  // half-open clients hold a worker each, until the timeout, without blocking a scrape.
  int metrics_threads = 8;
  int metrics_request_timeout_ms = 5000;
  // TLS: server certificate and key (PEM files); with a client CA, clients must present a
  // certificate it signed (mutual TLS). Empty: plaintext.
  std::string tls_cert, tls_key, tls_client_ca;
  // Who may call what (planner_service/access.h): one shared bearer token whose holder is an
  // admin, or an identities file (principals with their own tokens or certificate names and
  // roles; re-read by ReloadIdentities). At most one of them; neither: every caller is an
  // anonymous admin.
  std::string token;
  std::string identities_file;
  // Mutating calls are appended here as JSON lines (planner_service/audit_log.h); "": none.
  std::string audit_log;
  int max_request_bytes = 64 << 20;
  PlanningLimits limits;
  int workers = 2;        // tuning threads
  int max_queued = 64;    // waiting tuning tasks before RESOURCE_EXHAUSTED
  int plan_cache_entries = 256;  // answers to identical Plan requests kept; 0: no cache
  double heartbeat_timeout_s = 10;  // missed heartbeats for this long: the node is lost
  // Streamed heartbeats are handled in batches, this often while they keep arriving (0: each as
  // it arrives); see PlannerService::ServeHeartbeatStreams.
  double heartbeat_batch_ms = 2;
  ReplanPolicyOptions replan;
};

// The health-check service name that is SERVING on the leader only (NOT_SERVING on a follower
// replica); the overall status ("") is SERVING on every replica that can take calls.
inline constexpr char kLeaderHealthService[] = "octopipe.leader";

class PlannerServer {
 public:
  // `metrics` must have been declared on `registry`, which /metrics serves. Without them (both
  // null, e.g. in benchmarks) the server makes its own at Start.
  explicit PlannerServer(PlannerServerOptions options,
                         std::shared_ptr<prometheus::Registry> registry = nullptr,
                         std::unique_ptr<metrics::PlannerMetrics> metrics = nullptr);
  ~PlannerServer();

  // Opens the state, recovers jobs, starts serving. Errors name the flag/field at fault.
  absl::Status Start();
  // Stops accepting calls, finishes in-flight ones (up to `grace_s`), drains tuning, closes
  // the state. Idempotent.
  void Shutdown(double grace_s = 5);

  int port() const { return port_; }
  // Re-reads options.identities_file (on SIGHUP); on error the principals stay as they were
  // and the error is returned (and logged). OK without an identities file.
  absl::Status ReloadIdentities();
  // Whether this planner leads (always, on a SQLite store).
  bool leading() const;
  int metrics_port() const;

 private:
  struct Impl;
  class Office;
  void DetectFailures();
  // Sets kLeaderHealthService to leading().
  void PublishRole();
  // Loads jobs and agents from the store (a lone planner at start, a replica on election).
  absl::Status RecoverState();
  // The election's winner fences its writes and loads the state.
  absl::Status TakeOffice(const v3electionpb::LeaderKey& key);
  // Start's steps, in order. Creates the metrics, opens the store and builds the tuning pool,
  // the agent registry and the job manager (a lone planner recovers its state here).
  absl::Status OpenState();
  // Access control (identities or a shared token), the audit log and the gRPC service.
  absl::Status MakeService();
  // Binds the gRPC server (TLS when configured) and publishes the role on its health service.
  absl::Status StartGrpc();
  // Serves /metrics when a metrics port is configured.
  absl::Status StartMetricsEndpoint();
  // Under etcd, campaigns for leadership with this replica's address.
  absl::Status Campaign();

  PlannerServerOptions options_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<metrics::PlannerMetrics> metrics_;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread detector_;
};

}  // namespace octopipe::planner

#endif  // OCTOPIPE_PLANNER_SERVICE_SERVER_H_
