#include "cli/flags.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace octopipe::cli {

FlagSet::FlagSet(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {}

void FlagSet::String(const std::string& name, std::string* dest, const std::string& help) {
  flags_.push_back({name, dest, help, dest->empty() ? "" : absl::StrCat("\"", *dest, "\"")});
}
void FlagSet::Int(const std::string& name, int64_t* dest, const std::string& help) {
  flags_.push_back({name, dest, help, absl::StrCat(*dest)});
}
void FlagSet::Double(const std::string& name, double* dest, const std::string& help) {
  flags_.push_back({name, dest, help, absl::StrCat(*dest)});
}
void FlagSet::Bool(const std::string& name, bool* dest, const std::string& help) {
  flags_.push_back({name, dest, help, *dest ? "true" : "false"});
}

FlagSet::Flag* FlagSet::Find(const std::string& name) {
  for (Flag& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

bool FlagSet::was_set(const std::string& name) const {
  for (const Flag& f : flags_) {
    if (f.name == name) return f.set;
  }
  return false;
}

absl::Status FlagSet::Assign(Flag& flag, const std::string& value) {
  const std::string where = absl::StrCat("--", flag.name);
  flag.set = true;
  if (auto* s = std::get_if<std::string*>(&flag.dest)) {
    **s = value;
  } else if (auto* i = std::get_if<int64_t*>(&flag.dest)) {
    if (!absl::SimpleAtoi(value, *i)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": expected an integer, got '", value, "'"));
    }
  } else if (auto* d = std::get_if<double*>(&flag.dest)) {
    if (!absl::SimpleAtod(value, *d)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": expected a number, got '", value, "'"));
    }
  } else if (auto* b = std::get_if<bool*>(&flag.dest)) {
    if (value == "true" || value == "1" || value == "yes") {
      **b = true;
    } else if (value == "false" || value == "0" || value == "no") {
      **b = false;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": expected true or false, got '", value, "'"));
    }
  }
  return absl::OkStatus();
}

absl::Status FlagSet::Parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h" || arg == "-help") {
      help_requested_ = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unexpected argument '", arg, "' for 'octopipe ", command_, "' (flags look like --name=value)"));
    }
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    Flag* flag = Find(name);
    if (flag == nullptr && !has_value && name.rfind("no-", 0) == 0) {
      Flag* negated = Find(name.substr(3));
      if (negated != nullptr && std::holds_alternative<bool*>(negated->dest)) {
        *std::get<bool*>(negated->dest) = false;
        negated->set = true;
        continue;
      }
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " for 'octopipe ",
                                                     command_, "' (see octopipe ", command_,
                                                     " --help)"));
    }
    if (!has_value) {
      if (std::holds_alternative<bool*>(flag->dest)) {
        value = "true";
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("--", name, ": missing value"));
      }
    }
    absl::Status s = Assign(*flag, value);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

std::string FlagSet::Usage() const {
  std::string out = absl::StrCat("usage: octopipe ", command_, " [flags]\n\n", summary_, "\n\nflags:\n");
  for (const Flag& f : flags_) {
    absl::StrAppend(&out, "  --", f.name);
    if (!std::holds_alternative<bool*>(f.dest)) absl::StrAppend(&out, "=VALUE");
    absl::StrAppend(&out, "\n");
    // Indent the help text.
    std::string help = f.help;
    size_t start = 0;
    while (start <= help.size()) {
      const size_t nl = help.find('\n', start);
      absl::StrAppend(&out, "      ", help.substr(start, nl == std::string::npos
                                                          ? std::string::npos
                                                          : nl - start), "\n");
      if (nl == std::string::npos) break;
      start = nl + 1;
    }
    if (!f.default_text.empty()) absl::StrAppend(&out, "      default: ", f.default_text, "\n");
  }
  absl::StrAppend(&out, "  --help\n      print this text\n");
  return out;
}

}  // namespace octopipe::cli
