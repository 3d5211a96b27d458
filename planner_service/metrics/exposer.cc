#include "planner_service/metrics/exposer.h"

#include <exception>
#include <vector>

#include "absl/strings/str_cat.h"

namespace octopipe::metrics {

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    std::shared_ptr<prometheus::Registry> registry, const MetricsEndpointOptions& options) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics port: ", options.port, " is not in 0..65535"));
  }
  if (options.num_threads < 1 || options.request_timeout_ms < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics endpoint: num_threads (", options.num_threads, ") and request_timeout_ms (",
        options.request_timeout_ms, ") must be positive"));
  }
  const std::string address = absl::StrCat(options.host, ":", options.port);
  std::vector<std::string> civetweb_options = {
      "listening_ports", address,
      "num_threads", std::to_string(options.num_threads),
      "request_timeout_ms", std::to_string(options.request_timeout_ms),
      "keep_alive_timeout_ms", std::to_string(options.request_timeout_ms),
  };
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    exposer = std::make_unique<prometheus::Exposer>(std::move(civetweb_options));
  } catch (const std::exception& e) {
    // civetweb reports a failed bind (and a malformed address) as a CivetException.
    return absl::UnavailableError(
        absl::StrCat("cannot serve /metrics on ", address, ": ", e.what()));
  }
  const std::vector<int> ports = exposer->GetListeningPorts();
  if (ports.empty()) {
    return absl::UnavailableError(absl::StrCat("cannot serve /metrics on ", address));
  }
  exposer->RegisterCollectable(registry);
  return std::unique_ptr<MetricsEndpoint>(
      new MetricsEndpoint(std::move(registry), std::move(exposer), ports.front()));
}

}  // namespace octopipe::metrics
