#include "planner_service/agent_registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace octopipe {

AgentRegistry::AgentRegistry(const Clock* clock, double heartbeat_timeout_s)
    : clock_(clock), heartbeat_timeout_s_(heartbeat_timeout_s) {}

AgentRecord LostAgentRecord(const AgentInfo& info, int64_t lost_unix_ms) {
  return AgentRecord{info.node_id, info.num_devices, info.address, info.registered_unix_ms,
                     lost_unix_ms};
}

bool AgentRegistry::Register(const std::string& node_id, int num_devices,
                             const std::string& address, int64_t registered_unix_ms) {
  absl::MutexLock lock(&mu_);
  const double now = clock_->NowSeconds();
  auto [it, inserted] = agents_.try_emplace(node_id);
  AgentInfo& info = it->second;
  const bool joined = inserted || !info.alive;
  info.node_id = node_id;
  info.num_devices = num_devices;
  info.address = address;
  info.last_heartbeat_s = now;
  info.alive = true;
  info.drained = false;
  info.registered_unix_ms = registered_unix_ms;
  return joined;
}

absl::Status AgentRegistry::Heartbeat(const std::string& node_id) {
  absl::MutexLock lock(&mu_);
  const double now = clock_->NowSeconds();
  auto it = agents_.find(node_id);
  if (it == agents_.end()) {
    return absl::NotFoundError(absl::StrCat("node '", node_id, "' is not registered"));
  }
  if (!it->second.alive) {
    return absl::FailedPreconditionError(
        absl::StrCat("node '", node_id, "' was declared failed; register it again"));
  }
  it->second.last_heartbeat_s = now;
  return absl::OkStatus();
}

std::vector<std::string> AgentRegistry::DetectFailures() {
  std::vector<std::string> failed;
  absl::MutexLock lock(&mu_);
  const double now = clock_->NowSeconds();
  for (auto& [node_id, info] : agents_) {
    if (info.alive && now - info.last_heartbeat_s > heartbeat_timeout_s_) {
      info.alive = false;
      failed.push_back(node_id);
    }
  }
  return failed;
}

bool AgentRegistry::MarkFailed(const std::string& node_id) {
  absl::MutexLock lock(&mu_);
  auto it = agents_.find(node_id);
  if (it == agents_.end() || !it->second.alive) return false;
  it->second.alive = false;
  return true;
}

bool AgentRegistry::MarkDrained(const std::string& node_id) {
  absl::MutexLock lock(&mu_);
  auto it = agents_.find(node_id);
  if (it == agents_.end()) return false;
  it->second.drained = true;
  const bool was_alive = it->second.alive;
  it->second.alive = false;
  return was_alive;
}

bool AgentRegistry::IsDrained(const std::string& node_id) const {
  absl::MutexLock lock(&mu_);
  auto it = agents_.find(node_id);
  return it != agents_.end() && it->second.drained;
}

std::vector<AgentInfo> AgentRegistry::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<AgentInfo> out;
  out.reserve(agents_.size());
  for (const auto& entry : agents_) out.push_back(entry.second);
  return out;
}

int AgentRegistry::AliveCount() const {
  absl::MutexLock lock(&mu_);
  int alive = 0;
  for (const auto& entry : agents_) alive += entry.second.alive ? 1 : 0;
  return alive;
}

absl::optional<AgentInfo> AgentRegistry::Get(const std::string& node_id) const {
  absl::MutexLock lock(&mu_);
  auto it = agents_.find(node_id);
  if (it == agents_.end()) return absl::nullopt;
  return it->second;
}

absl::StatusOr<AgentPage> PageOfAgents(const std::vector<AgentInfo>& agents, int page_size,
                                       const std::string& page_token) {
  constexpr int kDefault = 500, kMax = 5000;
  if (page_size < 0 || page_size > kMax) {
    return absl::InvalidArgumentError(absl::StrCat("page_size must be in [0, ", kMax, "] (0 = ",
                                                   kDefault, "), got ", page_size));
  }
  if (page_size == 0) page_size = kDefault;
  std::vector<const AgentInfo*> sorted;
  for (const AgentInfo& a : agents) sorted.push_back(&a);
  std::sort(sorted.begin(), sorted.end(),
            [](const AgentInfo* a, const AgentInfo* b) { return a->node_id < b->node_id; });
  AgentPage out;
  for (const AgentInfo* a : sorted) {
    if (!page_token.empty() && a->node_id <= page_token) continue;
    if (static_cast<int>(out.agents.size()) == page_size) {
      out.next_page_token = out.agents.back().node_id;
      break;
    }
    out.agents.push_back(*a);
  }
  return out;
}

}  // namespace octopipe
