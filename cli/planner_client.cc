#include "cli/planner_client.h"

#include <optional>

#include <algorithm>
#include <chrono>
#include <random>
#include <set>
#include <thread>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/leader_hint.h"
#include "proto/health.grpc.pb.h"

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

absl::StatusOr<std::unique_ptr<PlannerClient>> PlannerConnection::Connect(std::ostream* log) {
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
  return std::make_unique<PlannerClient>(addresses, creds, token, timeout_s, log);
}

PlannerClient::PlannerClient(std::vector<std::string> addresses,
                             std::shared_ptr<grpc::ChannelCredentials> credentials,
                             std::string token, double timeout_s, std::ostream* log)
    : addresses_(std::move(addresses)),
      credentials_(std::move(credentials)),
      token_(std::move(token)),
      timeout_s_(timeout_s),
      log_(log) {
  channels_.resize(addresses_.size());
  stubs_.resize(addresses_.size());
  // Separate processes (one CLI call each) start their one-shot calls at different replicas.
  std::random_device random;
  spread_next_ = addresses_.empty() ? 0 : random() % addresses_.size();
}

proto::Planner::Stub& PlannerClient::stub(size_t i) {
  if (stubs_[i] == nullptr) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(256 << 20);
    // Reconnect within 1 s of a replica coming back (gRPC's default back-off grows to 120 s).
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    channels_[i] = grpc::CreateCustomChannel(addresses_[i], credentials_, args);
    stubs_[i] = proto::Planner::NewStub(channels_[i]);
  }
  return *stubs_[i];
}

size_t PlannerClient::IndexOf(const std::string& address) {
  auto it = std::find(addresses_.begin(), addresses_.end(), address);
  if (it != addresses_.end()) return static_cast<size_t>(it - addresses_.begin());
  addresses_.push_back(address);
  channels_.emplace_back();
  stubs_.emplace_back();
  return addresses_.size() - 1;
}

bool PlannerClient::Reachable(size_t i, double wait_s) {
  stub(i);
  return channels_[i]->WaitForConnected(
      std::chrono::system_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(wait_s * 1000)));
}

bool PlannerClient::Serving(size_t i) {
  stub(i);
  auto health = grpc::health::v1::Health::NewStub(channels_[i]);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status s = health->Check(&ctx, request, &response);
  // A planner without the health service (none today) counts as serving.
  if (s.error_code() == grpc::StatusCode::UNIMPLEMENTED) return true;
  return s.ok() && response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

std::unique_ptr<grpc::ClientContext> PlannerClient::Context() const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(static_cast<int64_t>(timeout_s_ * 1000)));
  if (!token_.empty()) ctx->AddMetadata("authorization", "Bearer " + token_);
  return ctx;
}

std::unique_ptr<grpc::ClientContext> PlannerClient::StreamContext() const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  if (!token_.empty()) ctx->AddMetadata("authorization", "Bearer " + token_);
  return ctx;
}

void PlannerClient::Log(const std::string& line) const {
  if (log_ != nullptr) *log_ << "octopipe: " << line << std::endl;
}

namespace {

// UNAVAILABLE answers a planner gives before doing anything: a follower refusing a write
// (naming the leader, or saying none is elected yet) or a replica shutting down.
bool RefusedUnexecuted(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE &&
         (LeaderNamedIn(s.error_message()).has_value() ||
          absl::StrContains(s.error_message(), "is a follower") ||
          absl::StrContains(s.error_message(), "shutting down"));
}

}  // namespace

grpc::Status PlannerClient::Run(Route route, bool idempotent, const Attempt& attempt) {
  const size_t n = addresses_.size();
  if (n == 1) {
    auto ctx = Context();
    return attempt(stub(0), ctx.get());
  }
  const auto window_end = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(static_cast<int64_t>(kFailoverWindowS * 1000));
  size_t start = route == Route::kLeader ? leader_ : route == Route::kAny ? current_ : spread_next_;
  if (route == Route::kSpread) spread_next_ = (spread_next_ + 1) % n;
  grpc::Status last(grpc::StatusCode::UNAVAILABLE, "no planner replica was tried");
  double backoff_s = 0.1;
  for (int round = 0;; ++round) {
    // One round: every replica once, in order from `start` (a named leader is tried next).
    std::vector<size_t> order;
    for (size_t k = 0; k < addresses_.size(); ++k) order.push_back((start + k) % addresses_.size());
    std::set<size_t> tried;
    for (size_t k = 0; k < order.size(); ++k) {
      const size_t i = order[k];
      if (!tried.insert(i).second) continue;
      if (!Reachable(i, 1.0)) {
        last = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            absl::StrCat("planner ", addresses_[i], " cannot be reached"));
        Log(absl::StrCat("planner ", addresses_[i], " cannot be reached; trying the next replica"));
        continue;
      }
      if (route == Route::kSpread && !Serving(i)) {
        last = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                            absl::StrCat("planner ", addresses_[i], " is not serving (its queue is full)"));
        continue;
      }
      auto ctx = Context();
      const grpc::Status s = attempt(stub(i), ctx.get());
      const bool refused = RefusedUnexecuted(s);
      if (s.ok() || (s.error_code() != grpc::StatusCode::UNAVAILABLE &&
                     !(route == Route::kSpread &&
                       s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED))) {
        current_ = i;
        if (route == Route::kLeader) leader_ = i;
        return s;
      }
      last = s;
      if (s.error_code() == grpc::StatusCode::UNAVAILABLE && !refused && !idempotent) {
        return grpc::Status(s.error_code(),
                            absl::StrCat(s.error_message(), " (the planner at ", addresses_[i],
                                         " was lost during the call, which may have taken "
                                         "effect: check before repeating it)"));
      }
      if (std::optional<std::string> leader = LeaderNamedIn(s.error_message())) {
        const size_t l = IndexOf(*leader);
        if (tried.count(l) == 0) {
          Log(absl::StrCat("planner ", addresses_[i], " is a follower; the leader is ", *leader));
          order.insert(order.begin() + static_cast<std::ptrdiff_t>(k) + 1, l);
        }
      }
    }
    // Only replicas that cannot be reached or have no leader yet are waited for; full queues
    // are the caller's to hear about at once.
    if (last.error_code() != grpc::StatusCode::UNAVAILABLE ||
        std::chrono::steady_clock::now() >= window_end) {
      return last;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(backoff_s * 1000)));
    backoff_s = std::min(1.0, 2 * backoff_s);
    if (route == Route::kLeader) start = leader_;
  }
}

std::optional<size_t> PlannerClient::FailOver(size_t failed, const grpc::Status& why) {
  if (std::optional<std::string> leader = LeaderNamedIn(why.error_message())) {
    current_ = leader_ = IndexOf(*leader);
    return current_;
  }
  const auto window_end = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(static_cast<int64_t>(kFailoverWindowS * 1000));
  double backoff_s = 0.1;
  while (true) {
    for (size_t k = 1; k <= addresses_.size(); ++k) {
      const size_t i = (failed + k) % addresses_.size();
      if (Reachable(i, 1.0)) {
        current_ = i;
        return i;
      }
    }
    if (std::chrono::steady_clock::now() >= window_end) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(backoff_s * 1000)));
    backoff_s = std::min(1.0, 2 * backoff_s);
  }
}

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  const auto code = static_cast<absl::StatusCode>(s.error_code());
  return absl::Status(code, absl::StrCat("planner: ", absl::StatusCodeToString(code), ": ",
                                         s.error_message()));
}

}  // namespace octopipe::cli
