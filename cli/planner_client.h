// Connection settings for talking to a running octopipe-planner from the CLI: address, TLS
// (server CA; client certificate for mutual TLS) and the bearer token.
#ifndef OCTOPIPE_CLI_PLANNER_CLIENT_H_
#define OCTOPIPE_CLI_PLANNER_CLIENT_H_

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "cli/command_line.h"
#include "proto/planner.grpc.pb.h"

namespace octopipe::cli {

// kInvalidArgument naming --planner unless `address` is HOST:PORT with a port in [1, 65535]
// (optionally dns:///HOST:PORT) or unix:PATH.
absl::Status CheckPlannerAddress(const std::string& address);

struct PlannerConnection {
  std::string address;     // HOST:PORT
  std::string token;       // bearer token (or read from token_file)
  std::string token_file;
  std::string tls_ca;      // CA that signed the planner's certificate: enables TLS
  std::string tls_cert;    // client certificate and key for mutual TLS
  std::string tls_key;
  double timeout_s = 600;

  // Declares --planner, --token, --token_file, --tls_ca, --tls_cert, --tls_key.
  void AddFlags(CommandLine& flags);
  absl::StatusOr<std::unique_ptr<proto::Planner::Stub>> Connect();
  // A context with the deadline and the token.
  std::unique_ptr<grpc::ClientContext> Context() const;
};

// "--planner: NOT_FOUND: job_id: no job 'x'" style message for a failed call.
absl::Status FromGrpc(const grpc::Status& status);

}  // namespace octopipe::cli

#endif  // OCTOPIPE_CLI_PLANNER_CLIENT_H_
