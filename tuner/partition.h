// Partitioning the layer chain into pipeline stages.
//
// MinMaxPartition is exact: among all splits of the L layers into S contiguous non-empty stages
// it returns one minimising the largest stage work (F + B + W seconds of the stage's layers on
// the device the stage is placed on, so heterogeneous devices and the embedding / head layers
// are accounted for). Dynamic programming over (stage, layer) in O(S * L^2) time, O(S * L)
// memory — 40 ms at L = 250, S = 250.
#ifndef OCTOPIPE_TUNER_PARTITION_H_
#define OCTOPIPE_TUNER_PARTITION_H_

#include <vector>

#include "absl/status/statusor.h"
#include "core/plan.h"
#include "simulator/problem_builder.h"

namespace octopipe {

// `stage_device[s]` is the device of stage s; the result carries it. kInvalidArgument when
// there are more stages than layers.
absl::StatusOr<std::vector<StageAssignment>> MinMaxPartition(const ProblemBuilder& builder,
                                                             const std::vector<int>& stage_device);

// The same with a weight per device: minimises max over stages of
// device_weight[device] * stage work. The tuner lowers the weight of devices that idle in the
// simulated pipeline so they receive more layers (bubble-driven rebalancing).
absl::StatusOr<std::vector<StageAssignment>> WeightedMinMaxPartition(
    const ProblemBuilder& builder, const std::vector<int>& stage_device,
    const std::vector<double>& device_weight);

// Balances device loads (a device's load is the weighted work of all its stages) by boundary
// moves of one layer, minimising sum_d (load_d / mean)^8, a smooth maximum that lets load flow
// through chains of stages. The exact stage-level min-max cannot balance devices that hold
// several stages (loop and V placements); this can. Keeps the placement; every stage keeps at
// least one layer. O(S) per move, converges in at most a few thousand moves.
std::vector<StageAssignment> BalanceDeviceLoads(const ProblemBuilder& builder,
                                                std::vector<StageAssignment> stages,
                                                const std::vector<double>& device_weight);

// The largest stage work of a partition (the quantity MinMaxPartition minimises).
double MaxStageWork(const ProblemBuilder& builder, const std::vector<StageAssignment>& stages);

}  // namespace octopipe

#endif  // OCTOPIPE_TUNER_PARTITION_H_
