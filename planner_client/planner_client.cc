#include "planner_client/planner_client.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/leader_hint.h"
#include "proto/health.grpc.pb.h"

namespace octopipe::client {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": cannot read '", path, "'"));
  }
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The PEM text of `path`, which must hold `marker` (kInvalidArgument naming the flag).
absl::StatusOr<std::string> ReadPem(const std::string& flag, const std::string& path,
                                    absl::string_view marker, absl::string_view what) {
  absl::StatusOr<std::string> text = ReadFile(flag, path);
  if (!text.ok()) return text.status();
  if (!absl::StrContains(*text, marker)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": '", path, "' holds no PEM ", what, " (", marker, ")"));
  }
  return text;
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> Credentials(
    const PlannerClientOptions& o) {
  if (o.tls_ca.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  constexpr absl::string_view kCert = "-----BEGIN CERTIFICATE-----";
  absl::StatusOr<std::string> ca = ReadPem("tls_ca", o.tls_ca, kCert, "certificate");
  if (!ca.ok()) return ca.status();
  ssl.pem_root_certs = *ca;
  if (!o.tls_cert.empty() || !o.tls_key.empty()) {
    absl::StatusOr<std::string> cert = ReadPem("tls_cert", o.tls_cert, kCert, "certificate");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPem("tls_key", o.tls_key, "PRIVATE KEY-----",
                                              "private key");
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *cert;
    ssl.pem_private_key = *key;
  }
  return grpc::SslCredentials(ssl);
}

// UNAVAILABLE answers a planner gives before doing anything: a follower refusing a write
// (naming the leader, or saying none is elected yet) or a replica shutting down.
bool RefusedUnexecuted(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE &&
         (LeaderNamedIn(s.error_message()).has_value() ||
          absl::StrContains(s.error_message(), "is a follower") ||
          absl::StrContains(s.error_message(), "shutting down"));
}

void Sleep(double s) {
  std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(s * 1000)));
}

}  // namespace

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

absl::StatusOr<std::vector<std::string>> PlannerReplicaAddresses(const std::string& list) {
  std::vector<std::string> out;
  for (const std::string& a : std::vector<std::string>(absl::StrSplit(list, ','))) {
    if (absl::Status s = CheckPlannerAddress(a); !s.ok()) return s;
    absl::string_view rest = a;
    if (!absl::ConsumePrefix(&rest, "dns:///")) {
      out.push_back(a);
      continue;
    }
    const size_t colon = rest.rfind(':');
    const std::string host(rest.substr(0, colon)), port(rest.substr(colon + 1));
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
      return absl::UnavailableError(absl::StrCat("--planner: '", a, "': cannot resolve '", host,
                                                 "': ", gai_strerror(rc)));
    }
    for (const addrinfo* i = found; i != nullptr; i = i->ai_next) {
      char ip[INET6_ADDRSTRLEN] = {};
      const void* where =
          i->ai_family == AF_INET6
              ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(i->ai_addr)->sin6_addr)
              : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(i->ai_addr)->sin_addr);
      if (inet_ntop(i->ai_family, where, ip, sizeof(ip)) == nullptr) continue;
      const std::string replica = i->ai_family == AF_INET6
                                      ? absl::StrCat("[", ip, "]:", port)
                                      : absl::StrCat(ip, ":", port);
      if (std::find(out.begin(), out.end(), replica) == out.end()) out.push_back(replica);
    }
    freeaddrinfo(found);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<PlannerClient>> ConnectPlannerClient(
    const PlannerClientOptions& o) {
  absl::StatusOr<std::vector<std::string>> addresses = PlannerReplicaAddresses(o.address);
  if (!addresses.ok()) return addresses.status();
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds = Credentials(o);
  if (!creds.ok()) return creds.status();
  PlannerResolver resolve = o.resolve;
  if (!resolve && absl::StrContains(o.address, "dns:///")) {
    resolve = [list = o.address] { return PlannerReplicaAddresses(list); };
  }
  return std::make_unique<PlannerClient>(*addresses, *creds, o.token, o.timeout_s, o.log,
                                         o.failover_window_s, std::move(resolve),
                                         o.reresolve_interval_s, o.keepalive_s, o.clock);
}

PlannerClient::PlannerClient(std::vector<std::string> addresses,
                             std::shared_ptr<grpc::ChannelCredentials> credentials,
                             std::string token, double timeout_s, std::ostream* log,
                             double failover_window_s, PlannerResolver resolve,
                             double reresolve_interval_s, double keepalive_s,
                             std::shared_ptr<const Clock> clock)
    : credentials_(std::move(credentials)),
      token_(std::move(token)),
      timeout_s_(timeout_s),
      failover_window_s_(failover_window_s),
      log_(log),
      resolve_(std::move(resolve)),
      reresolve_interval_s_(reresolve_interval_s),
      keepalive_s_(keepalive_s),
      clock_(std::move(clock)) {
  for (std::string& a : addresses) {
    if (resolve_) resolved_.insert(a);
    replicas_.push_back(std::make_unique<Replica>());
    replicas_.back()->address = std::move(a);
  }
  // Separate processes (one CLI call each) start their one-shot calls at different replicas.
  std::random_device random;
  spread_next_ = replicas_.empty() ? 0 : random() % replicas_.size();
}

