// MakeTransport: the one place that turns a transport kind from configuration into a
// Transport, so the worker, the CLI and the benchmarks choose transports the same way.
//
//   gloo    TCP via Gloo (CPU; works everywhere).
//   nccl    NCCL (GPU); kFailedPrecondition naming the CUDA error on a host without a GPU.
//   auto    NCCL if GpuAvailable(), else Gloo. The choice and its reason are logged on the
//           "transport" spdlog logger (created on stderr unless main registered one).
//   inproc  threads of one process (InProcHub); a hub, not this factory, makes its endpoints.
//
// Thread safety: MakeTransport is safe to call concurrently (each call builds its own
// transport). Do not call it before fork() if a child will use CUDA: "auto" and "nccl"
// initialize CUDA.
#ifndef OCTOPIPE_EXECUTOR_TRANSPORT_FACTORY_H_
#define OCTOPIPE_EXECUTOR_TRANSPORT_FACTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "executor/transport.h"

namespace octopipe::executor {

// What every transport needs; fields that only one uses say so.
struct TransportConfig {
  int rank = 0;
  int size = 1;
  // Directory shared by all ranks for rendezvous (Gloo's FileStore, NCCL's id file).
  std::string store_dir;
  // "HOST:PORT" of a TcpStoreServer for rendezvous without a shared directory (takes
  // precedence over store_dir): Gloo's pair addresses, NCCL's unique ids.
  std::string store_address;
  // Per-run namespace inside store_dir; must be fresh for every run.
  std::string prefix;
  // Gloo only: the address this rank listens on.
  std::string hostname = "127.0.0.1";
  // Limit for connecting and for each Send/Recv, in seconds.
  double timeout_s = 60;
  // NCCL only: CUDA device; -1 picks rank % device count.
  int cuda_device = -1;
};

enum class TransportKind { kGloo, kNccl, kAuto, kInProc };

// "gloo", "nccl", "auto", "inproc" (also what Transport::name() says of each).
absl::string_view TransportKindName(TransportKind kind);
// The inverse of TransportKindName; kInvalidArgument naming the value otherwise
// ("transport must be gloo, nccl, auto or inproc, got 'mpi'").
absl::StatusOr<TransportKind> ParseTransportKind(absl::string_view name);

// Whatever the chosen transport's Create returns; kInvalidArgument for kInProc (its endpoints
// share an InProcHub, which the caller owns).
absl::StatusOr<std::unique_ptr<Transport>> MakeTransport(TransportKind kind,
                                                         const TransportConfig& config);
// ParseTransportKind, then the above.
absl::StatusOr<std::unique_ptr<Transport>> MakeTransport(absl::string_view kind,
                                                         const TransportConfig& config);

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_TRANSPORT_FACTORY_H_
