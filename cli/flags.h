// FlagSet: the per-subcommand command-line parser of the `octopipe` tool.
//
// Each subcommand declares its flags (name, destination, help) and parses its own arguments, so
// `octopipe simulate --help` documents exactly the flags `simulate` takes and a misspelt flag is
// an error naming it. Accepts --name=value and --name value; booleans also --name and
// --no-name. Flags live only in cli/ (STYLE.md: libraries never read flags).
#ifndef OCTOPIPE_CLI_FLAGS_H_
#define OCTOPIPE_CLI_FLAGS_H_

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"

namespace octopipe::cli {

class FlagSet {
 public:
  FlagSet(std::string command, std::string summary);

  void String(const std::string& name, std::string* dest, const std::string& help);
  void Int(const std::string& name, int64_t* dest, const std::string& help);
  void Double(const std::string& name, double* dest, const std::string& help);
  void Bool(const std::string& name, bool* dest, const std::string& help);

  // Parses args (without the program and command names). Sets help_requested() on --help/-h.
  // Errors are kInvalidArgument naming the flag: "unknown flag --devcies", "--devices:
  // expected an integer, got 'x'". Positional arguments are rejected.
  absl::Status Parse(const std::vector<std::string>& args);

  bool help_requested() const { return help_requested_; }
  // Whether the flag was given on the command line.
  bool was_set(const std::string& name) const;
  // Usage text listing every flag with its help and default.
  std::string Usage() const;

 private:
  struct Flag {
    std::string name;
    std::variant<std::string*, int64_t*, double*, bool*> dest;
    std::string help;
    std::string default_text;
    bool set = false;
  };
  Flag* Find(const std::string& name);
  absl::Status Assign(Flag& flag, const std::string& value);

  std::string command_;
  std::string summary_;
  std::vector<Flag> flags_;
  bool help_requested_ = false;
};

}  // namespace octopipe::cli

#endif  // OCTOPIPE_CLI_FLAGS_H_
