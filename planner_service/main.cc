// octopipe-planner: the long-running gRPC planner service. Flags (Abseil) are read here only
// and copied into PlannerServerOptions and logging::LogOptions; `main` builds the metrics
// registry and passes it in. SIGTERM/SIGINT shut it down gracefully; SIGHUP re-reads --identities.
//
// Exit codes: 0 after a signal; 1 when the server cannot start (the message names the flag or
// file at fault), and, by Abseil's convention, after --help and for a flag it cannot parse;
// 2 for a flag value the planner refuses (a token file, a log level, a stray argument).
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <unistd.h>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/synchronization/mutex.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "logging/logging.h"
#include "planner_service/metrics/planner_metrics.h"
#include "planner_service/server.h"

namespace {
using octopipe::planner::PlannerServerOptions;
const PlannerServerOptions kDefaults;
}  // namespace

ABSL_FLAG(std::string, host, kDefaults.host,
          "Address to serve gRPC on; 0.0.0.0 serves every interface.");
ABSL_FLAG(int, port, kDefaults.port, "gRPC port; 0 picks a free one (see --port_file).");
ABSL_FLAG(std::string, port_file, "",
          "Once serving, write the gRPC port and the metrics port (one per line) to this file, "
          "atomically (for scripts and tests).");
ABSL_FLAG(std::string, state_dir, kDefaults.state_dir,
          "Directory of the SQLite state (planner.db: jobs, plans, calibration); created if "
          "missing. Used when --store is not given.");
ABSL_FLAG(std::string, store, "",
          "Where the state lives: sqlite:DIR (DIR/planner.db, one local file; the default is "
          "sqlite:--state_dir) or etcd:HOST:PORT[,HOST:PORT...] (an etcd 3.4+ cluster, shared "
          "by planner replicas; keys under --etcd_prefix).");
ABSL_FLAG(std::string, etcd_prefix, kDefaults.etcd_prefix,
          "Key prefix of the state in etcd (--store=etcd:...): starts with '/', no trailing "
          "'/'. Planners sharing a prefix share jobs.");
ABSL_FLAG(double, leader_ttl_s, kDefaults.leader_ttl_s,
          "With --store=etcd: the lease of the leadership among replicas, in whole seconds "
          ">= 1, kept alive every third of it. A leader that cannot renew it steps down; a "
          "follower takes over about this long after the leader dies.");
ABSL_FLAG(std::string, advertise_address, "",
          "With --store=etcd: the HOST:PORT other replicas and clients reach this one at (a "
          "follower names the leader's); default: --host:--port as bound.");
ABSL_FLAG(int, metrics_port, kDefaults.metrics_port,
          "Prometheus /metrics port; 0 picks a free one; -1 turns metrics off.");
ABSL_FLAG(std::string, metrics_host, kDefaults.metrics_host, "Address to serve /metrics on.");
ABSL_FLAG(int, metrics_threads, kDefaults.metrics_threads,
          "/metrics HTTP worker threads; each slow or half-open client holds one until "
          "--metrics_request_timeout_ms, so scrapes go on while fewer than this many stall.");
ABSL_FLAG(int, metrics_request_timeout_ms, kDefaults.metrics_request_timeout_ms,
          "Milliseconds a /metrics client may take to send its request before it is dropped.");
ABSL_FLAG(std::string, tls_cert, "",
          "Server certificate (PEM); with --tls_key, serve gRPC over TLS. Checked at start-up: "
          "a missing, non-PEM or mismatched file is an error naming it.");
ABSL_FLAG(std::string, tls_key, "", "Server private key (PEM, unencrypted) for --tls_cert.");
ABSL_FLAG(std::string, tls_client_ca, "",
          "CA (PEM) that must sign client certificates: mutual TLS. Needs --tls_cert.");
ABSL_FLAG(std::string, token, "",
          "Bearer token agents and mutating calls must present; empty: none. Visible in the "
          "process list: prefer --token_file.");
