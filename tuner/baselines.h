// The baselines OctoPipe is compared against, evaluated in the same simulator with the same
// costs: GPipe, 1F1B with uniform layers, 1F1B with a min-max balanced partition, interleaved
// 1F1B (V = 2 and 4 where the layer and micro-batch counts allow), ZB-H1, ZB-H2, ZB-V and
// DualPipeV. ZB-H1, ZB-H2 and ZB-V are built for the problem's own costs, transfer times and
// memory limits by ZeroBubble's own builders (simulator/zb_schedules.h), not at unit cost; the
// other schedules' orders do not depend on costs. A baseline that cannot run (too few layers,
// micro-batch rule) carries its reason; one that runs but exceeds memory is reported with
// fits = false, never dropped.
#ifndef OCTOPIPE_TUNER_BASELINES_H_
#define OCTOPIPE_TUNER_BASELINES_H_

#include <functional>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "core/cost_model.h"
#include "core/model_graph.h"
#include "core/plan.h"
#include "simulator/evaluator.h"
#include "simulator/problem_builder.h"

namespace octopipe {

struct BaselineResult {
  std::string name;       // "gpipe", "1f1b", "1f1b-balanced", "interleaved-v2", ...
  bool ran = false;       // false: not applicable, see `error`
  std::string error;
  bool fits = false;      // every device's peak memory within capacity
  Plan plan;
  SimResult result;
};

// `should_stop` (may be empty) is checked before each baseline after the first two (GPipe and
// 1F1B always run, so a plan exists): once true, the rest are reported as not run with
// error "skipped: time budget exhausted". Those baselines' simulations also poll it
// (EvalOptions::should_stop); one stopped midway is reported as not run with error
// "stopped: time budget exhausted during its simulation".
std::vector<BaselineResult> RunBaselines(const ModelGraph& model, const ProblemBuilder& builder,
                                         int num_microbatches, bool link_contention,
                                         const std::function<bool()>& should_stop = {});

// The fitting baseline with the smallest objective (synchronous or steady-state iteration
// time), or nullptr when none fits.
const BaselineResult* BestFittingBaseline(const std::vector<BaselineResult>& baselines,
                                          bool steady_state);

}  // namespace octopipe

#endif  // OCTOPIPE_TUNER_BASELINES_H_
