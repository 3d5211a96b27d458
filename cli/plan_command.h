// `octopipe plan`: tunes partition, placement and schedule for a model on a cluster, compares
// with every baseline, and writes the plan.
#ifndef OCTOPIPE_CLI_PLAN_COMMAND_H_
#define OCTOPIPE_CLI_PLAN_COMMAND_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace octopipe::cli {

struct PlanOptions {
  std::string model = "zoo:nemotron-h-8b";
  std::string cluster = "preset:h100-1node";
  int64_t devices = 0;       // 0: every device of the cluster
  int64_t microbatches = 0;  // 0: the model's training.num_microbatches
  double time_budget = 10;   // seconds; the best plan so far is returned when it runs out
  int64_t seed = 1;
  int64_t threads = 2;
  std::string objective = "synchronous";  // or steady-state
  std::string out;    // plan file to write
  std::string trace;  // Chrome trace of the plan
  bool json = false;
  bool contention = false;
  bool quiet = false;  // no progress lines on stderr
  std::string vocab_parallel = "auto";  // split the output layer: auto, on or off
};

int RunPlan(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace octopipe::cli

#endif  // OCTOPIPE_CLI_PLAN_COMMAND_H_
