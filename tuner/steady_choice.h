// The tuner's steady-state objective (Objective::kSteadyState): a synchronous search with half
// the budget first, then the steady-state search warm-started from its plan
// (TunerOptions::seed_stages) with the rest; the answer is the plan with the shorter period,
// judged by the steady-state search's bound and best baseline, and a "steady" log entry says
// which. The steady scores alone can lead every restart away from the shortest iteration's
// plan, which is a good one for the period too (llama3-8b over 8 H100s, vocabulary layers
// whole: the steady search alone ended at a 0.686 s period, the synchronous plan's is 0.671 s).
// Thread-safe, like Tune.
#ifndef OCTOPIPE_TUNER_STEADY_CHOICE_H_
#define OCTOPIPE_TUNER_STEADY_CHOICE_H_

#include <functional>

#include "absl/status/statusor.h"
#include "tuner/tuner.h"

namespace octopipe {

// `search` is one search of Tune's (no objective or vocabulary choice of its own); the
// synchronous pass's log entries come back prefixed "sync:".
absl::StatusOr<TuneResult> TuneSteadyFromSynchronous(
    const TunerOptions& options,
    const std::function<absl::StatusOr<TuneResult>(const TunerOptions&)>& search);

}  // namespace octopipe

#endif  // OCTOPIPE_TUNER_STEADY_CHOICE_H_
