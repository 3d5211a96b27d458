// octopipe-agent: the per-node worker agent (see worker_agent/agent.h). The same binary runs
// the rank processes it launches (--rank_run_dir; internal).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <csignal>
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "spdlog/spdlog.h"
#include "worker_agent/agent.h"
#include "worker_agent/agent_metrics.h"
#include "worker_agent/grpc_planner_link.h"
#include "worker_agent/rank_main.h"
#include "worker_agent/run_files.h"
#include "executor/transport_factory.h"

ABSL_FLAG(std::string, node, "", "this node's name in the jobs' clusters (required)");
ABSL_FLAG(std::string, planner, "",
          "HOST:PORT of the octopipe-planner (required), or A,B,C: planner replicas on one etcd "
          "store, or dns:///NAME:PORT: every address NAME resolves to; writes go to the leader "
          "(a follower names it), reads to any replica, and calls move on when one is down");
ABSL_FLAG(int, devices, 1, "devices on this node (one rank process each)");
ABSL_FLAG(std::string, transport, "gloo",
          "gloo (CPU, TCP), nccl (GPU; fails clearly without one) or auto (nccl when a GPU is "
          "present, else gloo)");
ABSL_FLAG(std::string, work_dir, "", "local directory for run files (required)");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "checkpoint root (a subdirectory per job), local to the node: layer files are copied to "
          "the job's other nodes through the agents' TCP stores; default WORK_DIR/checkpoints");
ABSL_FLAG(std::string, advertise_host, "127.0.0.1",
          "address other nodes reach this node's ranks and rendezvous store at");
ABSL_FLAG(int, store_port, 0, "TCP rendezvous store port; 0 picks a free one");
ABSL_FLAG(double, transport_timeout_s, 10,
          "seconds a rank waits on a peer before failing (a lost node is noticed within it)");
ABSL_FLAG(double, max_backoff_s, 1,
          "longest wait between retries while the planner is unreachable (exponential back-off "
          "from 0.1 s; running ranks are not disturbed): a planner back after a restart or a "
          "fail-over is used again within about this long");
ABSL_FLAG(int, max_rank_restarts, 3,
          "restarts of a plan version from its last checkpoint after its ranks failed (a node "
          "loss is followed by a new version instead)");
ABSL_FLAG(int, checkpoint_replicas, -1,
          "other nodes of a job each checkpoint layer file written here is copied to (the next "
          "ones in the sorted ring of the plan's nodes); -1: all. Any K nodes may be lost");
ABSL_FLAG(int, report_every, 5, "report measured stage times every N iterations");
ABSL_FLAG(double, report_min_interval_s, 1.0,
          "...and at most once per this many seconds (times measured meanwhile go into the next "
          "report; 0: by iterations only)");
ABSL_FLAG(int, metrics_port, -1, "Prometheus /metrics port; 0 picks one; -1 off");
ABSL_FLAG(std::string, metrics_host, "127.0.0.1", "address for /metrics");
ABSL_FLAG(std::string, port_file, "",
          "write 'STORE_PORT METRICS_PORT' here once serving (for scripts and tests)");
ABSL_FLAG(std::string, token_file, "", "bearer token file for the planner");
ABSL_FLAG(std::string, tls_ca, "", "CA certificate (PEM) of the planner: connect with TLS");
ABSL_FLAG(std::string, tls_cert, "", "client certificate (PEM) for mutual TLS");
ABSL_FLAG(std::string, tls_key, "", "client private key (PEM) for mutual TLS");
// Rank mode (started by the agent itself).
ABSL_FLAG(std::string, rank_run_dir, "", "internal: run one rank of the run in this directory");
ABSL_FLAG(int, rank, -1, "internal: the rank (plan device) to run");
ABSL_FLAG(int, rank_device, 0, "internal: the local device of the rank");

namespace {

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop.store(true); }

int Fail(const std::string& message) {
  std::cerr << "octopipe-agent: error: " << message << "\n";
  return 2;
}

std::string SelfPath() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  buf[n] = '\0';
  return buf;
}

// --help lists the agent's own flags, under a one-paragraph description.
void SetUpUsage() {
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::StrContains(file, "worker_agent/");
  };
  absl::SetFlagsUsageConfig(usage);
  absl::SetProgramUsageMessage(
      "the OctoPipe worker agent: registers this node with the planner, heartbeats, runs one "
      "rank process per device for the plans of the jobs that use the node, reports measured "
      "times, follows re-plans, resumes from checkpoints.\n"
      "  octopipe-agent --node=node-a --planner=HOST:PORT --devices=2 --work_dir=DIR");
}

