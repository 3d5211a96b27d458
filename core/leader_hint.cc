#include "core/leader_hint.h"

namespace octopipe {
namespace {
constexpr char kLeaderIs[] = "the leader is at ";
}  // namespace

std::string LeaderHint(const std::string& address) {
  return std::string(kLeaderIs) + address + "; retry there";
}

std::optional<std::string> LeaderNamedIn(const std::string& message) {
  const size_t at = message.find(kLeaderIs);
  if (at == std::string::npos) return std::nullopt;
  const size_t from = at + sizeof(kLeaderIs) - 1;
  const size_t end = message.find(';', from);
  std::string leader = message.substr(from, end == std::string::npos ? end : end - from);
  if (leader.empty()) return std::nullopt;
  return leader;
}

}  // namespace octopipe
