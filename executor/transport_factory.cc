#include "executor/transport_factory.h"

#include "absl/strings/str_cat.h"
#include "executor/gloo_transport.h"
#include "executor/nccl_transport.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace octopipe::executor {
namespace {

// The subsystem's logger: main may register "transport" with its own sinks first.
std::shared_ptr<spdlog::logger> Logger() {
  static const std::shared_ptr<spdlog::logger> logger = [] {
    std::shared_ptr<spdlog::logger> l = spdlog::get("transport");
    return l != nullptr ? l : spdlog::stderr_color_mt("transport");
  }();
  return logger;
}

absl::StatusOr<std::unique_ptr<Transport>> MakeGloo(const TransportConfig& c) {
  GlooOptions o;
  o.rank = c.rank;
  o.size = c.size;
  o.store_dir = c.store_dir;
  o.store_address = c.store_address;
  o.prefix = c.prefix;
  o.hostname = c.hostname;
  o.timeout_s = c.timeout_s;
  return GlooTransport::Create(o);
}

absl::StatusOr<std::unique_ptr<Transport>> MakeNccl(const TransportConfig& c) {
  NcclOptions o;
  o.rank = c.rank;
  o.size = c.size;
  o.store_dir = c.store_dir;
  o.prefix = c.prefix;
  o.device = c.cuda_device;
  o.timeout_s = c.timeout_s;
  return NcclTransport::Create(o);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> MakeTransport(absl::string_view kind,
                                                         const TransportConfig& config) {
  if (kind == "gloo") return MakeGloo(config);
  if (kind == "nccl") return MakeNccl(config);
  if (kind == "auto") {
    absl::StatusOr<int> gpus = CudaDeviceCount();
    if (gpus.ok()) {
      Logger()->info("rank {}: transport=auto picked nccl: {} CUDA device(s) found", config.rank,
                     *gpus);
      return MakeNccl(config);
    }
    Logger()->info("rank {}: transport=auto picked gloo: {}", config.rank,
                   std::string(gpus.status().message()));
    return MakeGloo(config);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("transport '", kind, "' is unknown; use gloo, nccl or auto"));
}

}  // namespace octopipe::executor
