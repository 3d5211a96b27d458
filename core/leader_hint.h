// How a follower planner replica names the leader in its UNAVAILABLE answers, and how clients
// (the CLI, the agents) read it back: "... the leader is at HOST:PORT; retry there".
#ifndef OCTOPIPE_CORE_LEADER_HINT_H_
#define OCTOPIPE_CORE_LEADER_HINT_H_

#include <optional>
#include <string>

namespace octopipe {

// "the leader is at ADDRESS; retry there".
std::string LeaderHint(const std::string& address);

// The address LeaderHint put in `message`; nullopt when it has none.
std::optional<std::string> LeaderNamedIn(const std::string& message);

}  // namespace octopipe

#endif  // OCTOPIPE_CORE_LEADER_HINT_H_
