// CostModel: turns (layer, training options, device hardware) into seconds and bytes for one
// micro-batch.
//
// Sources, in order of trust: measured costs in the layer (each present field overrides), then
// analytic formulas from ../shared/data/hardware-and-formulas.md: FLOPs / (peak * efficiency),
// with one efficiency factor per layer kind (calibration later fits them per device). Linear
// (weight GEMM) FLOPs cost the same again for the input gradient (B) and for the weight
// gradient (W); FLOPs without weights (attention core, scans) cost twice in B and nothing in W.
// Stateless apart from its options; thread-safe.
#ifndef OCTOPIPE_CORE_COST_MODEL_H_
#define OCTOPIPE_CORE_COST_MODEL_H_

#include <array>

#include "core/cluster.h"
#include "core/model_graph.h"

namespace octopipe {

struct LayerCost {
  double forward_s = 0;         // F
  double backward_input_s = 0;  // B: gradient w.r.t. the input
  double weight_grad_s = 0;     // W: gradient w.r.t. the weights
  double recompute_s = 0;       // R: re-materialising activations under full recompute (= F)
  // Activation bytes held from F until the backward; `activation_bytes_w` of them (the inputs
  // of weight GEMMs) are still needed by W, the rest is freed by B.
  double activation_bytes = 0;
  double activation_bytes_w = 0;
  double input_bytes = 0;   // the layer input (all that full recompute keeps)
  double output_bytes = 0;  // activation sent to the next layer (and its gradient back)
  double param_count = 0;   // parameters on one tensor-parallel rank
  double param_bytes = 0;   // weights only
  double static_bytes = 0;  // weights + gradients + optimizer state
  double forward_flops = 0; // on one tensor-parallel rank
};

struct CostModelOptions {
  // Achieved fraction of peak FLOP/s per layer kind (indexed by LayerKind). Training reaches
  // 35-60% of peak; small or memory-bound kernels (embedding, scans) less.
  std::array<double, kNumLayerKinds> efficiency = {
      0.30,  // embedding (memory-bound; see cost_model.cc)
      0.45,  // attention
      0.45,  // mla_attention
      0.30,  // mamba
      0.35,  // mamba2
      0.40,  // moe (grouped GEMMs, routing overhead)
      0.55,  // mlp
      0.45,  // vision_block
      0.50,  // head
  };
};

class CostModel {
 public:
  explicit CostModel(CostModelOptions options = {});

  LayerCost Cost(const Layer& layer, const TrainingOptions& training,
                 const HardwareSpec& hardware) const;

  // Forward FLOPs of the whole layer for one micro-batch (before dividing by TP), split into
  // FLOPs of weight GEMMs and FLOPs without weights. Exposed for tests against the formulas.
  struct Flops {
    double linear = 0;
    double nonlinear = 0;
    double total() const { return linear + nonlinear; }
  };
  static Flops ForwardFlops(const Layer& layer, const TrainingOptions& training);

  // Parameter count of the whole layer (before dividing by TP).
  static double ParamCount(const Layer& layer);

  const CostModelOptions& options() const { return options_; }

 private:
  CostModelOptions options_;
};

}  // namespace octopipe

#endif  // OCTOPIPE_CORE_COST_MODEL_H_
