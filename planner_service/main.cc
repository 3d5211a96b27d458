// octopipe-planner: the long-running gRPC planner service. Flags are parsed here only and
// copied into PlannerServerOptions; SIGTERM/SIGINT shut it down gracefully.
#include <csignal>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/flags.h"
#include "planner_service/server.h"

int main(int argc, char** argv) {
  using octopipe::planner::PlannerServer;
  using octopipe::planner::PlannerServerOptions;
  PlannerServerOptions o;
  int64_t port = o.port, metrics_port = o.metrics_port, max_request = o.max_request_bytes;
  int64_t max_layers = o.limits.max_layers, max_devices = o.limits.max_devices;
  int64_t workers = o.workers, max_queued = o.max_queued;
  std::string port_file, token_file;
  octopipe::cli::FlagSet flags(
      "planner",
      "The OctoPipe planner service: cluster schedulers create jobs and ask for plans over\n"
      "gRPC; worker agents register, heartbeat, watch their job's plan and report measured\n"
      "stage times, which re-plan the job when the gain is worth it. State lives in SQLite\n"
      "under --state_dir; metrics are served for Prometheus on --metrics_port.");
  flags.String("host", &o.host, "address to serve gRPC on (0.0.0.0 for every interface)");
  flags.Int("port", &port, "gRPC port; 0 picks a free one (see --port_file)");
  flags.String("port_file", &port_file, "write the gRPC port here once serving (for scripts)");
  flags.String("state_dir", &o.state_dir, "directory of the SQLite state (created if missing)");
  flags.Int("metrics_port", &metrics_port, "Prometheus /metrics port; 0 picks one; -1 off");
  flags.String("metrics_host", &o.metrics_host, "address for /metrics");
  flags.String("tls_cert", &o.tls_cert, "server certificate (PEM); enables TLS with --tls_key");
  flags.String("tls_key", &o.tls_key, "server private key (PEM)");
  flags.String("tls_client_ca", &o.tls_client_ca,
               "CA (PEM) that must sign client certificates: mutual TLS");
  flags.String("token", &o.token,
               "bearer token agents and mutating calls must present (prefer --token_file)");
  flags.String("token_file", &token_file, "read the bearer token from this file");
  flags.Int("max_request_bytes", &max_request, "largest request accepted");
  flags.Int("max_layers", &max_layers, "largest model (layers) accepted");
  flags.Int("max_devices", &max_devices, "largest cluster (devices) accepted");
  flags.Double("max_time_budget_s", &o.limits.max_time_budget_s,
               "largest tuning budget a request may ask for");
  flags.Double("default_time_budget_s", &o.limits.default_time_budget_s,
               "tuning budget when a request does not set one");
  flags.Int("workers", &workers, "tuning threads");
  flags.Int("max_queued", &max_queued,
            "tuning tasks allowed to wait; beyond it Plan/CreateJob answer RESOURCE_EXHAUSTED");
  flags.Double("heartbeat_timeout_s", &o.heartbeat_timeout_s,
               "a node that misses heartbeats this long is lost and its jobs re-planned");
  flags.Double("replan_start_deviation", &o.replan.start_deviation,
               "measured/predicted deviation of a stage that starts a re-plan");
  flags.Double("replan_stop_deviation", &o.replan.stop_deviation,
               "deviation at or below which a job is back to normal (hysteresis)");
  flags.Double("replan_min_gain", &o.replan.min_gain,
               "a new plan must be predicted at least this fraction faster");
  flags.Double("replan_cooldown_s", &o.replan.cooldown_s,
               "seconds between measured-time re-plans of one job");
  std::vector<std::string> args(argv + 1, argv + argc);
  if (absl::Status s = flags.Parse(args); !s.ok()) {
    std::cerr << "octopipe-planner: error: " << s.message() << "\n";
    return 2;
  }
  if (flags.help_requested()) {
    std::cout << flags.Usage();
    return 0;
  }
  o.port = static_cast<int>(port);
  o.metrics_port = static_cast<int>(metrics_port);
  o.max_request_bytes = static_cast<int>(max_request);
  o.limits.max_layers = static_cast<int>(max_layers);
  o.limits.max_devices = static_cast<int>(max_devices);
  o.workers = static_cast<int>(workers);
  o.max_queued = static_cast<int>(max_queued);
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    if (!in || !std::getline(in, o.token) || o.token.empty()) {
      std::cerr << "octopipe-planner: error: --token_file: cannot read a token from '"
                << token_file << "'\n";
      return 2;
    }
  }
  // Block the shutdown signals in every thread; the main thread waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  PlannerServer server(o);
  if (absl::Status s = server.Start(); !s.ok()) {
    std::cerr << "octopipe-planner: error: " << s.message() << "\n";
    return 1;
  }
  std::cerr << "octopipe-planner: serving on " << o.host << ":" << server.port()
            << (o.tls_cert.empty() ? "" : " (TLS)")
            << (server.metrics_port() >= 0
                    ? absl::StrCat(", metrics on ", o.metrics_host, ":", server.metrics_port())
                    : std::string())
            << ", state in " << o.state_dir << std::endl;
  if (!port_file.empty()) {
    // Written atomically so a reader never sees a partial number.
    const std::string tmp = port_file + ".tmp";
    std::ofstream(tmp) << server.port() << "\n" << server.metrics_port() << "\n";
    std::rename(tmp.c_str(), port_file.c_str());
  }
  int sig = 0;
  sigwait(&signals, &sig);
  std::cerr << "octopipe-planner: signal " << sig << ", shutting down" << std::endl;
  server.Shutdown(5);
  std::cerr << "octopipe-planner: stopped" << std::endl;
  return 0;
}
