// ReplanReason: why a job's plan is computed — its first plan, or a re-plan and its cause. One
// enum for the job manager, the service and the metrics. Its text form (ReplanReasonName) is
// the deprecated PlanVersion.reason string beside the typed `reason_kind`, what `octopipe jobs`
// shows, and the `reason` label of octopipe_replans_total, which counts re-plans only (never
// kInitial). The re-plan causes come first so they index arrays of kNumReplanReasons entries.
// Conversion to the wire enum (proto PlanReason) is in core/convert.h.
#ifndef OCTOPIPE_CORE_REPLAN_REASON_H_
#define OCTOPIPE_CORE_REPLAN_REASON_H_

#include "absl/strings/string_view.h"

namespace octopipe {

enum class ReplanReason {
  kMeasured = 0,     // reported stage times deviate from the prediction
  kNodeFailure = 1,  // a node failed (reported, or its agent stopped sending heartbeats)
  kDrain = 2,        // a node is drained on purpose
  kNodeJoin = 3,     // a node came back
  kInitial = 4,      // the job's first plan (not a re-plan)
};
// Re-plan causes proper: the values below kInitial.
inline constexpr int kNumReplanReasons = 4;

// "measured", "node_failure", "drain", "node_join", "initial".
inline absl::string_view ReplanReasonName(ReplanReason reason) {
  switch (reason) {
    case ReplanReason::kMeasured: return "measured";
    case ReplanReason::kNodeFailure: return "node_failure";
    case ReplanReason::kDrain: return "drain";
    case ReplanReason::kNodeJoin: return "node_join";
    case ReplanReason::kInitial: return "initial";
  }
  return "?";
}

// The inverse of ReplanReasonName (stored intents); false for an unknown name.
inline constexpr ReplanReason kAllReplanReasons[] = {
    ReplanReason::kMeasured, ReplanReason::kNodeFailure, ReplanReason::kDrain,
    ReplanReason::kNodeJoin, ReplanReason::kInitial};

inline bool ParseReplanReason(absl::string_view name, ReplanReason* out) {
  for (ReplanReason r : kAllReplanReasons) {
    if (ReplanReasonName(r) == name) {
      *out = r;
      return true;
    }
  }
  return false;
}

}  // namespace octopipe

#endif  // OCTOPIPE_CORE_REPLAN_REASON_H_
