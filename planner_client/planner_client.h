// PlannerClient: calls to one octopipe-planner, or to planner replicas on one store
// (--planner=A,B,C), for every client of the planner — the `octopipe` CLI and the worker
// agents alike.
//
// Routes:
//  * kLeader — writes and the leader's own state. The call goes to the replica believed to lead
//    (at first the first listed); a follower answers UNAVAILABLE naming the leader, and the call
//    is made there at once.
//  * kAny — reads every replica answers (followers from the store): the replica that answered
//    last, else the next one.
//  * kSpread — one-shot Plan, which every replica tunes: each call starts at the next replica in
//    turn (the first at a random one, so separate processes spread too), skips replicas whose
//    health is NOT_SERVING (their one-shot queue is full) and goes on to the next when one
//    answers RESOURCE_EXHAUSTED.
// Fail-over: with several replicas, a replica that cannot be reached (checked before the call
// is sent, 1 s at most) is skipped; when a whole round fails with replicas unreachable or
// without a leader (not with full queues: that is answered at once) the client waits (100 ms,
// doubling to 1 s) and tries again, for at most `failover_window_s` (by default enough for a
// lease to expire and a new leader to take office), and the channels reconnect within 1 s of a
// replica coming back. A call that reached a replica and then lost it is repeated elsewhere
// only when it is idempotent; otherwise the error says it may have taken effect. A lone
// planner is asked once: a fresh address nothing listens on fails at once, a planner that was
// reached before and is reconnecting (restarted) gets up to a second first.
// Re-resolution: given dns:/// names (or a `resolve` function), the client resolves them again
// when a round fails with UNAVAILABLE (a lone planner: when its one call does, and the call
// was not sent or is idempotent), at most once per `reresolve_interval_s` over all threads;
// addresses it did not know are added to the replicas and tried at once (the next round starts
// at the first of them), so a replica set whose pods were rescheduled is found again without a
// restart (a lone planner's client then has several replicas and fails over like one with a
// list). Addresses that left DNS stay in the list (their indices stay valid for streams) but
// are marked gone: rounds and FailOver skip them until DNS lists them again (a leader a
// follower names is still tried). One log line says what changed (or why resolving failed).
//
// Thread-safe: calls from several threads share the channels and the routing state.
#ifndef OCTOPIPE_PLANNER_CLIENT_PLANNER_CLIENT_H_
#define OCTOPIPE_PLANNER_CLIENT_PLANNER_CLIENT_H_

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/clock.h"
#include "proto/planner.grpc.pb.h"

namespace octopipe::client {

// kInvalidArgument naming --planner unless `address` is HOST:PORT with a port in [1, 65535]
// (optionally dns:///HOST:PORT) or unix:PATH.
absl::Status CheckPlannerAddress(const std::string& address);

// The replicas a --planner value names: each comma-separated HOST:PORT (or unix:PATH) is one;
// dns:///HOST:PORT is every address HOST resolves to (a DNS name with one record per replica,
// e.g. a Kubernetes headless service), as IP:PORT ([IPv6]:PORT), each once. Resolved now
// (kUnavailable naming the name when it does not resolve); kInvalidArgument as
// CheckPlannerAddress.
absl::StatusOr<std::vector<std::string>> PlannerReplicaAddresses(const std::string& list);

// Resolves the replicas again (every address, as PlannerReplicaAddresses gives them).
using PlannerResolver = std::function<absl::StatusOr<std::vector<std::string>>()>;

struct PlannerClientOptions {
  std::string address;   // HOST:PORT, A,B,C: planner replicas, or dns:///NAME:PORT (every
                         // address NAME resolves to)
  std::string token;     // bearer token ("" = none)
  std::string tls_ca;    // PEM files: tls_ca enables TLS, tls_cert + tls_key mutual TLS
  std::string tls_cert;
  std::string tls_key;
  double timeout_s = 600;           // deadline of each call
  double failover_window_s = 10;    // how long a round of replicas is retried (see above)
  std::ostream* log = nullptr;      // one line per fail-over; null: none
  // Asked again when a round fails (see Re-resolution above); null: PlannerReplicaAddresses
  // (address) when address holds a dns:/// name, else never. The first list is always
  // PlannerReplicaAddresses(address).
  PlannerResolver resolve;
  double reresolve_interval_s = 1;  // the least time between two calls of `resolve`
  // While a call or stream is open, a replica that stops answering HTTP/2 pings for 5 s is
  // given up (the call fails UNAVAILABLE) after at most this long: a stream to a host that
  // died or was cut off without a reset (an agent's HeartbeatStream writes into TCP's buffers
  // without an answer) is noticed in keepalive_s + 5 s, not when TCP gives up (15-30 min).
  double keepalive_s = 10;
  // What the re-resolution interval is measured on (tests: a FakeClock); null: the real clock.
  std::shared_ptr<const Clock> clock;
};

class PlannerClient;

// Checks every address and reads the TLS files (kInvalidArgument naming the flag: --planner,
// --tls_ca, --tls_cert, --tls_key); connects lazily.
absl::StatusOr<std::unique_ptr<PlannerClient>> ConnectPlannerClient(
    const PlannerClientOptions& options);

class PlannerClient {
 public:
  enum class Route { kLeader, kAny, kSpread };

