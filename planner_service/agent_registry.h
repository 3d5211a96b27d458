// The worker agents the planner knows and a heartbeat failure detector over them.
//
// Each node is alive or dead (failed). It becomes alive by Register (new, or re-registering
// after a failure) and stays alive while Heartbeat arrives within `heartbeat_timeout_s` of the
// previous heartbeat or registration. It becomes dead when DetectFailures finds it silent for
// longer than the timeout, or when MarkFailed reports it (a scheduler's failure report or a
// drain). A dead node stays dead — its heartbeats are refused — until it registers again, so
// a node the planner has re-planned around cannot slip back in unannounced: its return is a
// Register, which tells the caller to re-plan for the join.
//
// Invariants: each alive -> dead transition is reported exactly once, by DetectFailures (for
// timeouts) or by MarkFailed's return value; each unknown/dead -> alive transition by
// Register's return value. Failure is declared only by those calls: a heartbeat that arrives
// late but before DetectFailures runs keeps the node alive.
//
// Time comes from the injected Clock (not owned; must outlive the registry; read under the
// registry's lock), so tests drive the detector with a FakeClock. Nothing is persisted here; the
// service stores AgentRecords and, after a restart, Registers them again (each then has a full
// timeout to heartbeat).
//
// Thread-safe: every method may be called concurrently.
#ifndef OCTOPIPE_PLANNER_SERVICE_AGENT_REGISTRY_H_
#define OCTOPIPE_PLANNER_SERVICE_AGENT_REGISTRY_H_

#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/optional.h"
#include "core/clock.h"
#include "planner_service/store.h"

namespace octopipe {

struct AgentInfo {
  std::string node_id;
  int num_devices = 0;
  std::string address;          // host:port of the agent
  double last_heartbeat_s = 0;  // Clock::NowSeconds of the last heartbeat or registration
  bool alive = false;
  bool drained = false;  // declared dead by MarkDrained (until it registers again)
  int64_t registered_unix_ms = 0;  // as given to Register
};

// The stored form of a node just declared lost (failed or drained) at `lost_unix_ms`: what
// the leader writes so that followers answer ListAgents with it dead (store.h AgentRecord).
AgentRecord LostAgentRecord(const AgentInfo& info, int64_t lost_unix_ms);

// One page of `agents` (sorted by node id) after `page_token` (the last node id of the previous
// page, as next_page_token gives it; empty: the first page), at most `page_size` (0: 500;
// kInvalidArgument naming page_size outside [0, 5000]). Sets next_page_token when more follow.
struct AgentPage {
  std::vector<AgentInfo> agents;
  std::string next_page_token;
};
absl::StatusOr<AgentPage> PageOfAgents(const std::vector<AgentInfo>& agents, int page_size,
                                       const std::string& page_token);

class AgentRegistry {
 public:
  // `heartbeat_timeout_s` > 0: how long a node may be silent before it is declared failed.
  AgentRegistry(const Clock* clock, double heartbeat_timeout_s);

  AgentRegistry(const AgentRegistry&) = delete;
  AgentRegistry& operator=(const AgentRegistry&) = delete;

  // Records the node (replacing its device count and address) as alive, heartbeat now.
  // Returns true when the node was unknown or dead — a join the caller may re-plan for —
  // and false when it was already alive (an agent restart or a retried registration).
  bool Register(const std::string& node_id, int num_devices, const std::string& address,
                int64_t registered_unix_ms = 0);

  // Records a heartbeat now. kNotFound if the node never registered; kFailedPrecondition if
  // it was declared failed (it must Register again).
  absl::Status Heartbeat(const std::string& node_id);

  // Declares dead every alive node whose last heartbeat is more than the timeout ago and
  // returns their ids, sorted. A node is returned only by the call that declares it dead.
  std::vector<std::string> DetectFailures();

  // Declares the node dead. Returns true if it was alive (the caller should re-plan around
  // it); false if it was already dead or is unknown (idempotent; unknown nodes stay unknown).
  bool MarkFailed(const std::string& node_id);

  // MarkFailed for a drain: the node is also remembered as drained (IsDrained) until it
  // registers again, so its agent can be told to leave rather than rejoin.
  bool MarkDrained(const std::string& node_id);
  bool IsDrained(const std::string& node_id) const;

  // Every known node, alive or dead, sorted by node_id.
  std::vector<AgentInfo> List() const;
  int AliveCount() const;
  absl::optional<AgentInfo> Get(const std::string& node_id) const;

  double heartbeat_timeout_s() const { return heartbeat_timeout_s_; }

 private:
  const Clock* const clock_;
  const double heartbeat_timeout_s_;
  mutable absl::Mutex mu_;
  std::map<std::string, AgentInfo> agents_ ABSL_GUARDED_BY(mu_);  // ordered: sorted outputs
};

}  // namespace octopipe

#endif  // OCTOPIPE_PLANNER_SERVICE_AGENT_REGISTRY_H_
