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
//   assignment  every layer goes whole to one device, and a device runs M times the work
//          (w_l = F_l + B_l + W_l) of its layers after its first op starts. Order the devices by
//          their lowest layer: the k-th one's lowest layer is >= k, whose first op starts no
//          earlier than s_k = sum_{j<k} F_j. So an iteration of T seconds needs an assignment of
//          the layers to P bins with bin k's load <= (T - s_k) / M; StaggeredAssignmentBound
//          computes a certified lower bound on the least such T, and PipelineAssignmentBound
//          a tighter one that places the first layers exactly. It beats `work` when the
//          layers do not divide evenly (a heavy head, or 40 layers on 8 devices where one of
//          them holds the head) and adds the pipeline's fill; it beats `layer` when the
//          heaviest layer shares a device with others.
// For the steady-state objective (iterations overlap, each device steps on its own) only the
// work, assignment and per-layer M (F+B+W) terms hold; the chain and arrival terms and the
// assignment's starts s_k are dropped.
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

// A lower bound on T* = the least T such that the items can be assigned to bins k = 0..n-1
// (n = start.size(), `start` non-decreasing) with start[k] + multiplier x (bin k's sum) <= T.
// With all starts 0 and multiplier 1 that is C*, the least largest bin sum (multiprocessor
// scheduling, P||Cmax; NP-hard). Certified:
//  - items are rounded DOWN to a few classes (adjacent sorted values merged, smallest spread
//    first, until the count vectors number at most `max_states`); any assignment of the real
//    items is one of the rounded items with no larger bin sums, so C*(rounded) <= C*;
//  - for a T, whether the rounded multiset fits bins of capacities (T - start[k]) / multiplier
//    (non-increasing) is decided exactly by the lexicographic (bins opened, fill of the last)
//    dynamic programme over count vectors, filling bins in index order: any packing, its
//    non-empty bins moved to the lowest indices (capacities only grow) and listed bin by bin,
//    is a sequence this programme extends item by item, and the extension is monotone in
//    (bins, fill), so keeping the least pair per multiset loses no packing;
//  - a binary search keeps `lo` a T shown infeasible or a closed form (the largest item on
//    the earliest bin; the total over n bins that all start at 0), so T*(rounded) >= lo.
// Exact (up to 1e-5 relative) when the items take few distinct values. O(max_states x classes)
// per probe, about 40 probes. 0 for no items, no bins or multiplier <= 0.
double StaggeredAssignmentBound(const std::vector<double>& items,
                                const std::vector<double>& start, double multiplier,
                                int64_t max_states = 1 << 13);

// C* itself: StaggeredAssignmentBound with `bins` bins starting at 0 and multiplier 1 (the
// largest item when there are no more items than bins).
double MinMaxAssignmentBound(const std::vector<double>& items, int bins,
                             int64_t max_states = 1 << 13);

// The assignment term with the pipeline's order kept for the first `prefix` layers: the least
// T such that the layers (work[l] each, whole) can be assigned to `bins` devices with
// S(lowest layer of d) + multiplier x load_d <= T for every device d, where
// S(l) = sum_{j<l} forward[j]. StaggeredAssignmentBound relaxes "the k-th device to start
// holds its lowest layer at >= k" to "starts at >= S(k)" and may put any layer anywhere; here
// every way of sharing layers 0..prefix-1 among the devices is tried (set partitions, devices
// in order of their lowest layer): a device holding some of them starts at S(its lowest), and
// the i-th of the devices holding none starts at >= S(prefix + i); the other layers, rounded
// down to classes (as there, at most `max_states` count vectors), must fit what is left on
// each device (the same exact programme, per placement). Certified (< the least T) whatever
// the prefix and the rounding; exact up to 1e-5 relative when prefix >= work.size(). It beats
// the relaxation when the first layers are heavy next to a device's share (gpt-oss, DeepSeek:
// 24-28 layers on 4-8 devices) and a device cannot both start early and skip layer k.
// O(probes x Bell(prefix) x max_states x classes) at worst; about 20 ms at prefix 6 and 2,048
// states on 28 layers. 0 for no layers, no bins, multiplier <= 0 or sizes that differ.
double PipelineAssignmentBound(const std::vector<double>& work,
                               const std::vector<double>& forward, int bins, double multiplier,
                               int prefix, int64_t max_states = 1 << 13);

