// `octopipe simulate`: evaluates classic schedules (or a plan file) on a model and cluster and
// prints the comparison table, one run in detail, or JSON.
#ifndef OCTOPIPE_CLI_SIMULATE_COMMAND_H_
#define OCTOPIPE_CLI_SIMULATE_COMMAND_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace octopipe::cli {

struct SimulateOptions {
  // FILE, zoo:NAME or synthetic:layers=L,f=F,b=B,w=W. The default is the embedded demo.
  std::string model = "zoo:nemotron-h-8b";
  // FILE, preset:NAME or synthetic:devices=P.
  std::string cluster = "preset:h100-1node";
  // One of the schedule names, or "all" for the comparison table.
  std::string schedule = "all";
  int64_t devices = 0;       // 0: every device of the cluster
  int64_t microbatches = 0;  // 0: the model's training.num_microbatches
  int64_t chunks = 0;        // 0: the schedule's own (interleaved: 2)
  std::string plan;          // evaluate this plan file instead of a classic schedule
  std::string trace;         // write a Chrome/Perfetto trace of the (single) run here
  bool json = false;
  bool contention = false;   // serve transfers on one link one at a time
  bool ep_overlap = false;   // sets the model's training.ep_comm_overlap, as `plan --ep_overlap`
};

// Runs the command; returns the process exit code (0 ok, 1 failed, 2 bad usage).
int RunSimulate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace octopipe::cli

#endif  // OCTOPIPE_CLI_SIMULATE_COMMAND_H_
