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
  o.store_address = c.store_address;
  o.prefix = c.prefix;
  o.device = c.cuda_device;
  o.timeout_s = c.timeout_s;
  return NcclTransport::Create(o);
}

}  // namespace

absl::string_view TransportKindName(TransportKind kind) {
  switch (kind) {
    case TransportKind::kGloo: return "gloo";
    case TransportKind::kNccl: return "nccl";
    case TransportKind::kAuto: return "auto";
    case TransportKind::kInProc: return "inproc";
  }
  return "?";
}

absl::StatusOr<TransportKind> ParseTransportKind(absl::string_view name) {
  for (TransportKind k :
       {TransportKind::kGloo, TransportKind::kNccl, TransportKind::kAuto, TransportKind::kInProc}) {
    if (name == TransportKindName(k)) return k;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("transport must be gloo, nccl, auto or inproc, got '", name, "'"));
}

absl::StatusOr<std::unique_ptr<Transport>> MakeTransport(TransportKind kind,
                                                         const TransportConfig& config) {
  switch (kind) {
    case TransportKind::kGloo: return MakeGloo(config);
    case TransportKind::kNccl: return MakeNccl(config);
    case TransportKind::kAuto: break;
    case TransportKind::kInProc:
      return absl::InvalidArgumentError(
          "transport inproc connects the threads of one process: take its endpoints from an "
          "InProcHub");
  }
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

absl::StatusOr<std::unique_ptr<Transport>> MakeTransport(absl::string_view kind,
                                                         const TransportConfig& config) {
  absl::StatusOr<TransportKind> parsed = ParseTransportKind(kind);
  if (!parsed.ok()) return parsed.status();
  return MakeTransport(*parsed, config);
}

}  // namespace octopipe::executor