struct LowerBoundOptions {
  // The synchronous assignment term also takes PipelineAssignmentBound with these (0: the
  // relaxation alone, < 1 ms; the default costs ~1-25 ms per bound on the measured profiles).
  int prefix_layers = 6;
  int64_t prefix_states = 1 << 11;
};

// `layers[l]` is layer l's cost on its fastest device (see FastestLayerCosts).
LowerBound PipelineLowerBound(const std::vector<LayerCost>& layers, int num_devices,
                              int num_microbatches, bool steady_state,
                              const LowerBoundOptions& options = {});

// Per layer, the F, B and W seconds on the fastest of the builder's devices (each taken
// separately, which can only lower the bound).
std::vector<LayerCost> FastestLayerCosts(const ProblemBuilder& builder);

// A certified lower bound on the iteration time of EVERY schedule of one split: `problem` fixes
// the stages, their devices and costs (built by ProblemBuilder::BuildInto); any order of the
// ops, B/W split or not, with or without recompute, link delays and contention — each only
// adds. It explains how much of a plan's gap is its schedule's: the staggered objective
// (StaggeredObjective) lets every device run from its first op to the end without a pause,
// but on a device fed by a slower stage the micro-batches arrive at that stage's rate.
//
// Per device, a one-machine relaxation with release times (heads): its ops are jobs on one
// machine, none starting before its head; with pieces d_s = F_s for forward and
// c_s = B_s - overhead_s (no larger than B, nor than the part of an unsplit BW before its
// W part, which holds the input gradient back until the whole op ends):
//   F  the k-th (0-based, by start time) forward of stage s starts no earlier than
//      sum_{t<s} d_t + k max_{t<s} d_t. Proof: k+1 distinct micro-batches have finished the
//      forward of every stage t < s; stage t runs its forwards one at a time on one device,
//      the first no earlier than sum_{u<t} d_u, so the last of those k+1 ends no earlier than
//      sum_{u<t} d_u + (k+1) d_t, and that micro-batch still passes stages t+1..s-1.
//   B  (or BW) likewise along the chain F_0..F_{S-1}, B_{S-1}..B_{s+1}: the k-th starts no
//      earlier than sum_t d_t + sum_{t>s} c_t + k max(max_t d_t, max_{t>s} c_t).
//   W  the k-th W (or W part of a BW) starts after k+1 distinct backward pieces of its stage
//      ended, the last no earlier than the k-th backward's head + c_s.
// The device is charged pieces of c_s (B) and W_s (W), contained in its B and W ops (or in
// one BW op, back to back), and F_s; recompute only adds ops. One machine with heads is
// optimal non-idling in head order (1|r_j|Cmax), so its end is a lower bound; the iteration
// starts at 0 (the earliest op has no predecessor: a stage-0 forward). The bound is the
// largest over the devices; it includes start_d + M x load_d (StaggeredObjective's form, up to
// the overheads left out of c_s). NOT a bound over all splits: the tuner may pick another
// split; PipelineLowerBound is the certified bound over every plan. O(stages x M log(stages M)).
double SplitScheduleLowerBound(const PipelineProblem& problem);

// Relative gap of `predicted_s` above the bound: (predicted - bound) / predicted, 0 when the
// bound is 0 or the prediction is not above it.
double LowerBoundGap(double predicted_s, const LowerBound& bound);

}  // namespace octopipe

#endif  // OCTOPIPE_TUNER_LOWER_BOUND_H_