ABSL_FLAG(std::string, identities, "",
          "JSON file of principals, each with its own credential (token, token_file, or the "
          "name its mTLS client certificate carries) and role: viewer (reads), scheduler "
          "(+ Plan, jobs, drain, node failures), agent (its own node's registration, "
          "heartbeats, reports and events; 'node' names it), admin (everything). Reads need a "
          "credential too. Re-read on SIGHUP (a bad file keeps the previous principals). Not "
          "with --token/--token_file. Format: docs/architecture.md, section Access control.");
ABSL_FLAG(std::string, audit_log, "",
          "Append one JSON line per mutating call (identity, role, method, target, result) to "
          "this file; refused heartbeats too, accepted ones not. Empty: no audit log.");
ABSL_FLAG(std::string, token_file, "",
          "Read the bearer token from this file; surrounding whitespace and line endings "
          "(CRLF too) are trimmed, and an empty token is refused.");
ABSL_FLAG(int, max_request_bytes, kDefaults.max_request_bytes,
          "Largest gRPC request accepted, in bytes.");
ABSL_FLAG(int64_t, max_layers, kDefaults.limits.max_layers, "Largest model (layers) accepted.");
ABSL_FLAG(int64_t, max_devices, kDefaults.limits.max_devices,
          "Largest cluster (devices) accepted, and largest pipeline.");
ABSL_FLAG(int64_t, max_nodes, kDefaults.limits.max_nodes, "Most nodes a cluster may list.");
ABSL_FLAG(int64_t, max_hardware, kDefaults.limits.max_hardware,
          "Most hardware entries a cluster may list.");
ABSL_FLAG(int64_t, max_microbatches, kDefaults.limits.max_microbatches,
          "Most micro-batches per iteration a request or model may ask for.");
ABSL_FLAG(int64_t, max_stage_microbatches, kDefaults.limits.max_stage_microbatches,
          "Largest stages x micro-batches of one candidate (bounds one simulator pass).");
ABSL_FLAG(int64_t, max_layer_devices, kDefaults.limits.max_layer_devices,
          "Largest layers x pipeline devices (the size of one run's cost table).");
ABSL_FLAG(int64_t, max_plan_bytes, kDefaults.limits.max_plan_bytes,
          "Largest plan (wire bytes) answered in Plan, GetJob and WatchPlan; larger plans are "
          "refused (RESOURCE_EXHAUSTED) so default 4 MB gRPC clients can read every answer.");
ABSL_FLAG(int64_t, max_name_bytes, kDefaults.limits.max_name_bytes,
          "Longest job, node, hardware or layer name accepted, in bytes.");
ABSL_FLAG(double, max_time_budget_s, kDefaults.limits.max_time_budget_s,
          "Largest tuning budget, in seconds, a request may ask for.");
ABSL_FLAG(double, default_time_budget_s, kDefaults.limits.default_time_budget_s,
          "Tuning budget, in seconds, when a request does not set one.");
ABSL_FLAG(int, workers, kDefaults.workers, "Tuning threads.");
ABSL_FLAG(int, plan_cache_entries, kDefaults.plan_cache_entries,
          "Answers to identical Plan requests kept (least recently used dropped first); 0 "
          "turns the cache off.");
ABSL_FLAG(int, max_queued, kDefaults.max_queued,
          "Tuning tasks allowed to wait; beyond it Plan and CreateJob answer "
          "RESOURCE_EXHAUSTED.");
ABSL_FLAG(double, heartbeat_timeout_s, kDefaults.heartbeat_timeout_s,
          "A node whose agent misses heartbeats this long is lost and its jobs re-planned.");
ABSL_FLAG(double, heartbeat_batch_ms, kDefaults.heartbeat_batch_ms,
          "While streamed heartbeats keep arriving, handle them in batches this often (0, or "
          "0.5 to 100 ms; 0: each as it arrives). One wake-up per batch instead of one per "
          "heartbeat: a third less planner CPU at 10,000 agents, for at most this much later "
          "handling (after a quiet spell, the first heartbeat waits up to 32 times this, at "
          "most 100 ms).");
ABSL_FLAG(double, replan_start_deviation, kDefaults.replan.start_deviation,
          "Measured/predicted deviation of a stage that starts a re-plan (0.2 = 20%).");
