// The kinds of job events a worker agent reports (JobEvent.kind on the wire is the name), and
// what each says of the job's phase. The planner keeps an event of a kind it does not know (a
// newer agent's) as text.
#ifndef OCTOPIPE_CORE_JOB_EVENT_KIND_H_
#define OCTOPIPE_CORE_JOB_EVENT_KIND_H_

#include <optional>

#include "absl/strings/string_view.h"

namespace octopipe {

enum class JobEventKind {
  kStarted,      // the ranks of a version started from scratch
  kResumed,      // ... from a checkpoint
  kStopped,      // stopped at an iteration boundary (a new version, a drain)
  kCompleted,    // every iteration done
  kRankFailed,   // a rank failed (a lost peer, a crash)
  kStateSaved,   // failing ranks saved their state from memory
  kPlanRefused,  // a version this node cannot run
};

// "started", "resumed", "stopped", "completed", "rank_failed", "state_saved", "plan_refused".
absl::string_view JobEventKindName(JobEventKind kind);
// The inverse; nullopt for any other text.
std::optional<JobEventKind> ParseJobEventKind(absl::string_view name);
// Whether an event of this kind shows the job's ranks at work (its phase is running).
bool ShowsRunning(JobEventKind kind);

}  // namespace octopipe

#endif  // OCTOPIPE_CORE_JOB_EVENT_KIND_H_
