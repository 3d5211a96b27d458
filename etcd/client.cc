#include "etcd/client.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"

namespace octopipe::etcd {
namespace {

// The pause after every member was tried once without an answer.
constexpr absl::Duration kRoundBackoff = absl::Milliseconds(100);

std::chrono::system_clock::time_point DeadlineIn(absl::Duration d) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(d);
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseEndpoints(absl::string_view list) {
  std::vector<std::string> out;
  for (absl::string_view entry : absl::StrSplit(list, ',')) {
    const size_t colon = entry.rfind(':');
    absl::string_view host = colon == absl::string_view::npos ? entry : entry.substr(0, colon);
    int port = 0;
    if (entry.empty() || colon == absl::string_view::npos || host.empty() ||
        (host.find(':') != absl::string_view::npos &&
         !(host.front() == '[' && host.back() == ']')) ||
        !absl::SimpleAtoi(entry.substr(colon + 1), &port) || port < 1 || port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("etcd endpoint '", entry,
                       "' is not HOST:PORT (port 1..65535, IPv6 hosts in brackets); in '", list,
                       "'"));
    }
    out.emplace_back(entry);
  }
  return out;
}

std::string PrefixEnd(absl::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

struct Client::Member {
  std::string endpoint;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<etcdserverpb::KV::Stub> kv;
  std::unique_ptr<etcdserverpb::Lease::Stub> lease;
  std::unique_ptr<v3electionpb::Election::Stub> election;
};

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(std::vector<std::string> endpoints,
                                                        ClientOptions options) {
  if (endpoints.empty()) return absl::InvalidArgumentError("etcd: no endpoints given");
  std::vector<std::unique_ptr<Member>> members;
  for (const std::string& e : endpoints) {
    grpc::ChannelArguments args;
    // Reconnect soon after a member returns. GRPC_ARG_MIN_RECONNECT_BACKOFF_MS is also the
    // connect timeout: 1 s bounds a connection attempt that a starting member accepted but does
    // not answer yet (the default, 20 s, held the first call to a restarted member that long).
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 1000);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    args.SetMaxReceiveMessageSize(64 << 20);
    std::shared_ptr<grpc::Channel> channel =
        grpc::CreateCustomChannel(e, grpc::InsecureChannelCredentials(), args);
    auto m = std::make_unique<Member>();
    m->endpoint = e;
    m->channel = channel;
    m->kv = etcdserverpb::KV::NewStub(channel);
    m->lease = etcdserverpb::Lease::NewStub(channel);
    m->election = v3electionpb::Election::NewStub(channel);
    members.push_back(std::move(m));
  }
  return absl::WrapUnique(new Client(std::move(endpoints), std::move(members), options));
}

Client::Client(std::vector<std::string> endpoints, std::vector<std::unique_ptr<Member>> members,
               ClientOptions options)
    : endpoints_(std::move(endpoints)), members_(std::move(members)), options_(options) {}

Client::~Client() = default;

template <typename Response, typename Call>
absl::StatusOr<Response> Client::Invoke(const char* what, absl::Duration timeout, Call call) {
  const absl::Time deadline = absl::Now() + timeout;
  size_t index = current_.load(std::memory_order_relaxed);
  absl::Status last;
  bool unanswered = false;  // a request reached a member that did not answer
  for (size_t attempt = 0;; ++attempt, index = (index + 1) % members_.size()) {
    if (attempt > 0 && attempt % members_.size() == 0) {
      // Every member was tried: back off a little before the next round (a member that lost
      // its leader answers again after the next election, about one election timeout).
      absl::SleepFor(std::min(kRoundBackoff, deadline - absl::Now()));
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    Member& m = *members_[index];
    // Connect first, within connect_timeout: a synchronous call that fails fast does not drive
    // the channel's connection attempt (nothing polls it between calls), so a member that was
    // down would otherwise stay unused long after it is back.
    const absl::Duration connect = std::min(left, options_.connect_timeout);
    if (m.channel->GetState(/*try_to_connect=*/true) != GRPC_CHANNEL_READY &&
        !m.channel->WaitForConnected(DeadlineIn(connect))) {
      last = absl::UnavailableError(absl::StrCat("etcd ", m.endpoint, ": ", what,
                                                 ": not connected within ",
                                                 absl::FormatDuration(connect)));
      continue;
    }
    grpc::ClientContext context;
    const absl::Duration attempt_left = deadline - absl::Now();
    context.set_deadline(DeadlineIn(std::min(attempt_left, options_.attempt_timeout)));
    Response response;
    const grpc::Status s = call(m, &context, &response);
    if (s.ok()) {
      current_.store(index, std::memory_order_relaxed);
      return response;
    }
    const std::string message = s.error_message().empty() ? "(no message)" : s.error_message();
    if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      // No answer: the member may wait for a leader that is gone (its proposal sits in the log
      // until an election) or have no quorum. Try another member while time is left; either
      // way a write may be applied later, so callers keep their writes idempotent.
      unanswered = true;
      last = absl::UnavailableError(absl::StrCat(
          "etcd ", m.endpoint, ": ", what, ": no answer within ",
          absl::FormatDuration(std::min(attempt_left, options_.attempt_timeout)),
          " (no quorum?)"));
      continue;
    }
    last = absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        absl::StrCat("etcd ", m.endpoint, ": ", what, ": ", message));
    // UNAVAILABLE: the member is down or has no leader right now; try another.
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE) return last;
  }
  return absl::UnavailableError(absl::StrCat("no etcd member of ", absl::StrJoin(endpoints_, ","),
                                             " answered ", what, " within ",
                                             absl::FormatDuration(timeout), "; last: ",
                                             last.message(),
                                             unanswered ? "; a write may still be applied when "
                                                          "the cluster recovers"
                                                        : ""));
}

