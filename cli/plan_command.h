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
  // Set: one pipeline over the cluster's first `devices` devices (no TP/DP layout search).
  // Unset: the planner chooses PP x TP x EP x DP over every GPU (tuner/layout.h), keeping
  // whatever --pp/--tp/--ep/--dp fix.
  int64_t devices = 0;
  int64_t pp = 0, tp = 0, ep = 0, dp = 0;  // 0: chosen by the layout search
  int64_t max_layouts = 3;                 // layouts tuned in full
  int64_t microbatches = 0;  // 0: the model's training.num_microbatches
  double time_budget = 10;   // seconds; the best plan so far is returned when it runs out
  std::string budget_clock = "wall";  // or "reads": the budget counted in the tuner's clock reads
  int64_t seed = 1;
  int64_t threads = 0;  // evaluation threads; 0: one per core of this machine
  std::string objective = "synchronous";  // or steady-state
  std::string out;    // plan file to write
  std::string trace;  // Chrome trace of the plan
  bool json = false;
  bool contention = false;
  bool quiet = false;  // no progress lines on stderr
  std::string vocab_parallel = "auto";  // split the output layer: auto, on or off
  // Executor constraints (tuner/constraints.h).
  bool no_bw_split = false;
  int64_t max_stages_per_device = 0;
  bool no_recompute = false;
  bool ep_overlap = false;  // sets the model's training.ep_comm_overlap
  std::string recompute = "auto";  // auto (the model's training.recompute), none, selective, full
  std::string fixed_partition;  // "0-3,4-9,..."
  std::string fixed_placement;  // "0,1,..." (needs fixed_partition)
};

int RunPlan(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace octopipe::cli

#endif  // OCTOPIPE_CLI_PLAN_COMMAND_H_