PlannerClient::Replica& PlannerClient::At(size_t i) {
  absl::MutexLock lock(&mu_);
  Replica& r = *replicas_[i];
  if (r.stub == nullptr) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(256 << 20);
    // Reconnect within 1 s of a replica coming back (gRPC's default back-off grows to 120 s).
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    // Pings while a call is open (the planner accepts them every 0.5 s or more).
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(keepalive_s_ * 1000));
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
    r.channel = grpc::CreateCustomChannel(r.address, credentials_, args);
    r.stub = proto::Planner::NewStub(r.channel);
  }
  return r;
}

proto::Planner::Stub& PlannerClient::stub(size_t i) { return *At(i).stub; }

std::string PlannerClient::address(size_t i) const {
  absl::MutexLock lock(&mu_);
  return replicas_[i]->address;
}

size_t PlannerClient::size() const {
  absl::MutexLock lock(&mu_);
  return replicas_.size();
}

size_t PlannerClient::current() const {
  absl::MutexLock lock(&mu_);
  return current_;
}

size_t PlannerClient::leader() const {
  absl::MutexLock lock(&mu_);
  return leader_;
}

size_t PlannerClient::IndexOf(const std::string& address) {
  absl::MutexLock lock(&mu_);
  bool appended = false;
  return IndexOfLocked(address, &appended);
}

size_t PlannerClient::IndexOfLocked(const std::string& address, bool* appended) {
  *appended = false;
  for (size_t i = 0; i < replicas_.size(); ++i) {
    if (replicas_[i]->address == address) return i;
  }
  replicas_.push_back(std::make_unique<Replica>());
  replicas_.back()->address = address;
  *appended = true;
  return replicas_.size() - 1;
}

std::vector<size_t> PlannerClient::RoundFrom(size_t start) const {
  absl::MutexLock lock(&mu_);
  const size_t n = replicas_.size();
  std::vector<size_t> order;
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (start + k) % n;
    if (!replicas_[i]->gone) order.push_back(i);
  }
  return order;
}

std::optional<size_t> PlannerClient::ReResolve() {
  if (!resolve_) return std::nullopt;
  {
    absl::MutexLock lock(&resolve_mu_);
    const double now = ClockOrReal(clock_.get()).NowSeconds();
    if (last_resolve_s_.has_value() && now - *last_resolve_s_ < reresolve_interval_s_) {
      return std::nullopt;
    }
    last_resolve_s_ = now;
  }
  // Outside the locks: a DNS lookup may take a while, and other calls go on meanwhile.
  const absl::StatusOr<std::vector<std::string>> found = resolve_();
  if (!found.ok() || found->empty()) {
    Log(absl::StrCat("cannot resolve the planner replicas again (",
                     found.ok() ? "no address" : std::string(found.status().message()),
                     "); keeping the ones known"));
    return std::nullopt;
  }
  const std::set<std::string> now_listed(found->begin(), found->end());
  std::vector<std::string> added, gone, live;
  std::optional<size_t> first_new;
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& a : *found) {
      bool appended = false;
      const size_t i = IndexOfLocked(a, &appended);
      if (appended || replicas_[i]->gone) {
        replicas_[i]->gone = false;
        if (std::find(added.begin(), added.end(), a) == added.end()) added.push_back(a);
        if (!first_new.has_value()) first_new = i;
      }
    }
    for (const auto& r : replicas_) {  // in the replicas' order
      if (resolved_.count(r->address) == 0 || now_listed.count(r->address) != 0) continue;
      r->gone = true;
      gone.push_back(r->address);
    }
    resolved_ = now_listed;
    for (const auto& r : replicas_) {
      if (!r->gone) live.push_back(r->address);
    }
  }
  if (!added.empty() || !gone.empty()) {
    Log(absl::StrCat("planner replicas resolved again: ",
                     added.empty() ? "" : absl::StrCat("new ", absl::StrJoin(added, ", ")),
                     !added.empty() && !gone.empty() ? "; " : "",
                     gone.empty() ? "" : absl::StrCat("gone ", absl::StrJoin(gone, ", ")),
                     " (now ", absl::StrJoin(live, ", "), ")"));
  }
  return first_new;
}

bool PlannerClient::Reachable(size_t i, double wait_s) {
  return At(i).channel->WaitForConnected(
      std::chrono::system_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(wait_s * 1000)));
}

bool PlannerClient::Serving(size_t i) {
  auto health = grpc::health::v1::Health::NewStub(At(i).channel);
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
  if (log_ == nullptr) return;
  absl::MutexLock lock(&log_mu_);
  *log_ << "octopipe: " << line << std::endl;
}

