// A certified lower bound on the iteration time of ANY plan the tuner (or any baseline) can
// produce for a model on a set of devices: every partition, placement, schedule, B/W split and
// recompute choice takes at least this long in the simulator. The gap between a plan's predicted
// time and the bound says how much any search could still gain.
//
// The bound is the largest of (all costs per micro-batch, each layer at its fastest device
// among the pipeline's devices; transfers, recompute and memory limits ignored — they only add):
//   work   total F+B+W work of M micro-batches spread perfectly over P devices;
//   chain  one micro-batch's dependency chain: F through every layer, B back through every
//          layer, then layer 0's W (which needs layer 0's B);
//   layer  a layer is never split across devices, so one device runs all M of its F, B and W,
//          and not before the first micro-batch's forward has reached it: for each layer l,
//          sum_{j<l} F_j + M (F_l + B_l + W_l), and also (its B work ends before the backward
//          of the layers below it) sum_{j<l} F_j + M (F_l + B_l) + sum_{j<l} B_j.
// For the steady-state objective (iterations overlap, each device steps on its own) only the
// work and per-layer M (F+B+W) terms hold; the chain and arrival terms are dropped.
// Pure functions; thread-safe.
#ifndef OCTOPIPE_TUNER_LOWER_BOUND_H_
#define OCTOPIPE_TUNER_LOWER_BOUND_H_

#include <string>
#include <vector>

#include "core/cost_model.h"
#include "simulator/problem_builder.h"

namespace octopipe {

struct LowerBound {
  double seconds = 0;       // max of the terms below
  std::string binding;      // "work", "chain" or "layer" — which term is the bound
  double work_s = 0;
  double chain_s = 0;       // 0 for the steady-state objective
  double layer_s = 0;
  int heaviest_layer = -1;  // the layer whose term is layer_s
};

// `layers[l]` is layer l's cost on its fastest device (see FastestLayerCosts).
LowerBound PipelineLowerBound(const std::vector<LayerCost>& layers, int num_devices,
                              int num_microbatches, bool steady_state);

// Per layer, the F, B and W seconds on the fastest of the builder's devices (each taken
// separately, which can only lower the bound).
std::vector<LayerCost> FastestLayerCosts(const ProblemBuilder& builder);

// Relative gap of `predicted_s` above the bound: (predicted - bound) / predicted, 0 when the
// bound is 0 or the prediction is not above it.
double LowerBoundGap(double predicted_s, const LowerBound& bound);

}  // namespace octopipe

#endif  // OCTOPIPE_TUNER_LOWER_BOUND_H_
