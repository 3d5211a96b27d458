// RandomPlan: a random valid pipeline plan for executor tests — random placement of S stages
// on P ranks (every rank used, several non-adjacent stages per rank), random uneven partition
// of L layers, random recompute, split or unsplit backward, and random list-scheduling
// priorities. Valid by construction: the list scheduler follows the data dependencies.
#ifndef OCTOPIPE_EXECUTOR_TESTING_RANDOM_PLAN_H_
#define OCTOPIPE_EXECUTOR_TESTING_RANDOM_PLAN_H_

#include <random>

#include "core/plan.h"

namespace octopipe::executor::testing {

// Requires 1 <= P <= S <= L. With `vocab_parallel` the head is split over the ranks
// (simulator/vocab_parallel.h): every rank's order also holds its shard's S and T passes, with
// random costs.
Plan RandomPlan(std::mt19937& rng, int num_layers, int num_ranks, int num_stages,
                int num_microbatches, bool split_backward, bool vocab_parallel = false);

}  // namespace octopipe::executor::testing

#endif  // OCTOPIPE_EXECUTOR_TESTING_RANDOM_PLAN_H_
