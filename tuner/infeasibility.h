// The tuner's answer for a model that fits nowhere: "infeasible" with a reason and the memory
// each device would need, not an error: a caller must tell "this model does not fit here" (fix
// the model or the cluster) apart from "the planner failed" (docs/contributing.md).
//
// What is measured: the least-memory plan among the given candidates (the search's fastest and
// closest-to-fitting ones) and every seed placement's exact min-max partition, each with full
// recompute and 1F1B's in-flight budget, split and unsplit, scheduled ignoring memory and
// ranked by its worst device's (peak + reserve) / capacity. The plan shown is `shown` when it
// can be scheduled (the fastest one ignoring memory), else that least-memory plan.
//
// Thread safety: a plain function; it only reads the builder and the classic orders.
#ifndef OCTOPIPE_TUNER_INFEASIBILITY_H_
#define OCTOPIPE_TUNER_INFEASIBILITY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cluster.h"
#include "core/plan.h"
#include "simulator/problem_builder.h"
#include "tuner/candidate.h"

namespace octopipe {

struct InfeasibleAnswer {
  // Stages and schedule only; the caller fills the plan's name and sizes.
  Plan plan;
  std::vector<double> required_memory_bytes;  // per device, reserve included
  std::string reason;  // names the worst device, what it needs and what it has
};

// `pool`: candidates found by the search (may be empty); `shown`: the plan to show, or
// nullptr for the least-memory one. kInternal when no candidate can be scheduled at all.
absl::StatusOr<InfeasibleAnswer> ExplainInfeasible(const ProblemBuilder& builder,
                                                   const Cluster& cluster,
                                                   const ClassicOrders* classic,
                                                   int num_microbatches, bool link_contention,
                                                   int max_chunks,
                                                   const std::vector<Candidate>& pool,
                                                   const Candidate* shown);

}  // namespace octopipe

#endif  // OCTOPIPE_TUNER_INFEASIBILITY_H_
