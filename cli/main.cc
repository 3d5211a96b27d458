// The `octopipe` command: picks the subcommand; each one parses its own flags (CLI11, see
// cli/command_line.h) and wires its pieces together.
#include <iostream>
#include <string>
#include <vector>

#include "cli/jobs_command.h"
#include "cli/plan_command.h"
#include "cli/profile_command.h"
#include "cli/simulate_command.h"
#include "cli/train_command.h"

namespace {

struct Command {
  const char* name;
  const char* summary;  // lines after the first are indented under it
  int (*run)(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
};

constexpr Command kCommands[] = {
    {"simulate", "evaluate pipeline schedules (or a plan file) with the DAG simulator",
     octopipe::cli::RunSimulate},
    {"plan",
     "tune partition, placement and schedule; compare with every baseline\n"
     "(locally, or on a running planner with --planner=HOST:PORT)",
     octopipe::cli::RunPlan},
    {"jobs", "create, list, get, delete and watch jobs on a running planner",
     octopipe::cli::RunJobs},
    {"train", "run a plan on the reference model with one process per rank (Gloo)",
     octopipe::cli::RunTrain},
    {"profile",
     "measure the reference model on this machine: model + cluster files to plan\n"
     "for real runs (then `plan --model=P.model.json --cluster=P.cluster.json`)",
     octopipe::cli::RunProfile},
};

std::string Usage() {
  std::string out =
      "usage: octopipe COMMAND [flags]\n"
      "\n"
      "OctoPipe plans and simulates pipeline-parallel training of heterogeneous LLMs.\n"
      "\n"
      "commands:\n";
  for (const Command& c : kCommands) {
    std::string line = std::string("  ") + c.name;
    line.resize(13, ' ');
    for (const char* p = c.summary; *p != '\0'; ++p) {
      line += *p;
      if (*p == '\n') line += std::string(13, ' ');
    }
    out += line + "\n";
  }
  out +=
      "  help       print this text\n"
      "\n"
      "Run `octopipe COMMAND --help` for the flags of a command.\n";
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    std::cout << Usage();
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  for (const Command& c : kCommands) {
    if (command == c.name) return c.run(args, std::cout, std::cerr);
  }
  std::cerr << "octopipe: unknown command '" << command << "'\n\n" << Usage();
  return 2;
}
