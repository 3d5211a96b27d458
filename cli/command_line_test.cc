// Pins the CLI's flag layer: both value forms, booleans, the hidden hyphenated aliases (never in
// --help), defaults in --help, and one-line errors naming the flag and the value.
#include "cli/command_line.h"

#include "gtest/gtest.h"

namespace octopipe::cli {
namespace {

struct Values {
  std::string model = "zoo:llama3-8b";
  std::string out;
  int64_t devices = 0;
  double time_budget = 10;
  bool json = false;
  bool quiet = true;
};

void Declare(CommandLine& flags, Values& v) {
  flags.String("model", &v.model, "the model");
  flags.String("out", &v.out, "plan file");
  flags.Int("devices", &v.devices, "pipeline devices");
  flags.Double("time_budget", &v.time_budget, "seconds of search");
  flags.Bool("json", &v.json, "print JSON");
  flags.Bool("quiet", &v.quiet, "no progress");
}

TEST(CommandLineTest, ParsesEveryTypeAndBothForms) {
  Values v;
  CommandLine flags("plan", "summary");
  Declare(flags, v);
  ASSERT_TRUE(flags.Parse({"--model", "zoo:jamba-v0.1", "--devices=8", "--time_budget", "2.5",
                           "--json", "--quiet=false"})
                  .ok());
  EXPECT_EQ(v.model, "zoo:jamba-v0.1");
  EXPECT_EQ(v.devices, 8);
  EXPECT_DOUBLE_EQ(v.time_budget, 2.5);
  EXPECT_TRUE(v.json);
  EXPECT_FALSE(v.quiet);
  EXPECT_TRUE(flags.was_set("devices"));
  EXPECT_FALSE(flags.was_set("out"));
  EXPECT_FALSE(flags.help_requested());
}

TEST(CommandLineTest, AFlagGivenTwiceTakesTheLastValue) {
  Values v;
  CommandLine flags("plan", "summary");
  Declare(flags, v);
  ASSERT_TRUE(flags.Parse({"--devices=2", "--json", "--devices", "3", "--json=false"}).ok());
  EXPECT_EQ(v.devices, 3);
  EXPECT_FALSE(v.json);
}

TEST(CommandLineTest, OldHyphenatedSpellingsAreHiddenAliases) {
  Values v;
  CommandLine flags("plan", "summary");
  Declare(flags, v);
  ASSERT_TRUE(flags.Parse({"--time-budget=3", "--json", "--no-quiet"}).ok());
  EXPECT_DOUBLE_EQ(v.time_budget, 3);
  EXPECT_TRUE(flags.was_set("time_budget"));
  EXPECT_FALSE(v.quiet);
  EXPECT_EQ(flags.Usage().find("time-budget"), std::string::npos) << flags.Usage();
  EXPECT_EQ(flags.Usage().find("no-quiet"), std::string::npos) << flags.Usage();
}

TEST(CommandLineTest, HelpListsEveryFlagWithItsDefault) {
  Values v;
  CommandLine flags("plan", "Tunes a plan.");
  Declare(flags, v);
  ASSERT_TRUE(flags.Parse({"--help"}).ok());
  EXPECT_TRUE(flags.help_requested());
  const std::string usage = flags.Usage();
  for (const char* text : {"Tunes a plan.", "octopipe plan", "--model", "(default: zoo:llama3-8b)",
                           "--out", "(default: none)", "--devices", "(default: 0)",
                           "--time_budget", "(default: 10)", "--json", "(default: false)",
                           "--quiet", "(default: true)"}) {
    EXPECT_NE(usage.find(text), std::string::npos) << text << " not in:\n" << usage;
  }
}

TEST(CommandLineTest, ErrorsAreOneLineNamingTheFlagAndTheValue) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--devcies=4"}, "unknown flag --devcies"},
      {{"--devices=x"}, "--devices: expected an integer, got 'x'"},
      {{"--devices", "1.5"}, "--devices: expected an integer, got '1.5'"},
      {{"--time_budget=soon"}, "--time_budget: expected a finite number, got 'soon'"},
      {{"--time_budget=nan"}, "--time_budget: expected a finite number, got 'nan'"},
      {{"--time_budget=inf"}, "--time_budget: expected a finite number, got 'inf'"},
      // An empty value is refused, not read as the next argument or as "".
      {{"--model=", "--json"}, "--model=: empty value (leave the flag out for its default)"},
      {{"--devices="}, "--devices=: empty value"},
      {{"--json=maybe"}, "--json: expected true or false, got 'maybe'"},
      {{"stray"}, "unexpected argument 'stray'"},
  };
  for (const auto& [args, expect] : cases) {
    Values v;
    CommandLine flags("plan", "summary");
    Declare(flags, v);
    const absl::Status s = flags.Parse(args);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << expect;
    EXPECT_NE(std::string(s.message()).find(expect), std::string::npos)
        << "expected '" << expect << "' in: " << s.message();
    EXPECT_EQ(std::string(s.message()).find('\n'), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace octopipe::cli