absl::StatusOr<etcdserverpb::RangeResponse> Client::Range(
    const etcdserverpb::RangeRequest& request) {
  return Invoke<etcdserverpb::RangeResponse>(
      "Range", options_.call_timeout, [&](Member& m, grpc::ClientContext* c, auto* r) {
        return m.kv->Range(c, request, r);
      });
}

absl::StatusOr<etcdserverpb::PutResponse> Client::Put(const etcdserverpb::PutRequest& request) {
  return Invoke<etcdserverpb::PutResponse>(
      "Put", options_.call_timeout,
      [&](Member& m, grpc::ClientContext* c, auto* r) { return m.kv->Put(c, request, r); });
}

absl::StatusOr<etcdserverpb::DeleteRangeResponse> Client::DeleteRange(
    const etcdserverpb::DeleteRangeRequest& request) {
  return Invoke<etcdserverpb::DeleteRangeResponse>(
      "DeleteRange", options_.call_timeout, [&](Member& m, grpc::ClientContext* c, auto* r) {
        return m.kv->DeleteRange(c, request, r);
      });
}

absl::StatusOr<etcdserverpb::TxnResponse> Client::Txn(const etcdserverpb::TxnRequest& request) {
  return Invoke<etcdserverpb::TxnResponse>(
      "Txn", options_.call_timeout,
      [&](Member& m, grpc::ClientContext* c, auto* r) { return m.kv->Txn(c, request, r); });
}

absl::StatusOr<int64_t> Client::LeaseGrant(int64_t ttl_seconds) {
  if (ttl_seconds < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("etcd lease TTL must be >= 1 s, got ", ttl_seconds));
  }
  etcdserverpb::LeaseGrantRequest request;
  request.set_ttl(ttl_seconds);
  absl::StatusOr<etcdserverpb::LeaseGrantResponse> r =
      Invoke<etcdserverpb::LeaseGrantResponse>(
          "LeaseGrant", options_.call_timeout, [&](Member& m, grpc::ClientContext* c, auto* out) {
            return m.lease->LeaseGrant(c, request, out);
          });
  if (!r.ok()) return r.status();
  if (!r->error().empty()) {
    return absl::UnavailableError(absl::StrCat("etcd LeaseGrant: ", r->error()));
  }
  return r->id();
}

absl::Status Client::LeaseRevoke(int64_t lease) {
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(lease);
  return Invoke<etcdserverpb::LeaseRevokeResponse>(
             "LeaseRevoke", options_.call_timeout,
             [&](Member& m, grpc::ClientContext* c, auto* r) {
               return m.lease->LeaseRevoke(c, request, r);
             })
      .status();
}

absl::StatusOr<int64_t> Client::LeaseKeepAliveOnce(int64_t lease) {
  absl::StatusOr<etcdserverpb::LeaseKeepAliveResponse> r =
      Invoke<etcdserverpb::LeaseKeepAliveResponse>(
          "LeaseKeepAlive", options_.call_timeout,
          [&](Member& m, grpc::ClientContext* c, etcdserverpb::LeaseKeepAliveResponse* out) {
            auto stream = m.lease->LeaseKeepAlive(c);
            etcdserverpb::LeaseKeepAliveRequest request;
            request.set_id(lease);
            if (stream->Write(request)) stream->Read(out);
            stream->WritesDone();
            grpc::Status s = stream->Finish();
            // A stream whose one answer arrived is a success even if closing it was not.
            if (out->id() == lease) return grpc::Status::OK;
            return s.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "no keep-alive answer")
                          : s;
          });
  if (!r.ok()) return r.status();
  if (r->ttl() <= 0) {
    return absl::NotFoundError(absl::StrCat("etcd lease ", absl::Hex(lease), " has expired"));
  }
  return r->ttl();
}

absl::StatusOr<v3electionpb::LeaderKey> Client::Campaign(absl::string_view name, int64_t lease,
                                                          absl::string_view value,
                                                          absl::Duration timeout) {
  v3electionpb::CampaignRequest request;
  request.set_name(std::string(name));
  request.set_lease(lease);
  request.set_value(std::string(value));
  absl::StatusOr<v3electionpb::CampaignResponse> r = Invoke<v3electionpb::CampaignResponse>(
      "Campaign", timeout, [&](Member& m, grpc::ClientContext* c, auto* out) {
        return m.election->Campaign(c, request, out);
      });
  if (!r.ok()) return r.status();
  return r->leader();
}

absl::StatusOr<etcdserverpb::KeyValue> Client::Leader(absl::string_view name) {
  v3electionpb::LeaderRequest request;
  request.set_name(std::string(name));
  absl::StatusOr<v3electionpb::LeaderResponse> r = Invoke<v3electionpb::LeaderResponse>(
      "Leader", options_.call_timeout, [&](Member& m, grpc::ClientContext* c, auto* out) {
        return m.election->Leader(c, request, out);
      });
  if (!r.ok()) {
    // etcd answers an election without a leader with code UNKNOWN, "election: no leader".
    if (absl::StrContains(r.status().message(), "election: no leader")) {
      return absl::NotFoundError(absl::StrCat("etcd election '", name, "' has no leader"));
    }
    return r.status();
  }
  return r->kv();
}

absl::Status Client::Resign(const v3electionpb::LeaderKey& leader) {
  v3electionpb::ResignRequest request;
  *request.mutable_leader() = leader;
  return Invoke<v3electionpb::ResignResponse>(
             "Resign", options_.call_timeout,
             [&](Member& m, grpc::ClientContext* c, auto* r) {
               return m.election->Resign(c, request, r);
             })
      .status();
}

}  // namespace octopipe::etcd
