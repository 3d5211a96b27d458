// StaggeredRebalance: a split (partition + placement) shaped for the synchronous iteration
// time before any schedule is built, judged by the lower bound's assignment term on it
// (tuner/lower_bound.h): device d cannot start before the first micro-batch's forward reaches
// its lowest layer, start_d = sum of F over the layers below it, and then runs M times its load
// (F + B + W of all its layers), so no schedule of the split beats
//     StaggeredObjective = max_d (start_d + M x load_d).
// Equal device loads (BalanceDeviceLoads) are not what minimises it: the devices that start
// late should carry less. The tuner's plans reach this term on their own split in most of
// bench:lower_bound_gap's rows, so the split is where the remaining gap to the bound is, and a
// split is cheap to judge this way (O(stages) per move, no simulation) — so the search here
// tries many thousands of splits and hands the simulator only its result.
//
// The split is held as a device per layer (its stages are the runs of one device). Moves, the
// best of each round kept when it lowers a smooth maximum of start_d + M x load_d (which lets
// load flow through chains of devices): one layer to another device (a boundary shift when it
// sits at a stage's end, else a new stage), two layers of two devices exchanged, the devices of
// two stages exchanged; a move that would give a device more than `max_chunks` stages or leave
// it without a layer is not made. Deterministic; O(L x P + L^2 + S^2) trials per round, each
// O(L).
#ifndef OCTOPIPE_TUNER_STAGGERED_BALANCE_H_
#define OCTOPIPE_TUNER_STAGGERED_BALANCE_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "core/plan.h"
#include "simulator/problem_builder.h"

namespace octopipe {

// max_d (start_d + M x load_d) of `stages` (each layer's costs on its stage's device).
double StaggeredObjective(const ProblemBuilder& builder, const std::vector<StageAssignment>& stages,
                          int num_microbatches);

// The split after local search from `stages` (a layer keeps its recompute flag wherever it
// goes). Stops after `max_moves` rounds, or when `should_stop` (if given) returns true, checked
// every round.
std::vector<StageAssignment> StaggeredRebalance(
    const ProblemBuilder& builder, std::vector<StageAssignment> stages, int num_microbatches,
    int max_chunks, int max_moves = 500,
    const std::function<bool()>* should_stop = nullptr);

// The same objective by simulated annealing over the device of each layer (one layer moved, or
// two exchanged; Metropolis acceptance, geometric cooling over `iterations` trials of O(L)
// each), from `stages`: the local search above stops at the first split no single round of
// moves improves, while the staggered objective has many such splits (staggered_balance_test:
// random splits where it gains after the rounds). Deterministic for a `seed`; the best split
// seen (never worse than `stages`), within `max_chunks` stages per device.
std::vector<StageAssignment> StaggeredAnneal(const ProblemBuilder& builder,
                                             const std::vector<StageAssignment>& stages,
                                             int num_microbatches, int max_chunks,
                                             uint64_t seed, int64_t iterations,
                                             const std::function<bool()>* should_stop = nullptr);

// Simulated annealing with the same moves for any `energy` of a split (lower is better; +inf
// rules a split out), e.g. SplitScheduleLowerBound of the split's problem (tuner/lower_bound.h),
// which also charges the fill rate but costs a problem build per trial: for a few thousand
// trials from a split StaggeredAnneal already shaped. Deterministic for a `seed`; the best
// split seen, never worse than `stages`.
std::vector<StageAssignment> AnnealSplit(
    const ProblemBuilder& builder, const std::vector<StageAssignment>& stages, int max_chunks,
    uint64_t seed, int64_t iterations,
    const std::function<double(const std::vector<StageAssignment>&)>& energy,
    const std::function<bool()>* should_stop = nullptr);

}  // namespace octopipe

#endif  // OCTOPIPE_TUNER_STAGGERED_BALANCE_H_
