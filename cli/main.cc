// The `octopipe` command: the one place flags are parsed and pieces wired together.
#include <iostream>
#include <string>
#include <vector>

#include "cli/jobs_command.h"
#include "cli/plan_command.h"
#include "cli/profile_command.h"
#include "cli/simulate_command.h"
#include "cli/train_command.h"

namespace {

constexpr char kUsage[] =
    "usage: octopipe COMMAND [flags]\n"
    "\n"
    "OctoPipe plans and simulates pipeline-parallel training of heterogeneous LLMs.\n"
    "\n"
    "commands:\n"
    "  simulate   evaluate pipeline schedules (or a plan file) with the DAG simulator\n"
    "  plan       tune partition, placement and schedule; compare with every baseline\n"
    "             (locally, or on a running planner with --planner=HOST:PORT)\n"
    "  jobs       create, list, get, delete and watch jobs on a running planner\n"
    "  train      run a plan on the reference model with one process per rank (Gloo)\n"
    "  profile    measure the reference model on this machine: model + cluster files to plan\n"
    "             for real runs (then `plan --model=P.model.json --cluster=P.cluster.json`)\n"
    "  help       print this text\n"
    "\n"
    "Run `octopipe COMMAND --help` for the flags of a command.\n";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  if (command == "simulate") return octopipe::cli::RunSimulate(args, std::cout, std::cerr);
  if (command == "plan") return octopipe::cli::RunPlan(args, std::cout, std::cerr);
  if (command == "jobs") return octopipe::cli::RunJobs(args, std::cout, std::cerr);
  if (command == "train") return octopipe::cli::RunTrain(args, std::cout, std::cerr);
  if (command == "profile") return octopipe::cli::RunProfile(args, std::cout, std::cerr);
  std::cerr << "octopipe: unknown command '" << command << "'\n\n" << kUsage;
  return 2;
}
