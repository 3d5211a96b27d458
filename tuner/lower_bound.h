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
//   assignment  every layer goes whole to one device, so some device's share of the per-micro-
//          batch work is at least C*, the least largest load over all assignments of the layers
//          (weights w_l = F_l + B_l + W_l) to P devices; that device runs M times its share:
//          M C* (MinMaxAssignmentBound computes a certified lower bound on C*). It beats `work`
//          when the layers do not divide evenly (a heavy head, or 40 layers on 8 devices
//          where one of them holds the head), and `layer` when the heaviest layer shares a
//          device with others.
// For the steady-state objective (iterations overlap, each device steps on its own) only the
// work, assignment and per-layer M (F+B+W) terms hold; the chain and arrival terms are dropped.
// The terms assume a layer is never split across devices (no vocabulary or tensor splitting of
// one layer over pipeline devices).
// Pure functions; thread-safe.
#ifndef OCTOPIPE_TUNER_LOWER_BOUND_H_
#define OCTOPIPE_TUNER_LOWER_BOUND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/cost_model.h"
#include "simulator/problem_builder.h"

namespace octopipe {

struct LowerBound {
  double seconds = 0;       // max of the terms below
  std::string binding;      // "work", "chain", "layer" or "assignment": the binding term
  double work_s = 0;
  double chain_s = 0;       // 0 for the steady-state objective
  double layer_s = 0;
  int heaviest_layer = -1;  // the layer whose term is layer_s
  double assignment_s = 0;
};

// A lower bound on C* = min over assignments of items to `bins` identical bins of the largest
// bin sum (multiprocessor scheduling, P||Cmax; NP-hard). Certified:
//  - items are rounded DOWN to a few classes (adjacent sorted values merged, smallest spread
//    first, until the count vectors number at most `max_states`); any assignment of the real
//    items is one of the rounded items with no larger bin sums, so C*(rounded) <= C*;
//  - for a capacity C, the least number of bins of the rounded multiset is computed exactly by
//    the lexicographic (bins, fill of the open bin) dynamic programme over count vectors (any
//    packing, listed bin by bin, is a sequence this programme extends item by item; the
//    extension is monotone in (bins, fill), so keeping the least pair per multiset is exact);
//  - a binary search keeps `lo` a capacity shown infeasible (more than `bins` bins needed) or a
//    closed-form bound (total / bins, the largest item), so C*(rounded) >= lo.
// Exact (up to 1e-6 relative) when the items take few distinct values. O(max_states x classes)
// per probe, about 40 probes. 0 for no items or bins < 1.
double MinMaxAssignmentBound(const std::vector<double>& items, int bins,
                             int64_t max_states = 1 << 15);

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
