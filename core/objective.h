// Objective: what the tuner minimises for a plan. One enum for the tuner, the CLI and the
// service; its text form (ObjectiveName) is the `--objective` flag's value. Conversion to the
// wire enum is in core/convert.h.
#ifndef OCTOPIPE_CORE_OBJECTIVE_H_
#define OCTOPIPE_CORE_OBJECTIVE_H_

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace octopipe {

enum class Objective {
  kSynchronous,  // first op start to last op end (a global optimizer step; the default)
  kSteadyState,  // the period when consecutive iterations overlap
};

// "synchronous", "steady-state".
inline absl::string_view ObjectiveName(Objective objective) {
  return objective == Objective::kSteadyState ? "steady-state" : "synchronous";
}

// The inverse of ObjectiveName; kInvalidArgument naming `objective` and the value otherwise.
inline absl::StatusOr<Objective> ParseObjective(absl::string_view text) {
  for (Objective o : {Objective::kSynchronous, Objective::kSteadyState}) {
    if (text == ObjectiveName(o)) return o;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("objective must be synchronous or steady-state, got '", text, "'"));
}

}  // namespace octopipe

#endif  // OCTOPIPE_CORE_OBJECTIVE_H_
