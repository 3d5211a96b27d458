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
//
// Vocabulary parallelism (plan.vocab_parallel; simulator/vocab_parallel.h): the head (the last
// layer) costs nothing in its stage; every device d runs its shard's S and T passes, reported
// as stage times with `stage` = d (the executor times them as ops, keyed by the device). The
// problem costs them from the head's one factor (ProblemBuilder: S(d) = (F + B of the head) x
// factor x shard fraction(d) + op overhead, T(d) = W x factor x fraction(d) + overhead), so
// they fit that factor: head factor *= sum(measured S/T seconds x samples) / sum(predicted x
// samples) over every device's reported passes. One factor, not one per device: the shard
// fractions follow the devices' speed on the head, and a factor per device has nowhere to go
// in the per-layer factors the tuner takes. The stage times of the last stage then do not
// scale the head (its cost is not in them), and the head's own per-layer times, which under
// the split time only its norm on the last stage's device, are ignored (FitMeasuredTimes). A
// split input embedding (ProblemBuilder::split_embedding) is timed per layer on stage 0's
// device for that device's shard only, so its layer times are compared with that share.
#ifndef OCTOPIPE_CALIBRATION_LAYER_CALIBRATION_H_
#define OCTOPIPE_CALIBRATION_LAYER_CALIBRATION_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cost_model.h"
#include "core/model_graph.h"
#include "core/plan.h"
#include "simulator/problem.h"
#include "simulator/problem_builder.h"

namespace octopipe {

// Physical ranges of what agents report, checked before anything is fitted or stored: an op or
// iteration time in [kMinReportedSeconds, kMaxReportedSeconds] (1 ns .. ~11.6 days), samples and
// iterations in [1, kMaxReportedSamples]. Outside them a report is refused whole
// (kInvalidArgument naming the field and value).
inline constexpr double kMinReportedSeconds = 1e-9;
inline constexpr double kMaxReportedSeconds = 1e6;
inline constexpr int64_t kMaxReportedSamples = int64_t{1} << 40;
absl::Status CheckReportedSeconds(const std::string& field, double seconds);
absl::Status CheckReportedSamples(const std::string& field, int64_t samples);

// Calibration factors stay in [kMinFactor, kMaxFactor]: no single report can move a layer's
// cost more than 1000x from the cost model's, and a factor that would be non-finite is
// impossible. ClampFactors clamps every factor (NaN becomes 1) and returns how many it changed;
// FitReport's factors and factors loaded from the store both go through it.
inline constexpr double kMinFactor = 1e-3;
inline constexpr double kMaxFactor = 1e3;
int ClampFactors(std::vector<double>* factors);

struct MeasuredStageTime {
  int stage = 0;  // for kS and kT (vocabulary passes): the device
  OpKind kind = OpKind::kF;
  double seconds = 0;  // mean per op
  int64_t samples = 1;
};

struct CalibrationUpdate {
  std::vector<double> factors;  // one per layer
  // Max of |ratio - 1| over the reported stages and, as one more entry, the vocabulary passes.
  double max_deviation = 0;
  int worst_stage = -1;         // -1 when nothing deviates, or the vocabulary passes do most
  int worst_layer = -1;         // FitLayerCalibration: the layer of max_deviation
  // Vocabulary passes (S and T) reported: their ratio's |ratio - 1|, and whether it is the
  // max_deviation (worst_stage is then -1).
  bool vocab_reported = false;
  double vocab_deviation = 0;
  bool worst_is_vocab = false;
};

// Errors: kInvalidArgument naming the field (stage out of range — a device's for S and T —,
// non-positive seconds, S or T for a plan without vocab_parallel). `factors` empty means all 1.
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
// ran on. Layers without reports keep their factor, and so does `skip_layer` (>= 0: its reports
// are checked, then ignored). Deviation fields are over layers.
// Errors: kInvalidArgument naming the field (layer out of range, kind BW, S or T — vocabulary
// passes are stage times —, non-positive seconds or samples).
absl::StatusOr<CalibrationUpdate> FitLayerCalibration(const std::vector<LayerCost>& predicted,
                                                      const std::vector<MeasuredLayerTime>& times,
                                                      std::vector<double> factors,
                                                      int skip_layer = -1);

// One report against the plan it measured: `builder` is the plan's (made with the current
// `factors` and plan.vocab_parallel; `factors` empty: all 1). The stage times (FitCalibration)
// give the deviation and, without layer times, the factors; with layer times every layer they
// cover gets its own ratio (FitLayerCalibration). Under vocabulary parallelism the head's
// factor is the vocabulary passes' fit either way (see the top comment). Errors: those of
// FitCalibration and FitLayerCalibration, and the builder's on a plan it does not fit.
absl::StatusOr<CalibrationUpdate> FitMeasuredTimes(const ProblemBuilder& builder,
                                                   const Plan& plan,
                                                   const std::vector<MeasuredStageTime>& stages,
                                                   const std::vector<MeasuredLayerTime>& layers,
                                                   std::vector<double> factors);

// A measured model calibrated: every layer's measured F, B, W and R seconds (and those measured
// at other TP degrees, MeasuredCosts::at_tp) multiplied by its factor (e.g. FitLayerCalibration's), so any command that reads model files plans and predicts
// with the calibrated costs. kInvalidArgument naming the field when `factors` is not one finite
// positive factor per layer, or a layer has no measured time to scale.
absl::StatusOr<ModelGraph> ApplyLayerFactors(const ModelGraph& model,
                                             const std::vector<double>& factors);

// Op-kind text ("F", "B", "W", "BW", "R") is parsed by octopipe::ParseOpKind (core/schedule.h).
using ::octopipe::ParseOpKind;

}  // namespace octopipe

#endif  // OCTOPIPE_CALIBRATION_LAYER_CALIBRATION_H_
