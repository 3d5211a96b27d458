// Splitting the layer chain over the V-shape placement (simulator's VShapePlacement: 2P
// stages, device d holds stages d and 2P-1-d, as ZB-V and DualPipeV place them) so that the
// largest device load is least. The stage-level MinMaxPartition balances stages, not devices;
// in the V shape a device's two stages sit at the two ends of the layers the outer devices
// leave, so device loads can be balanced exactly.
//
// Device d's stages are the ends of the layers that devices 0..d-1 leave, so a capacity C is
// feasible when pairs can be peeled off the chain from both ends: level d marks the intervals
// [i, j) left after d devices; from [i, j) device d takes [i, a) and [e, j) with
// Work(i..a-1) + Work(e..j-1) <= C, and for each a the feasible e form a range. A binary
// search on C (relative 1e-4), then a walk back through the stored levels. Pure; thread-safe.
#ifndef OCTOPIPE_TUNER_VSHAPE_PARTITION_H_
#define OCTOPIPE_TUNER_VSHAPE_PARTITION_H_

#include <vector>

#include "core/plan.h"
#include "simulator/problem_builder.h"

namespace octopipe {

// The 2P stages (device d: stages d and 2P-1-d) minimising the largest device load (F+B+W work
// of its two stages on that device) to within 1e-4 relative. Empty when P < 2, there are fewer
// than 2P layers, or L^3 P > 2e7 (the programme costs O(P L^3 log L) per capacity probe).
std::vector<StageAssignment> VShapeMinMaxPartition(const ProblemBuilder& builder);

}  // namespace octopipe

#endif  // OCTOPIPE_TUNER_VSHAPE_PARTITION_H_
