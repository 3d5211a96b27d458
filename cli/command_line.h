// CommandLine: the per-command flag parser of the `octopipe` tool, a thin layer over CLI11.
//
// Each command declares its flags (name, destination, help) and parses its own arguments, so
// `octopipe simulate --help` documents exactly the flags `simulate` takes, each with its default,
// and a misspelt flag is an error naming it. What this layer adds to CLI11:
//  - One naming style: flags are declared in snake_case (`--time_budget`, as the planner's
//    `--token_file`). The hyphenated spelling of a multi-word flag (`--time-budget`) and
//    `--no-NAME` / `--no_NAME` for a boolean are accepted as hidden aliases (old scripts), never
//    shown in --help.
//  - One-line errors that name the flag and the value, as absl::Status kInvalidArgument:
//    "unknown flag --devcies", "--devices: expected an integer, got 'x'",
//    "--json: expected true or false, got 'maybe'". Positional arguments are rejected.
// Accepts --name=value and --name value; booleans also bare --name. A flag given twice takes the
// last value. Flags live only in cli/
// (libraries never read flags). Not thread-safe; one instance per parse.
#ifndef OCTOPIPE_CLI_COMMAND_LINE_H_
#define OCTOPIPE_CLI_COMMAND_LINE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace CLI {
class App;
}  // namespace CLI

namespace octopipe::cli {

class CommandLine {
 public:
  // `command` is what follows "octopipe" ("simulate", "jobs create"); `summary` heads --help.
  CommandLine(const std::string& command, const std::string& summary);
  ~CommandLine();
  CommandLine(const CommandLine&) = delete;
  CommandLine& operator=(const CommandLine&) = delete;

  // Declares --NAME (NAME in snake_case) bound to *dest; *dest's value now is the default
  // shown in --help.
  void String(const std::string& name, std::string* dest, const std::string& help);
  void Int(const std::string& name, int64_t* dest, const std::string& help);
  void Double(const std::string& name, double* dest, const std::string& help);
  void Bool(const std::string& name, bool* dest, const std::string& help);

  // Parses args (without the program and command names). Sets help_requested() on --help/-h.
  absl::Status Parse(const std::vector<std::string>& args);

  bool help_requested() const { return help_requested_; }
  // Whether the flag (snake_case name, without dashes) was given on the command line.
  bool was_set(const std::string& name) const;
  // --help text: the summary, then every flag with its type, default and help.
  std::string Usage() const;

 private:
  // Rewrites hidden aliases (--time-budget, --no-json) to the declared spellings.
  std::vector<std::string> Normalize(const std::vector<std::string>& args) const;

  std::unique_ptr<CLI::App> app_;
  std::vector<std::string> bool_flags_;
  bool help_requested_ = false;
};

}  // namespace octopipe::cli

#endif  // OCTOPIPE_CLI_COMMAND_LINE_H_
