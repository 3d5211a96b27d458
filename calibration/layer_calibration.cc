#include "calibration/layer_calibration.h"

#include <algorithm>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "simulator/pipeline_rules.h"

namespace octopipe {

absl::Status CheckReportedSeconds(const std::string& field, double seconds) {
  if (std::isfinite(seconds) && seconds >= kMinReportedSeconds && seconds <= kMaxReportedSeconds) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(field, " must be in [", kMinReportedSeconds,
                                                 ", ", kMaxReportedSeconds, "] s, got ",
                                                 seconds));
}

absl::Status CheckReportedSamples(const std::string& field, int64_t samples) {
  if (samples >= 1 && samples <= kMaxReportedSamples) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, " must be in [1, ", kMaxReportedSamples, "], got ", samples));
}

int ClampFactors(std::vector<double>* factors) {
  int changed = 0;
  for (double& f : *factors) {
    const double clamped = std::isnan(f) ? 1.0 : std::clamp(f, kMinFactor, kMaxFactor);
    if (clamped != f) {
      f = clamped;
      ++changed;
    }
  }
  return changed;
}


absl::StatusOr<CalibrationUpdate> FitCalibration(const Plan& plan,
                                                 const PipelineProblem& predicted,
                                                 const std::vector<MeasuredStageTime>& times,
                                                 std::vector<double> factors, int num_layers) {
  if (factors.empty()) factors.assign(num_layers, 1.0);
  const int S = plan.num_stages();
  std::vector<double> measured(S, 0.0), expected(S, 0.0);
  // The vocabulary passes of every device, which together fit the head's factor.
  double vocab_measured = 0, vocab_expected = 0;
  bool vocab_reported = false;
  for (size_t i = 0; i < times.size(); ++i) {
    const MeasuredStageTime& t = times[i];
    const std::string field = absl::StrCat("times[", i, "]");
    if (!(t.seconds > 0) || !std::isfinite(t.seconds)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".seconds must be > 0, got ", t.seconds));
    }
    if (t.samples < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".samples must be >= 1, got ", t.samples));
    }
    if (IsVocabPass(t.kind)) {
      if (!plan.vocab_parallel) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, ".kind ", OpKindName(t.kind),
            ": a vocabulary pass, but this plan version does not split the output layer "
            "(vocab_parallel is off)"));
      }
      if (t.stage < 0 || t.stage >= plan.num_devices) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, ".stage of a vocabulary pass is its device: must be in [0, ",
            plan.num_devices - 1, "] for this plan version, got ", t.stage));
      }
      if (!predicted.vocab_parallel ||
          static_cast<size_t>(t.stage) >= predicted.vocab_s_s.size() ||
          static_cast<size_t>(t.stage) >= predicted.vocab_t_s.size()) {
        continue;  // nothing predicted to compare with
      }
      const double p = OpDuration(predicted, t.kind, t.stage);
      if (!(p > 0)) continue;
      vocab_reported = true;
      vocab_measured += t.seconds * t.samples;
      vocab_expected += p * t.samples;
      continue;
    }
    if (t.stage < 0 || t.stage >= S) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".stage must be in [0, ", S - 1,
                                                     "] for this plan version, got ", t.stage));
    }
    const int s = t.stage;
    const double p = OpDuration(predicted, t.kind, s);
    if (!(p > 0)) continue;  // nothing predicted to compare with (free stage)
    measured[s] += t.seconds * t.samples;
    expected[s] += p * t.samples;
  }
  // A split head's cost is in the vocabulary passes, not in its stage's ops.
  const int head = plan.vocab_parallel ? num_layers - 1 : -1;
  CalibrationUpdate out;
  for (int s = 0; s < S; ++s) {
    if (!(expected[s] > 0)) continue;
    const double ratio = measured[s] / expected[s];
    const double dev = std::abs(ratio - 1);
    if (dev > out.max_deviation) {
      out.max_deviation = dev;
      out.worst_stage = s;
    }
    for (int l = plan.stages[s].first_layer; l <= plan.stages[s].last_layer; ++l) {
      if (l != head) factors[l] *= ratio;
    }
  }
  if (vocab_reported && vocab_expected > 0 && head >= 0) {
    const double ratio = vocab_measured / vocab_expected;
    out.vocab_reported = true;
    out.vocab_deviation = std::abs(ratio - 1);
    if (out.vocab_deviation > out.max_deviation) {
      out.max_deviation = out.vocab_deviation;
      out.worst_stage = -1;
      out.worst_is_vocab = true;
    }
    factors[head] *= ratio;
  }
  out.factors = std::move(factors);
  return out;
}