grpc::Status PlannerClient::RunAlone(const Attempt& attempt, bool* maybe_sent) {
  // A channel that was used and lost its planner gets up to a second to reconnect first: a
  // synchronous call that fails fast does not drive the reconnection, and a planner back after
  // a restart should be used again within a second. A fresh channel (IDLE) is not waited for:
  // an address nothing listens on fails at once.
  Replica& r = At(0);
  const grpc_connectivity_state state = r.channel->GetState(/*try_to_connect=*/true);
  if (state != GRPC_CHANNEL_READY && state != GRPC_CHANNEL_IDLE) {
    r.channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(1));
  }
  // A call on a channel in TRANSIENT_FAILURE fails at once, unsent; otherwise (connecting, or
  // connected and then lost) the planner may have got it.
  const grpc_connectivity_state before = r.channel->GetState(/*try_to_connect=*/false);
  *maybe_sent = before != GRPC_CHANNEL_TRANSIENT_FAILURE && before != GRPC_CHANNEL_SHUTDOWN;
  auto ctx = Context();
  return attempt(*r.stub, ctx.get());
}

grpc::Status PlannerClient::Run(Route route, bool idempotent, const Attempt& attempt) {
  std::optional<size_t> fresh;
  if (size() == 1) {
    // A lone planner that cannot be reached: its DNS name may list another address now (a pod
    // rescheduled), which gets the rounds below.
    bool maybe_sent = false;
    const grpc::Status s = RunAlone(attempt, &maybe_sent);
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE ||
        (maybe_sent && !idempotent && !RefusedUnexecuted(s))) {
      return s;
    }
    fresh = ReResolve();
    // Another thread may have just resolved (this one was rate-limited): its new addresses
    // get the rounds too.
    if (!fresh.has_value() && size() == 1) return s;
  }
  const auto window_end =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(failover_window_s_ * 1000));
  size_t start;
  {
    absl::MutexLock lock(&mu_);
    start = route == Route::kLeader ? leader_ : route == Route::kAny ? current_ : spread_next_;
    if (route == Route::kSpread) spread_next_ = (spread_next_ + 1) % replicas_.size();
  }
  if (fresh.has_value()) start = *fresh;
  grpc::Status last(grpc::StatusCode::UNAVAILABLE, "no planner replica was tried");
  double backoff_s = 0.1;
  while (true) {
    // One round: every replica (but the gone) once, in order from `start` (a named leader is
    // tried next).
    std::vector<size_t> order = RoundFrom(start);
    std::set<size_t> tried;
    for (size_t k = 0; k < order.size(); ++k) {
      const size_t i = order[k];
      if (!tried.insert(i).second) continue;
      const std::string where = address(i);
      if (!Reachable(i, 1.0)) {
        last = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            absl::StrCat("planner ", where, " cannot be reached"));
        Log(absl::StrCat("planner ", where, " cannot be reached; trying the next replica"));
        continue;
      }
      if (route == Route::kSpread && !Serving(i)) {
        last = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                            absl::StrCat("planner ", where, " is not serving (its queue is full)"));
        continue;
      }
      auto ctx = Context();
      const grpc::Status s = attempt(stub(i), ctx.get());
      const bool refused = RefusedUnexecuted(s);
      if (s.ok() || (s.error_code() != grpc::StatusCode::UNAVAILABLE &&
                     !(route == Route::kSpread &&
                       s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED))) {
        absl::MutexLock lock(&mu_);
        current_ = i;
        if (route == Route::kLeader) leader_ = i;
        return s;
      }
      last = s;
      if (s.error_code() == grpc::StatusCode::UNAVAILABLE && !refused && !idempotent) {
        return grpc::Status(s.error_code(),
                            absl::StrCat(s.error_message(), " (the planner at ", where,
                                         " was lost during the call, which may have taken "
                                         "effect: check before repeating it)"));
      }
      if (std::optional<std::string> leader = LeaderNamedIn(s.error_message())) {
        const size_t l = IndexOf(*leader);
        if (tried.count(l) == 0) {
          Log(absl::StrCat("planner ", where, " is a follower; the leader is ", *leader));
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
    // New addresses from DNS are tried at once, first.
    if (std::optional<size_t> fresh_now = ReResolve()) {
      start = *fresh_now;
      continue;
    }
    Sleep(backoff_s);
    backoff_s = std::min(1.0, 2 * backoff_s);
    if (route == Route::kLeader) {
      absl::MutexLock lock(&mu_);
      start = leader_;
    }
  }
}

std::optional<size_t> PlannerClient::FailOver(size_t failed, const grpc::Status& why) {
  if (std::optional<std::string> leader = LeaderNamedIn(why.error_message())) {
    const size_t l = IndexOf(*leader);
    absl::MutexLock lock(&mu_);
    current_ = leader_ = l;
    return l;
  }
  const auto window_end =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(failover_window_s_ * 1000));
  double backoff_s = 0.1;
  size_t from = failed + 1;  // the failed replica last
  while (true) {
    for (const size_t i : RoundFrom(from)) {
      if (Reachable(i, 1.0)) {
        absl::MutexLock lock(&mu_);
        current_ = i;
        return i;
      }
    }
    if (std::chrono::steady_clock::now() >= window_end) return std::nullopt;
    if (std::optional<size_t> fresh = ReResolve()) {
      from = *fresh;
      continue;
    }
    Sleep(backoff_s);
    backoff_s = std::min(1.0, 2 * backoff_s);
  }
}

}  // namespace octopipe::client