ABSL_FLAG(double, replan_stop_deviation, kDefaults.replan.stop_deviation,
          "Deviation at or below which a job is back to normal (hysteresis).");
ABSL_FLAG(double, replan_min_gain, kDefaults.replan.min_gain,
          "A re-plan is adopted only if predicted at least this fraction faster. After a "
          "node loss, a new layout replaces the surviving replicas (dropping or "
          "re-partitioning the broken ones) only if predicted this fraction quicker to "
          "finish the job.");
ABSL_FLAG(double, replan_cooldown_s, kDefaults.replan.cooldown_s,
          "Seconds between measured-time re-plans of one job.");
ABSL_FLAG(std::string, log_level, "info",
          "Lowest level logged: trace, debug, info, warn, error, critical or off. At info: one "
          "line per RPC, per plan and re-plan decision, per agent event.");
ABSL_FLAG(bool, log_json, false,
          "Log JSON lines (one object per line: time, level, logger, msg and the event's "
          "fields) instead of text.");

namespace {

constexpr char kUsage[] =
    "The OctoPipe planner service: cluster schedulers create jobs and ask for plans over\n"
    "gRPC; worker agents register, heartbeat, watch their job's plan and report measured\n"
    "stage times, which re-plan the job when the gain is worth it. State lives in SQLite\n"
    "under --state_dir, or in etcd with --store=etcd:...; metrics are served for\n"
    "Prometheus on --metrics_port.\n\n"
    "Usage: octopipe-planner [--flag=value ...]";

// The token in `path`, without surrounding whitespace (a file written on Windows ends in
// CRLF); an empty token is an error: it would silently turn authentication off.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("--token_file: cannot read '", path, "'"));
  }
  std::stringstream s;
  s << in.rdbuf();
  std::string token(absl::StripAsciiWhitespace(s.str()));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--token_file: '", path, "' holds no token (empty or only whitespace)"));
  }
  if (token.find_first_of(" \t\r\n") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--token_file: the token in '", path, "' contains whitespace; a bearer token is one "
        "word"));
  }
  return token;
}