  template <typename Req, typename Resp>
  using Method = grpc::Status (proto::Planner::Stub::*)(grpc::ClientContext*, const Req&, Resp*);

  PlannerClient(std::vector<std::string> addresses,
                std::shared_ptr<grpc::ChannelCredentials> credentials, std::string token,
                double timeout_s, std::ostream* log, double failover_window_s = 10,
                PlannerResolver resolve = nullptr, double reresolve_interval_s = 1,
                double keepalive_s = 10, std::shared_ptr<const Clock> clock = nullptr);

  template <typename Req, typename Resp>
  grpc::Status Call(Route route, Method<Req, Resp> method, const Req& request, Resp* response,
                    bool idempotent = true) {
    return Run(route, idempotent, [&](proto::Planner::Stub& stub, grpc::ClientContext* ctx) {
      return (stub.*method)(ctx, request, response);
    });
  }

  // For streams (WatchPlan): the replica to use first (the last that answered), its stub and
  // address and a context with the token and no deadline. Indices stay valid for the client's
  // lifetime (size() counts gone replicas too).
  size_t current() const;
  // The replica the last write (Route::kLeader) reached: the leader as far as this client knows.
  size_t leader() const;
  proto::Planner::Stub& stub(size_t i);
  std::string address(size_t i) const;
  size_t size() const;
  std::unique_ptr<grpc::ClientContext> StreamContext() const;
  // After a stream on replica `failed` ended with `why` (UNAVAILABLE): the leader it names (a
  // follower refusing), else the next replica that can be reached within the fail-over window
  // (re-resolving as a round does); nullopt when none.
  std::optional<size_t> FailOver(size_t failed, const grpc::Status& why);

 private:
  struct Replica {
    std::string address;
    std::shared_ptr<grpc::Channel> channel;  // created on first use
    std::unique_ptr<proto::Planner::Stub> stub;
    bool gone = false;  // (mu_) left DNS at the last re-resolution: skipped by rounds
  };
  using Attempt = std::function<grpc::Status(proto::Planner::Stub&, grpc::ClientContext*)>;
  grpc::Status Run(Route route, bool idempotent, const Attempt& attempt);
  // A lone planner: asked once. *maybe_sent: false when the call failed unsent (its channel was
  // in TRANSIENT_FAILURE), else true (a failure may have come after the planner got it).
  grpc::Status RunAlone(const Attempt& attempt, bool* maybe_sent);
  // The replicas a round from `start` asks, in order: all but the gone ones.
  std::vector<size_t> RoundFrom(size_t start) const;
  // Resolves again unless there is no resolver or it was asked less than reresolve_interval_s
  // ago: adds new addresses, marks those that left gone (and those back not gone), logs a
  // change. The first replica that is new or back; nullopt when none (or not resolved).
  std::optional<size_t> ReResolve();
  // The replica (its channel created on first use); stays valid for the client's lifetime.
  Replica& At(size_t i);
  bool Reachable(size_t i, double wait_s);
  bool Serving(size_t i);
  size_t IndexOf(const std::string& address);  // appended when not listed
  size_t IndexOfLocked(const std::string& address, bool* appended)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::unique_ptr<grpc::ClientContext> Context() const;
  void Log(const std::string& line) const;

  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  const std::string token_;
  const double timeout_s_;
  const double failover_window_s_;
  std::ostream* const log_;
  const PlannerResolver resolve_;
  const double reresolve_interval_s_;
  const double keepalive_s_;
  const std::shared_ptr<const Clock> clock_;  // null: RealClock::Default()
  absl::Mutex resolve_mu_;
  std::optional<double> last_resolve_s_ ABSL_GUARDED_BY(resolve_mu_);
  mutable absl::Mutex mu_;
  mutable absl::Mutex log_mu_;
  std::vector<std::unique_ptr<Replica>> replicas_ ABSL_GUARDED_BY(mu_);
  size_t leader_ ABSL_GUARDED_BY(mu_) = 0;
  size_t current_ ABSL_GUARDED_BY(mu_) = 0;
  size_t spread_next_ ABSL_GUARDED_BY(mu_) = 0;
  // What the last resolution gave (the first list, with a resolver): an address that leaves it
  // is marked gone; one not in it (a leader a follower named) never is.
  std::set<std::string> resolved_ ABSL_GUARDED_BY(mu_);
};

}  // namespace octopipe::client

#endif  // OCTOPIPE_PLANNER_CLIENT_PLANNER_CLIENT_H_
