// `octopipe jobs SUBCOMMAND`: create, list, get, delete and watch jobs on a running planner.
#ifndef OCTOPIPE_CLI_JOBS_COMMAND_H_
#define OCTOPIPE_CLI_JOBS_COMMAND_H_

#include <ostream>
#include <string>
#include <vector>

namespace octopipe::cli {

int RunJobs(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace octopipe::cli

#endif  // OCTOPIPE_CLI_JOBS_COMMAND_H_
