// Calibration: fits per-layer time factors from the stage times agents measure.
//
// For every reported stage, ratio = measured seconds / predicted seconds over the op kinds
// reported (weighted by samples), where "predicted" is what the plan's problem says under the
// current factors. Every layer of the stage gets factor *= ratio, so the next tuning sees the
// measured costs (the most trusted cost source) while the cost model's relative costs inside a
// stage are kept. Pure functions; thread-safe.
#ifndef OCTOPIPE_PLANNER_SERVICE_CALIBRATION_H_
#define OCTOPIPE_PLANNER_SERVICE_CALIBRATION_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/plan.h"
#include "simulator/problem.h"

namespace octopipe::planner {

struct MeasuredStageTime {
  int stage = 0;
  OpKind kind = OpKind::kF;
  double seconds = 0;  // mean per op
  int64_t samples = 1;
};

struct CalibrationUpdate {
  std::vector<double> factors;  // one per layer
  double max_deviation = 0;     // max over reported stages of |ratio - 1|
  int worst_stage = -1;
};

// Errors: kInvalidArgument naming the field (stage out of range, non-positive seconds,
// unknown op kind for the plan). `factors` empty means all 1.
absl::StatusOr<CalibrationUpdate> FitCalibration(const Plan& plan,
                                                 const PipelineProblem& predicted,
                                                 const std::vector<MeasuredStageTime>& times,
                                                 std::vector<double> factors, int num_layers);

// "F", "B", "W", "BW", "R" -> OpKind; kInvalidArgument otherwise.
absl::StatusOr<OpKind> ParseOpKind(const std::string& text);

}  // namespace octopipe::planner

#endif  // OCTOPIPE_PLANNER_SERVICE_CALIBRATION_H_
