// metrics_demo: serves the planner's metrics page (PlannerMetrics) with a few fixed values, for
// //tests:prometheus_scrape_test and for trying dashboards without a cluster. Writes the bound
// port to --port_file once it is serving, then serves until SIGINT or SIGTERM.
//
// Values: octopipe_agents_alive 3, octopipe_jobs 1, one job "demo" with predicted iteration
// 1.25 s and bubble ratio 0.125, two plans (oneshot, job), one re-plan (measured), one tuning
// run of 0.3 s, one SubmitJob RPC with code OK.
#include <pthread.h>
#include <signal.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cli/flags.h"
#include "planner_service/metrics/http_exporter.h"
#include "planner_service/metrics/metrics.h"
#include "planner_service/metrics/planner_metrics.h"

namespace {

using octopipe::metrics::HttpExporter;
using octopipe::metrics::HttpExporterOptions;
using octopipe::metrics::PlanKind;
using octopipe::metrics::PlannerMetrics;
using octopipe::metrics::Registry;
using octopipe::metrics::ReplanReason;

void SetDemoValues(PlannerMetrics& m) {
  m.agents_alive->Set(3);
  m.jobs->Set(1);
  m.predicted_iteration_seconds->WithLabels({"demo"}).Set(1.25);
  m.predicted_bubble_ratio->WithLabels({"demo"}).Set(0.125);
  m.PlansComputed(PlanKind::kOneshot).Inc();
  m.PlansComputed(PlanKind::kJob).Inc();
  m.Replans(ReplanReason::kMeasured).Inc();
  m.TuningSeconds().Observe(0.3);
  m.Rpcs("SubmitJob", absl::StatusCode::kOk).Inc();
}

// Written to a temporary name and renamed, so a reader never sees a partial number.
bool WritePortFile(const std::string& path, int port) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << port << "\n";
    if (!out.good()) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string host = "127.0.0.1";
  int64_t port = 0;
  std::string port_file;
  octopipe::cli::FlagSet flags("metrics_demo",
                               "Serves the planner's /metrics page with fixed demo values.");
  flags.String("host", &host, "address to bind");
  flags.Int("port", &port, "TCP port; 0 picks a free one");
  flags.String("port_file", &port_file, "write the bound port here once serving (required)");
  const absl::Status parsed = flags.Parse(std::vector<std::string>(argv + 1, argv + argc));
  if (flags.help_requested()) {
    std::cout << flags.Usage();
    return 0;
  }
  if (!parsed.ok() || port_file.empty()) {
    std::cerr << "metrics_demo: " << (parsed.ok() ? "--port_file is required" : parsed.message())
              << "\n\n"
              << flags.Usage();
    return 2;
  }

  // Block the stop signals before any thread starts, so that only sigwait below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  Registry registry;
  absl::StatusOr<std::unique_ptr<PlannerMetrics>> metrics = PlannerMetrics::Create(registry);
  if (!metrics.ok()) {
    std::cerr << "metrics_demo: " << metrics.status() << "\n";
    return 1;
  }
  SetDemoValues(**metrics);

  HttpExporterOptions options;
  options.host = host;
  options.port = static_cast<int>(port);
  HttpExporter exporter(registry, options);
  if (const absl::Status started = exporter.Start(); !started.ok()) {
    std::cerr << "metrics_demo: " << started << "\n";
    return 1;
  }
  if (!WritePortFile(port_file, exporter.port())) {
    std::cerr << "metrics_demo: cannot write --port_file " << port_file << "\n";
    return 1;
  }
  std::cout << "metrics_demo: serving http://" << host << ":" << exporter.port() << "/metrics"
            << std::endl;

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  exporter.Stop();
  return 0;
}
