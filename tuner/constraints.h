// Executor constraints: what the runtime that will run a plan supports, so the tuner returns
// only plans it can run — no separate weight-gradient (W) ops, at most K stages per device, no
// recompute, a fixed partition, or a fixed partition and placement.
//
// The tuner projects every candidate onto the constraints before scoring it (fixed layer
// ranges and devices written over the candidate's, recompute flags cleared, unsplit
// backward), and scores a candidate the projection cannot repair (wrong stage count, too many
// stages on a device) as never fitting; a baseline is chosen as the answer, and counted as the
// best baseline, only when its plan meets them too. Pure functions; thread-safe.
#ifndef OCTOPIPE_TUNER_CONSTRAINTS_H_
#define OCTOPIPE_TUNER_CONSTRAINTS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/model_graph.h"
#include "core/plan.h"
#include "tuner/candidate.h"

namespace octopipe {

struct ExecutorConstraints {
  bool allow_bw_split = true;     // false: every backward is one BW op (no W filling bubbles)
  int max_stages_per_device = 0;  // 0: no limit beyond the tuner's own
  bool allow_recompute = true;    // false: no stage recomputes its activations
  // true: every stage recomputes its activations (full activation recomputation, as a model's
  // training.recompute = "full" or `plan --recompute=full` asks). Needs allow_recompute.
  bool require_recompute = false;
  // Non-empty: the partition — each stage's first and last layer, in order, covering every
  // layer once. `device` is kept only with `fixed_placement`, else the tuner places the stages.
  std::vector<StageAssignment> fixed_stages;
  bool fixed_placement = false;

  bool any() const {
    return !allow_bw_split || max_stages_per_device > 0 || !allow_recompute ||
           require_recompute || !fixed_stages.empty();
  }
};

// kInvalidArgument naming the field: a fixed partition that is not a partition of
// `num_layers` layers, fixed devices outside [0, num_devices), fixed_placement without stages,
// a negative stage limit, or a fixed placement over the limit.
absl::Status ValidateConstraints(const ExecutorConstraints& c, int num_layers, int num_devices);

// How a request's recompute choice (PlanOptions.recompute, `plan --recompute`) constrains the
// tuner and the model, with the model's training.recompute as the default:
//   "auto" (or ""): as the model asks — "full": every stage recomputes; "selective": the
//       modules of training.recompute_modules (default: the attention core) are recomputed
//       (cost model) and the tuner may add full recompute per stage
//       where memory needs it; "none": the tuner may add full recompute per stage;
//   "none": no recompute at all (the model's selective recompute too);
//   "selective": selective recompute, no full recompute of any stage;
//   "full": every stage recomputes.
// Sets model->training.recompute and c->allow_recompute / require_recompute. kInvalidArgument
// naming `field` for another value, or when `c` already forbids recompute (no_recompute) and
// the choice or the model asks for full.
absl::Status ApplyRecomputeChoice(const std::string& choice, const std::string& field,
                                  ModelGraph* model, ExecutorConstraints* c);

// Writes the constraints over the candidate; false when they cannot hold for it.
bool ApplyConstraints(const ExecutorConstraints& c, Candidate* candidate);

// Whether a finished plan (a baseline's) meets every constraint.
bool PlanMeetsConstraints(const ExecutorConstraints& c, const Plan& plan);

// Start points for a fixed partition: its stages on their fixed devices, else in the loop
// placement (stage s on device s mod P) and, for two or more stages per device, the V shape;
// each with every policy (recompute variants when allowed). Empty without a fixed partition.
std::vector<Candidate> ConstraintSeeds(const ExecutorConstraints& c, int num_devices,
                                       const std::vector<Policy>& policies);

}  // namespace octopipe

#endif  // OCTOPIPE_TUNER_CONSTRAINTS_H_
