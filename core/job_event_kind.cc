#include "core/job_event_kind.h"

namespace octopipe {
namespace {

constexpr JobEventKind kAll[] = {JobEventKind::kStarted,    JobEventKind::kResumed,
                                 JobEventKind::kStopped,    JobEventKind::kCompleted,
                                 JobEventKind::kRankFailed, JobEventKind::kStateSaved,
                                 JobEventKind::kPlanRefused};

}  // namespace

absl::string_view JobEventKindName(JobEventKind kind) {
  switch (kind) {
    case JobEventKind::kStarted: return "started";
    case JobEventKind::kResumed: return "resumed";
    case JobEventKind::kStopped: return "stopped";
    case JobEventKind::kCompleted: return "completed";
    case JobEventKind::kRankFailed: return "rank_failed";
    case JobEventKind::kStateSaved: return "state_saved";
    case JobEventKind::kPlanRefused: return "plan_refused";
  }
  return "?";
}

std::optional<JobEventKind> ParseJobEventKind(absl::string_view name) {
  for (JobEventKind k : kAll) {
    if (JobEventKindName(k) == name) return k;
  }
  return std::nullopt;
}

bool ShowsRunning(JobEventKind kind) {
  switch (kind) {
    case JobEventKind::kStarted:
    case JobEventKind::kResumed:
    case JobEventKind::kStopped:
    case JobEventKind::kRankFailed:
    case JobEventKind::kStateSaved:
      return true;
    case JobEventKind::kCompleted:
    case JobEventKind::kPlanRefused:
      return false;
  }
  return false;
}

}  // namespace octopipe
