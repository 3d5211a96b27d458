// Tabu search over a schedule's device orders by swaps on its critical path, the job-shop
// neighbourhood of Nowicki & Smutnicki (1996, "N5"): the evaluator's critical path (the chain of
// ops, each started by its predecessor's end, that ends last) runs through blocks of ops
// that one device runs back to back; exchanging two ops inside a block cannot shorten that
// path, so the only moves tried are the first two and the last two ops of each block, swapped.
// Each step takes the best such move not forbidden by the tabu list (the swap that would undo
// one of the last `tabu_tenure` moves), even when it is worse: that is how the search leaves
// a local optimum. A forbidden move is still taken when it beats the best order found so far.
//
// Why: the list scheduler (simulator/list_scheduler.h) decides each device's next op by local
// rules, and on irregular splits (a device holding several non-adjacent stages) it lets some
// device wait for work a neighbour could have sent earlier; justification (simulator/justify.h)
// packs the fill and the drain but keeps each device's relative order. A swap on the critical
// path changes exactly the orders that decide the iteration time.
//
// Moves that make a cycle (an op and one it transitively feeds) are rejected by the evaluator
// and skipped; with `keep_memory_fit`, so are moves after which a device no longer fits its
// memory (when the input fits). The objective is the synchronous iteration time; a move is
// kept only if the steady-state period is no worse than the input's, so the result is never
// worse on either clock. Timing is the evaluator's, with or without link contention as the
// problem says.
//
// Deterministic (no randomness; ties to the earlier move on the path). O(iterations x moves x
// evaluation); allocation per step. Thread-compatible.
#ifndef OCTOPIPE_SIMULATOR_CRITICAL_SWAP_H_
#define OCTOPIPE_SIMULATOR_CRITICAL_SWAP_H_

#include <functional>

#include "absl/status/statusor.h"
#include "core/schedule.h"
#include "simulator/problem.h"

namespace octopipe {

struct CriticalSwapOptions {
  int max_iterations = 100;  // tabu steps (each evaluates every move on the critical path)
  int tabu_tenure = 8;       // steps a swapped pair stays forbidden
  bool keep_memory_fit = true;
  // Polled once per step; true ends the search with the best order so far. Not owned.
  const std::function<bool()>* should_stop = nullptr;
};

struct CriticalSwapResult {
  Schedule schedule;            // the best order found (the input's when nothing beat it)
  double iteration_time_s = 0;  // its synchronous iteration time
  double input_time_s = 0;
  int iterations = 0;    // tabu steps taken
  int evaluations = 0;   // moves evaluated
  int improvements = 0;  // steps that set a new best
};

// kInvalidArgument when `schedule` is not a complete, deadlock-free schedule of `problem`.
absl::StatusOr<CriticalSwapResult> CriticalSwapSearch(const PipelineProblem& problem,
                                                      const Schedule& schedule,
                                                      const CriticalSwapOptions& options = {});

}  // namespace octopipe

#endif  // OCTOPIPE_SIMULATOR_CRITICAL_SWAP_H_
