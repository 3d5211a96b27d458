#include "planner_service/leadership.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "logging/logging.h"

namespace octopipe::planner {

Leadership::Leadership(std::shared_ptr<etcd::Client> client, LeadershipOptions options,
                       Listener* listener)
    : client_(std::move(client)), options_(std::move(options)), listener_(listener) {}

Leadership::~Leadership() { Stop(); }

absl::Status Leadership::Start() {
  if (options_.ttl < absl::Seconds(1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--leader_ttl_s must be >= 1 (etcd leases are whole seconds), got ",
        absl::FormatDuration(options_.ttl)));
  }
  if (options_.address.empty()) {
    return absl::InvalidArgumentError("leadership: this replica's address is empty");
  }
  absl::StatusOr<int64_t> lease =
      client_->LeaseGrant(absl::ToInt64Seconds(absl::Ceil(options_.ttl, absl::Seconds(1))));
  if (!lease.ok()) return lease.status();
  {
    absl::MutexLock lock(&mu_);
    lease_ = *lease;
    renewed_ = absl::Now();
  }
  keeper_ = std::thread([this] {
    absl::MutexLock lock(&mu_);
    while (!mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.ttl / 3)) {
      mu_.Unlock();
      const bool alive = KeepAlive();
      // Only with the lease renewed: with etcd unreachable the lease's rule decides, at once.
      const std::optional<std::string> lost = alive ? LostKey() : std::nullopt;
      RefreshLeader();
      listener_->OnTick();
      if (!alive) Depose("the lease could not be renewed (paused or cut off from etcd?)");
      if (lost) Depose(*lost);
      mu_.Lock();
    }
  });
  campaign_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

void Leadership::Run() {
  auto log = logging::Logger("leader");
  while (true) {
    int64_t lease;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ || deposed_) return;
      lease = lease_;
    }
    // Bounded, so that Stop is not held up for long; campaigning again keeps the same key —
    // unless etcd resigns the timed-out campaign's key (the server does, when the call's
    // context ends) after the next campaign found it: that campaign then returns a key etcd no
    // longer holds, and leading on it would make two leaders. So the key is checked first.
    absl::StatusOr<v3electionpb::LeaderKey> key =
        client_->Campaign(options_.election, lease, options_.address, options_.ttl);
    if (!key.ok()) {
      if (key.status().code() != absl::StatusCode::kUnavailable) {
        log->warn("campaign in {}: {}", options_.election, std::string(key.status().message()));
        absl::MutexLock lock(&mu_);
        mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.ttl / 3);
      }
      continue;
    }
    if (absl::StatusOr<bool> held = HoldsKey(*key); !held.ok() || !*held) {
      log->warn("campaign in {} returned key {} (revision {}) that etcd {}; campaigning again",
                options_.election, key->key(), key->rev(),
                held.ok() ? "no longer holds" : std::string(held.status().message()));
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.ttl / 3);
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ || deposed_) return;
      key_ = *key;
      leader_address_ = options_.address;
    }
    logging::Event(*log, spdlog::level::info, "elected leader",
                   {{"election", options_.election},
                    {"key", key->key()},
                    {"revision", key->rev()},
                    {"address", options_.address}});
    // Office first (fence, state), then leading(): no call is served as the leader's before
    // the state is loaded.
    if (absl::Status s = listener_->OnElected(*key); !s.ok()) {
      Depose(absl::StrCat("taking office failed: ", s.message()));
      return;
    }
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ || deposed_) return;
      leading_ = true;
    }
    listener_->OnLeading();
    return;
  }
}

bool Leadership::KeepAlive() {
  int64_t lease;
  absl::Time renewed;
  {
    absl::MutexLock lock(&mu_);
    lease = lease_;
    renewed = renewed_;
  }
  // The lease runs for a TTL from when etcd renewed it, which is after this moment.
  const absl::Time sent = absl::Now();
  absl::StatusOr<int64_t> ttl = client_->LeaseKeepAliveOnce(lease);
  if (ttl.ok()) {
    absl::MutexLock lock(&mu_);
    renewed_ = sent;
    return true;
  }
  if (ttl.status().code() == absl::StatusCode::kNotFound) return false;
  // etcd did not answer: the lease may still be valid, for at most a ttl after the last renewal.
  return absl::Now() - renewed < options_.ttl;
}

absl::StatusOr<bool> Leadership::HoldsKey(const v3electionpb::LeaderKey& key) const {
  etcdserverpb::RangeRequest range;
  range.set_key(key.key());
  range.set_keys_only(true);
  absl::StatusOr<etcdserverpb::RangeResponse> r = client_->Range(range);
  if (!r.ok()) return r.status();
  return r->kvs_size() == 1 && r->kvs(0).create_revision() == key.rev();
}

std::optional<std::string> Leadership::LostKey() const {
  v3electionpb::LeaderKey key;
  {
    absl::MutexLock lock(&mu_);
    if (!leading_) return std::nullopt;
    key = key_;
  }
  absl::StatusOr<bool> held = HoldsKey(key);
  if (!held.ok() || *held) return std::nullopt;  // unanswered: the lease's rule decides
  return absl::StrCat("the leader key ", key.key(), " (revision ", key.rev(),
                      ") is gone from etcd; another replica may lead");
}

void Leadership::RefreshLeader() {
  absl::StatusOr<etcdserverpb::KeyValue> leader = client_->Leader(options_.election);
  absl::MutexLock lock(&mu_);
  if (leader.ok()) {
    leader_address_ = leader->value();
  } else if (leader.status().code() == absl::StatusCode::kNotFound) {
    leader_address_.clear();
  }
}

void Leadership::Depose(const std::string& why) {
  bool was_leading;
  {
    absl::MutexLock lock(&mu_);
    if (deposed_ || stopping_) return;
    deposed_ = true;
    was_leading = leading_;
    leading_ = false;
  }
  logging::Event(*logging::Logger("leader"), spdlog::level::err,
                 was_leading ? "stepped down" : "left the election",
                 {{"election", options_.election}, {"why", why}});
  listener_->OnDeposed(why);
}

void Leadership::Stop() {
  v3electionpb::LeaderKey key;
  bool was_leading;
  int64_t lease;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    was_leading = leading_;
    leading_ = false;
    key = key_;
    lease = lease_;
  }
  if (was_leading) client_->Resign(key).IgnoreError();
  if (lease != 0) client_->LeaseRevoke(lease).IgnoreError();
  if (keeper_.joinable()) keeper_.join();
  if (campaign_.joinable()) campaign_.join();
}

bool Leadership::leading() const {
  absl::MutexLock lock(&mu_);
  // Not past the lease's end as this process can know it, even while a renewal is in flight:
  // etcd may let the lease go a TTL after the last renewal was sent, and another replica may
  // lead from then on.
  return leading_ && absl::Now() - renewed_ < options_.ttl;
}

std::string Leadership::leader_address() const {
  {
    absl::MutexLock lock(&mu_);
    if (!leader_address_.empty()) return leader_address_;
    // Not seen since the last tick (a leader was just elected, or none is): ask etcd now,
    // unless it was asked within the interval.
    const double now = ClockOrReal(options_.clock).NowSeconds();
    if (leader_queried_s_ &&
        now - *leader_queried_s_ < absl::ToDoubleSeconds(options_.leader_query_interval)) {
      return std::string();
    }
    leader_queried_s_ = now;
  }
  const_cast<Leadership*>(this)->RefreshLeader();
  absl::MutexLock lock(&mu_);
  return leader_address_;
}

}  // namespace octopipe::planner
