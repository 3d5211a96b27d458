// GrpcPlannerLink: PlannerLink over the planner's gRPC API (proto/planner.proto), with optional
// TLS / mutual TLS and a bearer token. The only gRPC-aware part of the agent.
#ifndef OCTOPIPE_WORKER_AGENT_GRPC_PLANNER_LINK_H_
#define OCTOPIPE_WORKER_AGENT_GRPC_PLANNER_LINK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker_agent/planner_link.h"

namespace octopipe::agent {

struct PlannerConnectionOptions {
  std::string address;  // HOST:PORT, or a list of planner replicas A,B,C (calls go to the leader)
  std::string token;    // bearer token ("" = none)
  std::string tls_ca;   // PEM files; tls_ca enables TLS, tls_cert + tls_key mutual TLS
  std::string tls_cert;
  std::string tls_key;
  double rpc_timeout_s = 5;
  // With several replicas: how long a call waits for one to lead (client::PlannerClient).
  double failover_window_s = 3;
};

// kInvalidArgument naming the flag when a file cannot be read or the address is empty.
absl::StatusOr<std::unique_ptr<PlannerLink>> ConnectPlanner(const PlannerConnectionOptions& o);

}  // namespace octopipe::agent

#endif  // OCTOPIPE_WORKER_AGENT_GRPC_PLANNER_LINK_H_
