// Connection settings for talking to a running octopipe-planner from the CLI: address, TLS
// (server CA; client certificate for mutual TLS) and the bearer token.
#ifndef OCTOPIPE_CLI_PLANNER_CLIENT_H_
#define OCTOPIPE_CLI_PLANNER_CLIENT_H_

#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "cli/command_line.h"
#include "proto/planner.grpc.pb.h"

namespace octopipe::cli {

// kInvalidArgument naming --planner unless `address` is HOST:PORT with a port in [1, 65535]
// (optionally dns:///HOST:PORT) or unix:PATH.
absl::Status CheckPlannerAddress(const std::string& address);

class PlannerClient;

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

// Calls to one planner, or to planner replicas on one store (--planner=A,B,C).
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
// without a leader (not with full queues: that is answered at once) the client waits (100 ms, doubling
// to 1 s) and tries again, for at most kFailoverWindowS (enough for a lease to expire and a new
// leader to take office), and the channels reconnect within 1 s of a replica coming back. A call
// that reached a replica and then lost it is repeated elsewhere only when it is idempotent;
// otherwise the error says it may have taken effect. A lone planner is asked once (an
// unreachable address fails at once).
class PlannerClient {
 public:
  enum class Route { kLeader, kAny, kSpread };
  static constexpr double kFailoverWindowS = 10;

  template <typename Req, typename Resp>
  using Method = grpc::Status (proto::Planner::Stub::*)(grpc::ClientContext*, const Req&, Resp*);

  PlannerClient(std::vector<std::string> addresses,
                std::shared_ptr<grpc::ChannelCredentials> credentials, std::string token,
                double timeout_s, std::ostream* log);

  template <typename Req, typename Resp>
  grpc::Status Call(Route route, Method<Req, Resp> method, const Req& request, Resp* response,
                    bool idempotent = true) {
    return Run(route, idempotent, [&](proto::Planner::Stub& stub, grpc::ClientContext* ctx) {
      return (stub.*method)(ctx, request, response);
    });
  }

  // For streams (WatchPlan): the replica to use first (the last that answered), its stub and
  // address and a context with the token and no deadline.
  size_t current() const { return current_; }
  proto::Planner::Stub& stub(size_t i);
  const std::string& address(size_t i) const { return addresses_[i]; }
  size_t size() const { return addresses_.size(); }
  std::unique_ptr<grpc::ClientContext> StreamContext() const;
  // After a stream on replica `failed` ended with `why` (UNAVAILABLE): the leader it names (a
  // follower refusing), else the next replica that can be reached within the fail-over window;
  // nullopt when none.
  std::optional<size_t> FailOver(size_t failed, const grpc::Status& why);

 private:
  using Attempt = std::function<grpc::Status(proto::Planner::Stub&, grpc::ClientContext*)>;
  grpc::Status Run(Route route, bool idempotent, const Attempt& attempt);
  bool Reachable(size_t i, double wait_s);
  bool Serving(size_t i);
  size_t IndexOf(const std::string& address);  // appended when not listed
  std::unique_ptr<grpc::ClientContext> Context() const;
  void Log(const std::string& line) const;

  std::vector<std::string> addresses_;
  std::shared_ptr<grpc::ChannelCredentials> credentials_;
  std::string token_;
  double timeout_s_;
  std::ostream* log_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<proto::Planner::Stub>> stubs_;
  size_t leader_ = 0, current_ = 0, spread_next_ = 0;
};

// "--planner: NOT_FOUND: job_id: no job 'x'" style message for a failed call.
absl::Status FromGrpc(const grpc::Status& status);

}  // namespace octopipe::cli

#endif  // OCTOPIPE_CLI_PLANNER_CLIENT_H_
