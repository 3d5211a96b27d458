// Calibration: fits per-layer time factors from the stage times agents measure.
//
// Per-layer reports (FitLayerCalibration) are preferred: each reported layer gets factor *=
// measured / predicted over its own op kinds, so one report calibrates every layer it covers
// even after the layer moves to another stage. Stage reports (FitCalibration) smear a stage's
// ratio over its layers; they also give the deviation the re-plan policy watches.
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
#include "core/cost_model.h"
#include "core/model_graph.h"
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
  int worst_layer = -1;         // FitLayerCalibration: the layer of max_deviation
};

// Errors: kInvalidArgument naming the field (stage out of range, non-positive seconds,
// unknown op kind for the plan). `factors` empty means all 1.
absl::StatusOr<CalibrationUpdate> FitCalibration(const Plan& plan,
                                                 const PipelineProblem& predicted,
                                                 const std::vector<MeasuredStageTime>& times,
                                                 std::vector<double> factors, int num_layers);

struct MeasuredLayerTime {
  int layer = 0;
  OpKind kind = OpKind::kF;  // kF, kB, kW or kR
  double seconds = 0;        // mean per op
  int64_t samples = 1;
};

// `predicted[l]`: layer l's costs under the current `factors` (empty: all 1) on the device it
// ran on. Layers without reports keep their factor. Deviation fields are over layers.
// Errors: kInvalidArgument naming the field (layer out of range, kind BW, non-positive seconds
// or samples).
absl::StatusOr<CalibrationUpdate> FitLayerCalibration(const std::vector<LayerCost>& predicted,
                                                      const std::vector<MeasuredLayerTime>& times,
                                                      std::vector<double> factors);

// A measured model calibrated: every layer's measured F, B, W and R seconds multiplied by its
// factor (e.g. FitLayerCalibration's), so any command that reads model files plans and predicts
// with the calibrated costs. kInvalidArgument naming the field when `factors` is not one finite
// positive factor per layer, or a layer has no measured time to scale.
absl::StatusOr<ModelGraph> ApplyLayerFactors(const ModelGraph& model,
                                             const std::vector<double>& factors);

// Op-kind text ("F", "B", "W", "BW", "R") is parsed by octopipe::ParseOpKind (core/schedule.h).
using ::octopipe::ParseOpKind;

}  // namespace octopipe::planner

#endif  // OCTOPIPE_PLANNER_SERVICE_CALIBRATION_H_
