// `octopipe train`: runs a plan on the executor's reference model with one process (Gloo over
// TCP) or one thread (in-process transport) per rank, then reports loss per iteration, the
// measured iteration time and bubble ratio, and the simulator's prediction for the same plan
// fed with the measured op times.
#ifndef OCTOPIPE_CLI_TRAIN_COMMAND_H_
#define OCTOPIPE_CLI_TRAIN_COMMAND_H_

#include <ostream>
#include <string>
#include <vector>

namespace octopipe::cli {

int RunTrain(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace octopipe::cli

#endif  // OCTOPIPE_CLI_TRAIN_COMMAND_H_
