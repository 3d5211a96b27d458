#include "cli/planner_client.h"

#include <optional>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/leader_hint.h"

namespace octopipe::cli {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("--", flag, ": cannot read '", path, "'"));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

void PlannerConnection::AddFlags(CommandLine& flags) {
  flags.String("planner", &address,
               "HOST:PORT of a running octopipe-planner, or A,B,C: planner replicas on one etcd "
               "store (the one that leads is used)");
  flags.String("token", &token, "bearer token the planner requires (prefer --token_file)");
  flags.String("token_file", &token_file, "read the bearer token from this file");
  flags.String("tls_ca", &tls_ca, "CA certificate (PEM) of the planner: connect with TLS");
  flags.String("tls_cert", &tls_cert, "client certificate (PEM) for mutual TLS");
  flags.String("tls_key", &tls_key, "client private key (PEM) for mutual TLS");
}

absl::Status CheckPlannerAddress(const std::string& address) {
  if (address.empty()) return absl::InvalidArgumentError("--planner: HOST:PORT is required");
  if (absl::StartsWith(address, "unix:")) return absl::OkStatus();
  absl::string_view rest = address;
  absl::ConsumePrefix(&rest, "dns:///");
  const size_t colon = rest.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(rest.substr(colon + 1), &port) || port < 1 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--planner: '", address, "' is not HOST:PORT with a port in [1, 65535] (or unix:PATH)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<proto::Planner::Stub>> PlannerConnection::Connect() {
  const std::vector<std::string> addresses = absl::StrSplit(address, ',');
  for (const std::string& a : addresses) {
    if (absl::Status s = CheckPlannerAddress(a); !s.ok()) return s;
  }
  if (!token_file.empty()) {
    auto t = ReadFile("token_file", token_file);
    if (!t.ok()) return t.status();
    token = *t;
    while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  }
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!tls_ca.empty()) {
    grpc::SslCredentialsOptions ssl;
    auto ca = ReadFile("tls_ca", tls_ca);
    if (!ca.ok()) return ca.status();
    if (!absl::StrContains(*ca, "-----BEGIN CERTIFICATE-----")) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tls_ca: '", tls_ca, "' holds no PEM certificate (-----BEGIN CERTIFICATE-----)"));
    }
    ssl.pem_root_certs = *ca;
    if (!tls_cert.empty() || !tls_key.empty()) {
      auto cert = ReadFile("tls_cert", tls_cert);
      if (!cert.ok()) return cert.status();
      auto key = ReadFile("tls_key", tls_key);
      if (!key.ok()) return key.status();
      if (!absl::StrContains(*cert, "-----BEGIN CERTIFICATE-----")) {
        return absl::InvalidArgumentError(
            absl::StrCat("--tls_cert: '", tls_cert, "' holds no PEM certificate"));
      }
      if (!absl::StrContains(*key, "PRIVATE KEY-----")) {
        return absl::InvalidArgumentError(
            absl::StrCat("--tls_key: '", tls_key, "' holds no PEM private key"));
      }
      ssl.pem_cert_chain = *cert;
      ssl.pem_private_key = *key;
    }
    creds = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  if (addresses.size() == 1) {
    return proto::Planner::NewStub(grpc::CreateCustomChannel(address, creds, args));
  }
  // Replicas: use the leader. Ask each in turn (a follower names the leader, which is asked
  // next); a replica that answers at all, even with an error of the caller's, is the leader.
  std::string candidate = addresses.front();
  grpc::Status last;
  for (size_t probe = 0; probe <= addresses.size(); ++probe) {
    auto stub = proto::Planner::NewStub(grpc::CreateCustomChannel(candidate, creds, args));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    proto::ListJobsRequest request;
    request.set_page_size(1);
    proto::ListJobsResponse response;
    last = stub->ListJobs(&ctx, request, &response);
    if (last.error_code() != grpc::StatusCode::UNAVAILABLE &&
        last.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      return stub;
    }
    if (std::optional<std::string> leader = LeaderNamedIn(last.error_message())) {
      candidate = *leader;
    } else {
      auto it = std::find(addresses.begin(), addresses.end(), candidate);
      candidate = it == addresses.end() || it + 1 == addresses.end() ? addresses.front() : *(it + 1);
    }
  }
  return absl::UnavailableError(absl::StrCat("--planner: no leader among ", address,
                                             " answered (last: ", last.error_message(), ")"));
}

std::unique_ptr<grpc::ClientContext> PlannerConnection::Context() const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
  return ctx;
}

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  const auto code = static_cast<absl::StatusCode>(s.error_code());
  return absl::Status(code, absl::StrCat("planner: ", absl::StatusCodeToString(code), ": ",
                                         s.error_message()));
}

}  // namespace octopipe::cli
