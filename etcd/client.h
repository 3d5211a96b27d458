// A small client for etcd's v3 gRPC API: key-value reads and transactions, leases and the
// election service, over one or more cluster members.
//
// Members: calls go to one member at a time (any member serves reads and forwards writes to
// the raft leader). A member that is not connected within ClientOptions::connect_timeout, or
// answers UNAVAILABLE (down, refusing connections, no leader during an election) or does not
// answer within ClientOptions::attempt_timeout, is skipped for the next one, round after round
// (100 ms apart) until the call's timeout; the member that answers becomes the current one.
// A call that runs out of time fails with kUnavailable saying so. Since an unanswered write
// may still be applied later (it can sit in the log of a member without quorum) and a retried
// one may be applied twice, callers make writes idempotent or conditional. Every error names the member and the operation, e.g.
// "etcd 127.0.0.1:2379: Txn: etcdserver: request timed out".
//
// Channels reconnect with a short back-off (100 ms initial, 1 s at most) so that a member
// that comes back is used again within about a second.
//
// Thread safety: all methods may be called concurrently.
#ifndef OCTOPIPE_ETCD_CLIENT_H_
#define OCTOPIPE_ETCD_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "etcd/election.grpc.pb.h"
#include "etcd/rpc.grpc.pb.h"

namespace octopipe::etcd {

// "HOST:PORT[,HOST:PORT...]" (IPv6 hosts in brackets) as a list; kInvalidArgument naming the
// bad entry (empty, no port, port not in 1..65535).
absl::StatusOr<std::vector<std::string>> ParseEndpoints(absl::string_view list);

// The end of the key range holding every key that starts with `prefix` (etcd's range_end).
std::string PrefixEnd(absl::string_view prefix);

struct ClientOptions {
  // Deadline of each key-value and lease call, across every member it tries.
  absl::Duration call_timeout = absl::Seconds(5);
  // How long one member may take to answer before the call tries the next one.
  absl::Duration attempt_timeout = absl::Seconds(2);
  // How long a call waits for a member it is not connected to before trying the next one.
  absl::Duration connect_timeout = absl::Seconds(1);
};

class Client {
 public:
  // Channels to `endpoints` (from ParseEndpoints; at least one). Connecting is lazy: a
  // cluster that is down makes the first call fail, not Connect.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(std::vector<std::string> endpoints,
                                                         ClientOptions options = {});

  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const std::vector<std::string>& endpoints() const { return endpoints_; }

  absl::StatusOr<etcdserverpb::RangeResponse> Range(const etcdserverpb::RangeRequest& request);
  absl::StatusOr<etcdserverpb::PutResponse> Put(const etcdserverpb::PutRequest& request);
  absl::StatusOr<etcdserverpb::DeleteRangeResponse> DeleteRange(
      const etcdserverpb::DeleteRangeRequest& request);
  absl::StatusOr<etcdserverpb::TxnResponse> Txn(const etcdserverpb::TxnRequest& request);

  // A lease of `ttl_seconds` (>= 1); its id.
  absl::StatusOr<int64_t> LeaseGrant(int64_t ttl_seconds);
  absl::Status LeaseRevoke(int64_t lease);
  // Renews the lease once; its remaining TTL in seconds, or kNotFound when it has expired.
  absl::StatusOr<int64_t> LeaseKeepAliveOnce(int64_t lease);

  // Blocks until `value` leads election `name` on `lease` (or `timeout` passes: kUnavailable
  // with "campaign timed out"; or the lease ends: an error).
  absl::StatusOr<v3electionpb::LeaderKey> Campaign(absl::string_view name, int64_t lease,
                                                   absl::string_view value,
                                                   absl::Duration timeout);
  // The election's current leader key-value; kNotFound when there is none.
  absl::StatusOr<etcdserverpb::KeyValue> Leader(absl::string_view name);
  absl::Status Resign(const v3electionpb::LeaderKey& leader);

 private:
  struct Member;
  Client(std::vector<std::string> endpoints, std::vector<std::unique_ptr<Member>> members,
         ClientOptions options);

  // Runs call(member, context) on the current member, failing over on UNAVAILABLE as the
  // header describes; `what` names the operation in errors.
  template <typename Response, typename Call>
  absl::StatusOr<Response> Invoke(const char* what, absl::Duration timeout, Call call);

  const std::vector<std::string> endpoints_;
  const std::vector<std::unique_ptr<Member>> members_;
  const ClientOptions options_;
  std::atomic<size_t> current_{0};
};

}  // namespace octopipe::etcd

#endif  // OCTOPIPE_ETCD_CLIENT_H_
