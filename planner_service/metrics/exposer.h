// MetricsEndpoint: serves a prometheus-cpp Registry on http://HOST:PORT/metrics with
// prometheus-cpp's Exposer (civetweb), configured so that slow or half-open clients cannot block
// a scrape: several worker threads, each connection bounded by a request timeout. Any process
// of OctoPipe that exports metrics (the planner, the worker agent) starts one the same way:
//
//   auto registry = std::make_shared<prometheus::Registry>();
//   ... declare metrics on *registry ...
//   ASSIGN_OR_RETURN(auto endpoint, MetricsEndpoint::Start(registry, {.port = 0}));
//   endpoint->port();  // the bound port
//
// Thread safety: port() may be called from any thread. Ownership: the endpoint keeps the
// registry alive; destroying the endpoint stops serving (in-flight scrapes finish first).
#ifndef OCTOPIPE_PLANNER_SERVICE_METRICS_EXPOSER_H_
#define OCTOPIPE_PLANNER_SERVICE_METRICS_EXPOSER_H_

#include <memory>
#include <string>

#include <prometheus/exposer.h>
#include <prometheus/registry.h>

#include "absl/status/statusor.h"

namespace octopipe::metrics {

struct MetricsEndpointOptions {
  std::string host = "127.0.0.1";  // "0.0.0.0" to be scraped from other hosts
  int port = 0;                     // 0: an ephemeral port (see MetricsEndpoint::port())
  // civetweb worker threads; one is held per open connection until it sends a request or
  // times out, so this many minus one half-open connections still leave a scrape a worker.
  int num_threads = 8;
  // How long a connection may take to send its request (and keep-alive idle time) before
  // civetweb drops it, freeing the worker. Prometheus sends its request at once.
  int request_timeout_ms = 5000;
};

class MetricsEndpoint {
 public:
  // Binds and starts serving. kInvalidArgument for a bad option, kUnavailable when the address
  // cannot be bound (in use, not local); the message names HOST:PORT.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      std::shared_ptr<prometheus::Registry> registry, const MetricsEndpointOptions& options);

  int port() const { return port_; }

 private:
  MetricsEndpoint(std::shared_ptr<prometheus::Registry> registry,
                  std::unique_ptr<prometheus::Exposer> exposer, int port)
      : registry_(std::move(registry)), exposer_(std::move(exposer)), port_(port) {}

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_;
};

}  // namespace octopipe::metrics

#endif  // OCTOPIPE_PLANNER_SERVICE_METRICS_EXPOSER_H_
