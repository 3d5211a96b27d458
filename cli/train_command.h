// `octopipe train`: runs a plan on the executor's reference model with one process (Gloo over
// TCP) or one thread (in-process transport) per rank, then reports loss per iteration, the
// measured iteration time and bubble ratio, and the simulator's prediction for the same plan
// fed with the measured op times.
#ifndef OCTOPIPE_CLI_TRAIN_COMMAND_H_
#define OCTOPIPE_CLI_TRAIN_COMMAND_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model_graph.h"
#include "core/plan.h"
#include "simulator/schedules.h"

namespace octopipe::cli {

int RunTrain(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// The plan `octopipe train --schedule=KIND` runs: layers split evenly, the schedule's own
// placement. Without a profile the order is GenerateSchedule's (the ZB family at unit costs).
// With `profile_prefix` (the --out of `octopipe profile`) it is the order built for the
// profile's measured costs, PREFIX.model.json + PREFIX.cluster.json: exactly the plan, order
// included, that `octopipe simulate --model=PREFIX.model.json --cluster=PREFIX.cluster.json
// --schedule=KIND` predicts (SimulateClassic), so a prediction and a run are of one order.
// Errors: kInvalidArgument naming the parameter ("profile" when its model's layer count is not
// `graph`'s), the loaders' errors for the files.
absl::StatusOr<Plan> TrainClassicPlan(ScheduleKind kind, int ranks, int chunks, int microbatches,
                                      const ModelGraph& graph, const std::string& profile_prefix);

}  // namespace octopipe::cli

#endif  // OCTOPIPE_CLI_TRAIN_COMMAND_H_
