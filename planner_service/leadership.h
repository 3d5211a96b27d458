// Leadership: one leader among planner replicas that share an etcd store, through etcd's
// election API on a lease.
//
// Each replica grants itself a lease of `ttl` and keeps it alive every ttl/3. It campaigns in
// election PREFIX/leader with its advertised address as the value; etcd makes the campaign
// return when this replica's key is the oldest, i.e. when it leads. The leader key's creation
// revision fences every store write (EtcdStore::SetFence): once the lease is gone the key is
// gone, and no write from this replica can land any more, whatever its threads still do.
//
// The leader steps down by itself when its lease cannot be renewed: when a keep-alive says the
// lease expired, or when no keep-alive succeeded for a whole ttl (the lease may have expired
// without it hearing so); and when its key is gone from etcd while the lease lives (checked
// at every keep-alive tick, and before taking office: a campaign retried after a timeout can
// return a key that etcd's resign of the timed-out one deletes). leading() is false from a
// ttl after the last successful renewal was sent, even before the step-down, so a paused or
// cut-off leader stops serving as one no later than etcd can hand the leadership to another
// replica. It then reports OnDeposed once and campaigns no more: the planner restarts its
// process to rejoin as a follower with a clean memory (main.cc).
//
// Followers learn the current leader's address (leader_address()) at every keep-alive tick,
// for the UNAVAILABLE answers that point clients to it. Between ticks, with no leader seen,
// leader_address() asks etcd at most once per `leader_query_interval` (it is called for every
// refused call, heartbeats included, and must not turn those into as many etcd queries).
//
// Thread safety: all methods may be called concurrently; the listener is called from the
// leadership thread.
#ifndef OCTOPIPE_PLANNER_SERVICE_LEADERSHIP_H_
#define OCTOPIPE_PLANNER_SERVICE_LEADERSHIP_H_

#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/clock.h"
#include "etcd/client.h"
#include "etcd/election.pb.h"

namespace octopipe::planner {

struct LeadershipOptions {
  std::string election;      // e.g. "/octopipe/leader"
  std::string address;       // this replica's host:port, the election value
  absl::Duration ttl = absl::Seconds(3);
  // With no leader seen, leader_address() asks etcd at most this often (else answers "").
  absl::Duration leader_query_interval = absl::Milliseconds(100);
  const Clock* clock = nullptr;  // for leader_query_interval; null: RealClock::Default()
};

// What a replica can ask at any time: whether it leads, and where the leader is.
class Role {
 public:
  virtual ~Role() = default;
  virtual bool leading() const = 0;
  // The leader's address as last seen (asked of etcd when none was seen, at most once per
  // LeadershipOptions::leader_query_interval; "" when there is none or it was just asked).
  virtual std::string leader_address() const = 0;
};

class Leadership : public Role {
 public:
  class Listener {
   public:
    virtual ~Listener() = default;
    // This replica won the election; `key` fences its writes. Take office (load the state)
    // here: leading() turns true only when this returns OK. An error makes it step down.
    virtual absl::Status OnElected(const v3electionpb::LeaderKey& key) = 0;
    // leading() has just turned true.
    virtual void OnLeading() {}
    // Every keep-alive tick (a third of the TTL), for publishing leading() as it changes with
    // the lease's age.
    virtual void OnTick() {}
    // It no longer leads (or could not take office); called at most once.
    virtual void OnDeposed(const std::string& why) = 0;
  };

  Leadership(std::shared_ptr<etcd::Client> client, LeadershipOptions options, Listener* listener);
  ~Leadership() override;  // Stop()

  // Starts campaigning (a thread); kInvalidArgument for a TTL under 1 s or an empty address.
  absl::Status Start();
  // Stops; a leader resigns (its key is deleted at once, so a follower takes over without
  // waiting for the lease to expire). Idempotent.
  void Stop();

  bool leading() const override;
  std::string leader_address() const override;

 private:
  void Run();
  // One keep-alive; false when the lease is gone or has not been renewed for a whole ttl.
  bool KeepAlive() ABSL_LOCKS_EXCLUDED(mu_);
  void RefreshLeader() ABSL_LOCKS_EXCLUDED(mu_);
  // Whether etcd holds `key` as this replica's campaign created it (its create revision).
  absl::StatusOr<bool> HoldsKey(const v3electionpb::LeaderKey& key) const;
  // While leading: why it no longer does when etcd says its key is gone (nullopt: it holds
  // the key, or etcd did not answer).
  std::optional<std::string> LostKey() const ABSL_LOCKS_EXCLUDED(mu_);
  void Depose(const std::string& why) ABSL_LOCKS_EXCLUDED(mu_);

  const std::shared_ptr<etcd::Client> client_;
  const LeadershipOptions options_;
  Listener* const listener_;
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool leading_ ABSL_GUARDED_BY(mu_) = false;
  bool deposed_ ABSL_GUARDED_BY(mu_) = false;
  int64_t lease_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time renewed_ ABSL_GUARDED_BY(mu_);
  std::string leader_address_ ABSL_GUARDED_BY(mu_);
  // When leader_address() last asked etcd (Clock seconds; none yet: unset).
  mutable std::optional<double> leader_queried_s_ ABSL_GUARDED_BY(mu_);
  v3electionpb::LeaderKey key_ ABSL_GUARDED_BY(mu_);
  std::thread campaign_;
  std::thread keeper_;
};

}  // namespace octopipe::planner

#endif  // OCTOPIPE_PLANNER_SERVICE_LEADERSHIP_H_
