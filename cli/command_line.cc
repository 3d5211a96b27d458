#include "cli/command_line.h"

#include <algorithm>
#include <cmath>

#include <CLI/CLI.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace octopipe::cli {
namespace {

// A CLI11 check run on the text before conversion, so a bad value is reported as
// "--flag: expected <what>, got 'text'" rather than in CLI11's own words.
CLI::Validator Expect(const std::string& what, bool (*ok)(const std::string&)) {
  return CLI::Validator(
      [what, ok](std::string& text) {
        return ok(text) ? std::string() : absl::StrCat("expected ", what, ", got '", text, "'");
      },
      /*validator_desc=*/"");
}

bool IsInt(const std::string& s) {
  int64_t v;
  return absl::SimpleAtoi(s, &v);
}

bool IsDouble(const std::string& s) {  // finite: no flag takes nan or inf
  double v;
  return absl::SimpleAtod(s, &v) && std::isfinite(v);
}

bool IsBool(const std::string& s) {
  const std::string l = absl::AsciiStrToLower(s);
  return l == "true" || l == "false" || l == "1" || l == "0";
}

// `text` with its line breaks dropped, re-wrapped at `width` columns.
std::string Wrap(const std::string& text, size_t width) {
  std::string out, line;
  for (absl::string_view word :
       absl::StrSplit(absl::StrReplaceAll(text, {{"\n", " "}}), ' ', absl::SkipEmpty())) {
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      absl::StrAppend(&out, line, "\n");
      line.clear();
    }
    absl::StrAppend(&line, line.empty() ? "" : " ", word);
  }
  return out + line;
}

// The help column of a flag: its help with the default appended, wrapped to fit beside the
// flag names (CLI11 indents the continuation lines under the first).
std::string Describe(const std::string& help, const std::string& default_text) {
  return Wrap(absl::StrCat(help, " (default: ", default_text, ")"), 68);
}

}  // namespace

CommandLine::CommandLine(const std::string& command, const std::string& summary)
    : app_(std::make_unique<CLI::App>(Wrap(summary, 96) + "\n", "octopipe " + command)) {
  app_->allow_extras();  // collected and reported as "unknown flag" by Parse
  // A flag given twice takes the last value (as before CLI11), so a script's defaults can be
  // overridden by appending to its command line.
  app_->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app_->get_formatter()->column_width(30);
}

CommandLine::~CommandLine() = default;

void CommandLine::String(const std::string& name, std::string* dest, const std::string& help) {
  app_->add_option("--" + name, *dest, Describe(help, dest->empty() ? "none" : *dest))
      ->type_name("TEXT");
}

void CommandLine::Int(const std::string& name, int64_t* dest, const std::string& help) {
  app_->add_option("--" + name, *dest, Describe(help, absl::StrCat(*dest)))
      ->type_name("INT")
      ->check(Expect("an integer", IsInt));
}

void CommandLine::Double(const std::string& name, double* dest, const std::string& help) {
  app_->add_option("--" + name, *dest, Describe(help, absl::StrCat(*dest)))
      ->type_name("NUMBER")
      ->check(Expect("a finite number", IsDouble));
}

void CommandLine::Bool(const std::string& name, bool* dest, const std::string& help) {
  // Bare --name means true; --name=false turns it off.
  app_->add_flag("--" + name, *dest, Describe(help, *dest ? "true" : "false"))
      ->check(Expect("true or false", IsBool));
  bool_flags_.push_back(name);
}

std::vector<std::string> CommandLine::Normalize(const std::vector<std::string>& args) const {
  std::vector<std::string> out;
  out.reserve(args.size());
  bool positional = false;
  for (const std::string& arg : args) {
    if (positional || !absl::StartsWith(arg, "--") || arg == "--") {
      positional = positional || arg == "--";
      out.push_back(arg);
      continue;
    }
    const size_t eq = arg.find('=');
    std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const std::string value = eq == std::string::npos ? "" : arg.substr(eq);
    const auto declared = [&](const std::string& n) {
      return app_->get_option_no_throw("--" + n) != nullptr;
    };
    if (!declared(name) && declared(absl::StrReplaceAll(name, {{"-", "_"}}))) {
      name = absl::StrReplaceAll(name, {{"-", "_"}});
    }
    if (!declared(name) && value.empty() &&
        (absl::StartsWith(name, "no-") || absl::StartsWith(name, "no_"))) {
      const std::string flag = absl::StrReplaceAll(name.substr(3), {{"-", "_"}});
      if (std::find(bool_flags_.begin(), bool_flags_.end(), flag) != bool_flags_.end()) {
        out.push_back(absl::StrCat("--", flag, "=false"));
        continue;
      }
    }
    out.push_back(absl::StrCat("--", name, value));
  }
  return out;
}

absl::Status CommandLine::Parse(const std::vector<std::string>& args) {
  // "--name=" with nothing after it is a mistake (an unset shell variable, a typo), never a way
  // to ask for the default: refused, rather than read as the flag's next argument or as "".
  for (const std::string& arg : args) {
    if (arg == "--") break;
    if (absl::StartsWith(arg, "--") && absl::EndsWith(arg, "=") &&
        arg.find('=') == arg.size() - 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          arg, ": empty value (leave the flag out for its default)"));
    }
  }
  const std::vector<std::string> normalized = Normalize(args);
  // CLI11 takes the arguments last first.
  std::vector<std::string> reversed(normalized.rbegin(), normalized.rend());
  try {
    app_->parse(reversed);
  } catch (const CLI::CallForHelp&) {
    help_requested_ = true;
    return absl::OkStatus();
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(e.what());
  }
  for (const std::string& extra : app_->remaining()) {
    if (absl::StartsWith(extra, "-")) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag ", extra.substr(0, extra.find('='))));
    }
    return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", extra,
                                                   "' (flags are --name=value)"));
  }
  return absl::OkStatus();
}

bool CommandLine::was_set(const std::string& name) const {
  const CLI::Option* opt = app_->get_option_no_throw("--" + name);
  return opt != nullptr && opt->count() > 0;
}

std::string CommandLine::Usage() const { return app_->help(); }

}  // namespace octopipe::cli