// Copies the flags into the options; errors name the flag.
absl::StatusOr<PlannerServerOptions> OptionsFromFlags() {
  PlannerServerOptions o;
  o.host = absl::GetFlag(FLAGS_host);
  o.port = absl::GetFlag(FLAGS_port);
  o.state_dir = absl::GetFlag(FLAGS_state_dir);
  o.store = absl::GetFlag(FLAGS_store);
  o.etcd_prefix = absl::GetFlag(FLAGS_etcd_prefix);
  o.leader_ttl_s = absl::GetFlag(FLAGS_leader_ttl_s);
  o.advertise_address = absl::GetFlag(FLAGS_advertise_address);
  if (!(o.leader_ttl_s >= 1) || o.leader_ttl_s != std::floor(o.leader_ttl_s)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--leader_ttl_s must be a whole number of seconds >= 1, got ", o.leader_ttl_s));
  }
  o.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  o.metrics_host = absl::GetFlag(FLAGS_metrics_host);
  o.metrics_threads = absl::GetFlag(FLAGS_metrics_threads);
  o.metrics_request_timeout_ms = absl::GetFlag(FLAGS_metrics_request_timeout_ms);
  o.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  o.tls_key = absl::GetFlag(FLAGS_tls_key);
  o.tls_client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  o.token = absl::GetFlag(FLAGS_token);
  o.identities_file = absl::GetFlag(FLAGS_identities);
  o.audit_log = absl::GetFlag(FLAGS_audit_log);
  o.max_request_bytes = absl::GetFlag(FLAGS_max_request_bytes);
  o.limits.max_layers = absl::GetFlag(FLAGS_max_layers);
  o.limits.max_devices = absl::GetFlag(FLAGS_max_devices);
  o.limits.max_nodes = absl::GetFlag(FLAGS_max_nodes);
  o.limits.max_hardware = absl::GetFlag(FLAGS_max_hardware);
  o.limits.max_microbatches = absl::GetFlag(FLAGS_max_microbatches);
  o.limits.max_stage_microbatches = absl::GetFlag(FLAGS_max_stage_microbatches);
  o.limits.max_layer_devices = absl::GetFlag(FLAGS_max_layer_devices);
  o.limits.max_name_bytes = absl::GetFlag(FLAGS_max_name_bytes);
  o.limits.max_plan_bytes = absl::GetFlag(FLAGS_max_plan_bytes);
  o.limits.max_time_budget_s = absl::GetFlag(FLAGS_max_time_budget_s);
  o.limits.default_time_budget_s = absl::GetFlag(FLAGS_default_time_budget_s);
  o.workers = absl::GetFlag(FLAGS_workers);
  o.max_queued = absl::GetFlag(FLAGS_max_queued);
  o.plan_cache_entries = absl::GetFlag(FLAGS_plan_cache_entries);
  o.heartbeat_timeout_s = absl::GetFlag(FLAGS_heartbeat_timeout_s);
  if (!(o.heartbeat_timeout_s > 0) || !std::isfinite(o.heartbeat_timeout_s)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--heartbeat_timeout_s must be a positive number of seconds, got ",
        o.heartbeat_timeout_s));
  }
  o.heartbeat_batch_ms = absl::GetFlag(FLAGS_heartbeat_batch_ms);
  if (!(o.heartbeat_batch_ms == 0 ||
        (o.heartbeat_batch_ms >= 0.5 && o.heartbeat_batch_ms <= 100))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--heartbeat_batch_ms must be 0 or between 0.5 and 100, got ", o.heartbeat_batch_ms));
  }
  o.replan.start_deviation = absl::GetFlag(FLAGS_replan_start_deviation);
  o.replan.stop_deviation = absl::GetFlag(FLAGS_replan_stop_deviation);
  o.replan.min_gain = absl::GetFlag(FLAGS_replan_min_gain);
  o.replan.cooldown_s = absl::GetFlag(FLAGS_replan_cooldown_s);
  const std::string token_file = absl::GetFlag(FLAGS_token_file);
  if (!token_file.empty()) {
    if (!o.token.empty()) {
      return absl::InvalidArgumentError("--token and --token_file are mutually exclusive");
    }
    absl::StatusOr<std::string> token = ReadTokenFile(token_file);
    if (!token.ok()) return token.status();
    o.token = *token;
  }
  return o;
}

absl::StatusOr<octopipe::logging::LogOptions> LogOptionsFromFlags() {
  absl::StatusOr<spdlog::level::level_enum> level =
      octopipe::logging::ParseLevel(absl::GetFlag(FLAGS_log_level));
  if (!level.ok()) return absl::InvalidArgumentError(absl::StrCat("--", level.status().message()));
  octopipe::logging::LogOptions options;
  options.level = *level;
  options.json = absl::GetFlag(FLAGS_log_json);
  return options;
}

// --help lists this binary's flags only, not those of the libraries it links.
void SetUpUsage() {
  absl::SetProgramUsageMessage(kUsage);
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "planner_service/main.cc");
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  config.normalize_filename = [](absl::string_view file) { return std::string(file); };
  absl::SetFlagsUsageConfig(config);
}

// Written atomically so a reader never sees a partial number; "" or what failed.
std::string WritePortFile(const std::string& path, int port, int metrics_port) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << port << "\n" << metrics_port << "\n";
    out.close();
    if (!out) return absl::StrCat("cannot write '", tmp, "': ", std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::StrCat("cannot rename '", tmp, "' to '", path, "': ", std::strerror(errno));
  }
  return "";
}

// Checked before anything starts: a script waiting for the file would otherwise wait forever.
// False (after saying why) when --port_file is set and cannot be written.
bool PortFileWritable() {
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (port_file.empty()) return true;
  const std::string probe = port_file + ".tmp";
  std::ofstream out(probe);
  if (!out) {
    std::cerr << "octopipe-planner: error: --port_file: cannot write '" << probe
              << "': " << std::strerror(errno) << "\n";
    return false;
  }
  out.close();
  std::remove(probe.c_str());
  return true;
}

