#include "cli/planner_client.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace octopipe::cli {

void PlannerConnection::AddFlags(CommandLine& flags) {
  flags.String("planner", &address,
               "HOST:PORT of a running octopipe-planner, or A,B,C: planner replicas on one etcd "
               "store (the one that leads is used), or dns:///NAME:PORT: every address NAME "
               "resolves to is a replica");
  flags.String("token", &token, "bearer token the planner requires (prefer --token_file)");
  flags.String("token_file", &token_file, "read the bearer token from this file");
  flags.String("tls_ca", &tls_ca, "CA certificate (PEM) of the planner: connect with TLS");
  flags.String("tls_cert", &tls_cert, "client certificate (PEM) for mutual TLS");
  flags.String("tls_key", &tls_key, "client private key (PEM) for mutual TLS");
}

absl::StatusOr<std::unique_ptr<PlannerClient>> PlannerConnection::Connect(std::ostream* log) {
  client::PlannerClientOptions o;
  o.address = address;
  o.token = token;
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    if (!in) {
      return absl::InvalidArgumentError(
          absl::StrCat("--token_file: cannot read '", token_file, "'"));
    }
    std::stringstream s;
    s << in.rdbuf();
    o.token = s.str();
    while (!o.token.empty() && (o.token.back() == '\n' || o.token.back() == '\r')) {
      o.token.pop_back();
    }
  }
  o.tls_ca = tls_ca;
  o.tls_cert = tls_cert;
  o.tls_key = tls_key;
  o.timeout_s = timeout_s;
  o.log = log;
  return client::ConnectPlannerClient(o);
}

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  const auto code = static_cast<absl::StatusCode>(s.error_code());
  return absl::Status(code, absl::StrCat("planner: ", absl::StatusCodeToString(code), ": ",
                                         s.error_message()));
}

}  // namespace octopipe::cli
