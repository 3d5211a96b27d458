// Connection settings for talking to a running octopipe-planner from the CLI: the flags
// (address or replicas, TLS, bearer token) that build a client::PlannerClient
// (planner_client/planner_client.h, shared with the worker agents).
#ifndef OCTOPIPE_CLI_PLANNER_CLIENT_H_
#define OCTOPIPE_CLI_PLANNER_CLIENT_H_

#include <memory>
#include <ostream>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "cli/command_line.h"
#include "planner_client/planner_client.h"

namespace octopipe::cli {

using client::CheckPlannerAddress;
using client::PlannerClient;

struct PlannerConnection {
  std::string address;     // HOST:PORT, or A,B,C: planner replicas
  std::string token;       // bearer token (or read from token_file)
  std::string token_file;
  std::string tls_ca;      // CA that signed the planner's certificate: enables TLS
  std::string tls_cert;    // client certificate and key for mutual TLS
  std::string tls_key;
  double timeout_s = 600;

  // Declares --planner, --token, --token_file, --tls_ca, --tls_cert, --tls_key.
  void AddFlags(CommandLine& flags);
  // Checks every address and reads the token and TLS files (kInvalidArgument naming the flag);
  // connects lazily. `log` (may be null) gets one line per fail-over.
  absl::StatusOr<std::unique_ptr<PlannerClient>> Connect(std::ostream* log = nullptr);
};

// "--planner: NOT_FOUND: job_id: no job 'x'" style message for a failed call.
absl::Status FromGrpc(const grpc::Status& status);

}  // namespace octopipe::cli

#endif  // OCTOPIPE_CLI_PLANNER_CLIENT_H_