absl::StatusOr<CalibrationUpdate> FitLayerCalibration(const std::vector<LayerCost>& predicted,
                                                      const std::vector<MeasuredLayerTime>& times,
                                                      std::vector<double> factors,
                                                      int skip_layer) {
  const int L = static_cast<int>(predicted.size());
  if (factors.empty()) factors.assign(L, 1.0);
  std::vector<double> measured(L, 0.0), expected(L, 0.0);
  for (size_t i = 0; i < times.size(); ++i) {
    const MeasuredLayerTime& t = times[i];
    const std::string field = absl::StrCat("layer_times[", i, "]");
    if (t.layer < 0 || t.layer >= L) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".layer must be in [0, ", L - 1, "], got ", t.layer));
    }
    if (!(t.seconds > 0) || !std::isfinite(t.seconds)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".seconds must be > 0, got ", t.seconds));
    }
    if (t.samples < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".samples must be >= 1, got ", t.samples));
    }
    const LayerCost& c = predicted[t.layer];
    double p = 0;
    switch (t.kind) {
      case OpKind::kF: p = c.forward_s; break;
      case OpKind::kB: p = c.backward_input_s; break;
      case OpKind::kW: p = c.weight_grad_s; break;
      case OpKind::kR: p = c.recompute_s; break;
      case OpKind::kBW:
        return absl::InvalidArgumentError(
            absl::StrCat(field, ".op_kind must be F, B, W or R (report BW as its B and W)"));
      case OpKind::kS:
      case OpKind::kT:
        return absl::InvalidArgumentError(absl::StrCat(
            field, ".op_kind must be F, B, W or R (vocabulary passes are stage times, their "
                   "stage being the device)"));
    }
    if (t.layer == skip_layer) continue;
    if (!(p > 0)) continue;  // nothing predicted to compare with
    measured[t.layer] += t.seconds * t.samples;
    expected[t.layer] += p * t.samples;
  }
  CalibrationUpdate out;
  for (int l = 0; l < L; ++l) {
    if (!(expected[l] > 0)) continue;
    const double ratio = measured[l] / expected[l];
    if (std::abs(ratio - 1) > out.max_deviation) {
      out.max_deviation = std::abs(ratio - 1);
      out.worst_layer = l;
    }
    factors[l] *= ratio;
  }
  out.factors = std::move(factors);
  return out;
}

absl::StatusOr<CalibrationUpdate> FitMeasuredTimes(const ProblemBuilder& builder,
                                                   const Plan& plan,
                                                   const std::vector<MeasuredStageTime>& stages,
                                                   const std::vector<MeasuredLayerTime>& layers,
                                                   std::vector<double> factors) {
  const int L = builder.num_layers();
  if (factors.empty()) factors.assign(L, 1.0);
  ASSIGN_OR_RETURN(PipelineProblem predicted, builder.Build(plan));
  ASSIGN_OR_RETURN(CalibrationUpdate update,
                   FitCalibration(plan, predicted, stages, factors, L));
  if (layers.empty()) return update;
  std::vector<LayerCost> layer_costs(L);
  for (const StageAssignment& st : plan.stages) {
    for (int l = st.first_layer; l <= st.last_layer; ++l) {
      layer_costs[l] = builder.layer_cost(l, st.device);
    }
  }
  if (builder.split_embedding()) {
    // Stage 0's rank times only its own shard of a split embedding: compare with that share.
    ASSIGN_OR_RETURN(const std::vector<int64_t> columns,
                     PlanVocabShardColumns(plan, builder.vocab()));
    const double share = static_cast<double>(columns[plan.stages.front().device]) /
                         static_cast<double>(builder.vocab());
    LayerCost& e = layer_costs[0];
    e.forward_s *= share;
    e.backward_input_s *= share;
    e.weight_grad_s *= share;
    e.recompute_s *= share;
  }
  // Under the split the head's layer times are its norm alone (executor/engine.h), which the
  // problem does not cost: its factor stays the vocabulary passes' fit.
  const int head = plan.vocab_parallel ? L - 1 : -1;
  ASSIGN_OR_RETURN(CalibrationUpdate by_layer,
                   FitLayerCalibration(layer_costs, layers, factors, head));
  if (head >= 0) by_layer.factors[head] = update.factors[head];
  update.factors = std::move(by_layer.factors);
  return update;
}

absl::StatusOr<ModelGraph> ApplyLayerFactors(const ModelGraph& model,
                                             const std::vector<double>& factors) {
  if (factors.size() != static_cast<size_t>(model.num_layers())) {
    return absl::InvalidArgumentError(absl::StrCat("factors: ", factors.size(), " for ",
                                                   model.num_layers(), " layers"));
  }
  ModelGraph out = model;
  for (int l = 0; l < out.num_layers(); ++l) {
    const double f = factors[l];
    if (!(f > 0) || !std::isfinite(f)) {
      return absl::InvalidArgumentError(
          absl::StrCat("factors[", l, "] must be finite and > 0, got ", f));
    }
    MeasuredCosts& m = out.layers[l].measured;
    if (!m.forward_s || !m.backward_input_s || !m.weight_grad_s) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layers[", l, "] (", out.layers[l].name, "): no measured F, B, W seconds to calibrate"));
    }
    *m.forward_s *= f;
    *m.backward_input_s *= f;
    *m.weight_grad_s *= f;
    if (m.recompute_s) *m.recompute_s *= f;
    for (MeasuredSharded& a : m.sharded) {  // the layer's shards: the same factor
      a.forward_s *= f;
      a.backward_input_s *= f;
      a.weight_grad_s *= f;
      a.recompute_s *= f;
    }
  }
  return out;
}

}  // namespace octopipe