// A replica that loses the leadership starts over as a follower: the same binary and flags
// (`args`), with nothing of the old term in memory.
std::function<void(const std::string&)> RestartAsFollower(std::vector<std::string> args) {
  return [args = std::move(args)](const std::string& why) {
    auto log = octopipe::logging::Logger("leader");
    log->error("restarting as a follower: {}", why);
    log->flush();
    std::vector<char*> exec_argv;
    for (const std::string& a : args) exec_argv.push_back(const_cast<char*>(a.c_str()));
    exec_argv.push_back(nullptr);
    execv("/proc/self/exe", exec_argv.data());
    std::cerr << "octopipe-planner: error: cannot restart as a follower: "
              << std::strerror(errno) << "\n";
    _exit(1);
  };
}

// Blocks the shutdown signals (and SIGHUP, which re-reads --identities) in every thread
// started after this; the main thread waits for them.
sigset_t BlockShutdownSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);  // re-reads --identities
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

// Announces the started server (and writes --port_file), then serves until SIGTERM or SIGINT,
// re-reading --identities on SIGHUP; shuts the server down. The process's exit code.
int Serve(octopipe::planner::PlannerServer* server, const PlannerServerOptions& o,
          const sigset_t& signals) {
  // Tests and scripts wait for this line (or --port_file); keep its "serving on HOST:PORT" and
  // "metrics on HOST:PORT" parts. Logged, so that with --log_json stderr is JSON lines only.
  auto log = octopipe::logging::Logger("planner");
  log->info("serving on {}:{}{}{}, state in {}", o.host, server->port(),
            o.tls_cert.empty() ? "" : " (TLS)",
            server->metrics_port() >= 0
                ? absl::StrCat(", metrics on ", o.metrics_host, ":", server->metrics_port())
                : std::string(),
            o.store.empty() ? o.state_dir : o.store);
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (!port_file.empty()) {
    if (const std::string error = WritePortFile(port_file, server->port(), server->metrics_port());
        !error.empty()) {
      log->error("--port_file: {}; shutting down", error);
      server->Shutdown(5);
      return 1;
    }
  }
  int sig = 0;
  while (sigwait(&signals, &sig) == 0 && sig == SIGHUP) {
    (void)server->ReloadIdentities();  // logged either way
  }
  log->info("signal {}, shutting down", sig);
  server->Shutdown(5);
  log->info("stopped");
  log->flush();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using octopipe::planner::PlannerServer;
  // Debian's Abseil records every lock acquisition in a deadlock-detection graph; at thousands
  // of RPCs a second that bookkeeping shows up in the planner's CPU (bench:control_plane).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  SetUpUsage();
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    std::cerr << "octopipe-planner: error: unexpected argument '" << positional[1]
              << "' (flags are --name=value; see --help)\n";
    return 2;
  }
  if (!PortFileWritable()) return 2;
  absl::StatusOr<octopipe::logging::LogOptions> log_options = LogOptionsFromFlags();
  absl::StatusOr<PlannerServerOptions> options = OptionsFromFlags();
  for (const absl::Status& s : {log_options.status(), options.status()}) {
    if (!s.ok()) {
      std::cerr << "octopipe-planner: error: " << s.message() << "\n";
      return 2;
    }
  }
  octopipe::logging::Configure(*log_options);
  options->on_deposed = RestartAsFollower(std::vector<std::string>(argv, argv + argc));
  const PlannerServerOptions& o = *options;
  const sigset_t signals = BlockShutdownSignals();

  // Every metric of the process is declared here, on the registry /metrics serves.
  auto registry = std::make_shared<prometheus::Registry>();
  auto metrics = octopipe::metrics::PlannerMetrics::Create(*registry);
  if (!metrics.ok()) {
    std::cerr << "octopipe-planner: error: " << metrics.status().message() << "\n";
    return 1;
  }
  PlannerServer server(o, registry, std::move(*metrics));
  if (absl::Status s = server.Start(); !s.ok()) {
    std::cerr << "octopipe-planner: error: " << s.message() << "\n";
    return 1;
  }
  return Serve(&server, o, signals);
}