// The options' ranges and required values (the order their errors are reported in).
absl::Status CheckAgentOptions(const octopipe::agent::AgentOptions& o) {
  if (o.checkpoint_replicas < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--checkpoint_replicas must be >= -1, got ", o.checkpoint_replicas));
  }
  if (o.max_rank_restarts < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_rank_restarts must be >= 0, got ", o.max_rank_restarts));
  }
  if (!(o.max_backoff_s > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_backoff_s must be > 0, got ", o.max_backoff_s));
  }
  if (o.node.empty()) return absl::InvalidArgumentError("--node is required");
  if (o.work_dir.empty()) return absl::InvalidArgumentError("--work_dir is required");
  if (o.num_devices < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--devices must be >= 1, got ", o.num_devices));
  }
  if (o.transport == octopipe::executor::TransportKind::kInProc) {
    return absl::InvalidArgumentError(
        "--transport must be gloo, nccl or auto, got 'inproc' (in-process ranks "
        "share one process: use octopipe train)");
  }
  if (!(o.transport_timeout_s > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--transport_timeout_s must be > 0, got ", o.transport_timeout_s));
  }
  return absl::OkStatus();
}

// The agent's options from the flags, checked; an error's message names the flag.
absl::StatusOr<octopipe::agent::AgentOptions> AgentOptionsFromFlags() {
  octopipe::agent::AgentOptions o;
  o.node = absl::GetFlag(FLAGS_node);
  o.num_devices = absl::GetFlag(FLAGS_devices);
  const std::string transport = absl::GetFlag(FLAGS_transport);
  absl::StatusOr<octopipe::executor::TransportKind> kind =
      octopipe::executor::ParseTransportKind(transport);
  if (!kind.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--transport must be gloo, nccl or auto, got '", transport, "'"));
  }
  o.transport = *kind;
  o.work_dir = absl::GetFlag(FLAGS_work_dir);
  o.checkpoint_root = absl::GetFlag(FLAGS_checkpoint_dir);
  o.advertise_host = absl::GetFlag(FLAGS_advertise_host);
  o.store_port = absl::GetFlag(FLAGS_store_port);
  o.transport_timeout_s = absl::GetFlag(FLAGS_transport_timeout_s);
  o.report_every_iterations = absl::GetFlag(FLAGS_report_every);
  o.report_min_interval_s = absl::GetFlag(FLAGS_report_min_interval_s);
  if (!(o.report_min_interval_s >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--report_min_interval_s must be >= 0, got ", o.report_min_interval_s));
  }
  o.max_backoff_s = absl::GetFlag(FLAGS_max_backoff_s);
  o.max_rank_restarts = absl::GetFlag(FLAGS_max_rank_restarts);
  o.checkpoint_replicas = absl::GetFlag(FLAGS_checkpoint_replicas);
  RETURN_IF_ERROR(CheckAgentOptions(o));
  if (o.checkpoint_root.empty()) o.checkpoint_root = o.work_dir + "/checkpoints";
  return o;
}

// How to reach the planner: its address, TLS files and bearer token (--token_file, without
// its trailing line endings).
absl::StatusOr<octopipe::agent::PlannerConnectionOptions> ConnectionFromFlags() {
  octopipe::agent::PlannerConnectionOptions c;
  c.address = absl::GetFlag(FLAGS_planner);
  c.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  c.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  c.tls_key = absl::GetFlag(FLAGS_tls_key);
  if (const std::string f = absl::GetFlag(FLAGS_token_file); !f.empty()) {
    absl::StatusOr<std::string> t = octopipe::agent::ReadWholeFile(f);
    if (!t.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--token_file: cannot read '", f, "'"));
    }
    c.token = *t;
    while (!c.token.empty() && (c.token.back() == '\n' || c.token.back() == '\r')) {
      c.token.pop_back();
    }
  }
  return c;
}

// Serves the agent's /metrics when --metrics_port >= 0; null otherwise.
absl::StatusOr<std::unique_ptr<octopipe::agent::AgentMetrics>> StartMetrics(
    const std::string& node) {
  const int port = absl::GetFlag(FLAGS_metrics_port);
  if (port < 0) return nullptr;
  return octopipe::agent::AgentMetrics::Start(absl::GetFlag(FLAGS_metrics_host), port, node);
}

}  // namespace

int main(int argc, char** argv) {
  SetUpUsage();
  absl::ParseCommandLine(argc, argv);
  using octopipe::agent::RunRankProcess;
  if (!absl::GetFlag(FLAGS_rank_run_dir).empty()) {
    return RunRankProcess(absl::GetFlag(FLAGS_rank_run_dir), absl::GetFlag(FLAGS_rank),
                          absl::GetFlag(FLAGS_rank_device));
  }
  absl::StatusOr<octopipe::agent::AgentOptions> options = AgentOptionsFromFlags();
  if (!options.ok()) return Fail(std::string(options.status().message()));
  const octopipe::agent::AgentOptions& o = *options;
  absl::StatusOr<octopipe::agent::PlannerConnectionOptions> c = ConnectionFromFlags();
  if (!c.ok()) return Fail(std::string(c.status().message()));
  absl::StatusOr<std::unique_ptr<octopipe::agent::PlannerLink>> link =
      octopipe::agent::ConnectPlanner(*c);
  if (!link.ok()) return Fail(std::string(link.status().message()));
  absl::StatusOr<std::unique_ptr<octopipe::agent::AgentMetrics>> started_metrics =
      StartMetrics(o.node);
  if (!started_metrics.ok()) return Fail(std::string(started_metrics.status().message()));
  std::unique_ptr<octopipe::agent::AgentMetrics> metrics = std::move(*started_metrics);

  octopipe::agent::RankLauncher launcher(SelfPath());
  octopipe::agent::Agent agent(o, link->get(), &launcher, metrics.get());
  if (absl::Status s = agent.Init(); !s.ok()) return Fail(std::string(s.message()));
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGPIPE, SIG_IGN);
  const std::string store = agent.store_address();
  const int metrics_port = metrics ? metrics->port() : -1;
  if (const std::string f = absl::GetFlag(FLAGS_port_file); !f.empty()) {
    absl::Status s = octopipe::agent::WriteFileAtomically(
        f, absl::StrCat(store.substr(store.rfind(':') + 1), " ", metrics_port, "\n"));
    if (!s.ok()) return Fail(std::string(s.message()));
  }
  spdlog::info("agent {}: serving rendezvous store on {}, metrics port {}", o.node, store,
               metrics_port);
  agent.Run(g_stop);
  spdlog::info("agent {}: stopped", o.node);
  return 0;
}
