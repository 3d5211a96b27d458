#include "planner_service/job_state.h"

#include <algorithm>

namespace octopipe::planner {

absl::string_view JobStateName(JobState state) {
  switch (state) {
    case JobState::kPlanning: return "planning";
    case JobState::kReady: return "ready";
    case JobState::kInfeasible: return "infeasible";
    case JobState::kFailed: return "failed";
  }
  return "?";
}

bool JobRecord::HasNode(const std::string& node) const {
  for (const proto::Node& n : spec.cluster.nodes()) {
    if (n.name() == node) return true;
  }
  return false;
}

bool JobRecord::Excludes(const std::string& node) const {
  return std::find(excluded_nodes.begin(), excluded_nodes.end(), node) != excluded_nodes.end();
}

}  // namespace octopipe::planner
