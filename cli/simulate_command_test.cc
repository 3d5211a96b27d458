// Pins `octopipe simulate` end to end (flags -> files -> simulator -> output): the closed-form
// bubbles through the CLI, and a clear error naming the flag or field for each bad input.
#include "cli/simulate_command.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/json_text.h"
#include "core/test_dirs.h"
#include "gtest/gtest.h"

namespace octopipe::cli {
namespace {

using ::octopipe::testing::TestPath;

struct CliRun {
  int code;
  std::string out, err;
};

CliRun Simulate(std::vector<std::string> args) {
  std::ostringstream out, err;
  const int code = RunSimulate(args, out, err);
  return {code, out.str(), err.str()};
}

// The output parsed; null when it is not JSON.
Json JsonOf(const CliRun& r) {
  Json j = Json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << r.out << r.err;
  return j.is_discarded() ? Json() : j;
}

double Num(const Json& j, const char* key) {
  const bool found = j.is_object() && j.contains(key) && j.at(key).is_number();
  EXPECT_TRUE(found) << key;
  return found ? j.at(key).get<double>() : -1;
}

std::vector<std::string> Synthetic(int layers, int p, int m, const std::string& schedule) {
  return {"--model=synthetic:layers=" + std::to_string(layers) + ",f=1,b=1,w=1",
          "--cluster=synthetic:devices=" + std::to_string(p),
          "--devices=" + std::to_string(p),
          "--microbatches=" + std::to_string(m),
          "--schedule=" + schedule,
          "--json"};
}

TEST(SimulateCommandTest, ClosedFormsHoldThroughTheCli) {
  // GPipe and 1F1B: bubble (p-1)/(m+p-1).
  for (const char* s : {"gpipe", "1f1b"}) {
    Json j = JsonOf(Simulate(Synthetic(4, 4, 8, s)));
    EXPECT_NEAR(Num(j, "bubble_ratio"), 3.0 / 11.0, 1e-12) << s;
  }
  // Interleaved, v = 2, 8 layers on 4 devices: (p-1)/(v m + p - 1).
  auto args = Synthetic(8, 4, 8, "interleaved");
  args.push_back("--chunks=2");
  EXPECT_NEAR(Num(JsonOf(Simulate(args)), "bubble_ratio"), 3.0 / 19.0, 1e-12);
  // ZB-H1: 3m + p - 1 under both definitions.
  Json h1 = JsonOf(Simulate(Synthetic(8, 8, 24, "zb-h1")));
  EXPECT_DOUBLE_EQ(Num(h1, "iteration_time_s"), 79);
  EXPECT_DOUBLE_EQ(Num(h1, "steady_state_iteration_time_s"), 79);
  // ZB-H2: steady-state 3m, no steady-state bubble, synchronous 3m + p - 1.
  Json h2 = JsonOf(Simulate(Synthetic(4, 4, 8, "zb-h2")));
  EXPECT_DOUBLE_EQ(Num(h2, "steady_state_iteration_time_s"), 24);
  EXPECT_NEAR(Num(h2, "steady_state_bubble_ratio"), 0, 1e-12);
  EXPECT_DOUBLE_EQ(Num(h2, "iteration_time_s"), 27);
  // ZB-V: one unit layer per stage, 2 chunks: steady-state 6m, synchronous 6m + p - 1.
  Json v = JsonOf(Simulate(Synthetic(16, 8, 24, "zb-v")));
  EXPECT_DOUBLE_EQ(Num(v, "steady_state_iteration_time_s"), 144);
  EXPECT_NEAR(Num(v, "steady_state_bubble_ratio"), 0, 1e-12);
  EXPECT_DOUBLE_EQ(Num(v, "iteration_time_s"), 151);
}

TEST(SimulateCommandTest, JsonCarriesEveryDocumentedField) {
  Json j = JsonOf(Simulate(Synthetic(4, 4, 8, "1f1b")));
  for (const char* key : {"iteration_time_s", "bubble_ratio", "steady_state_iteration_time_s",
                          "steady_state_bubble_ratio", "tokens_per_s", "schedule", "devices"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  ASSERT_TRUE(j.contains("devices"));
  const Json& devices = j.at("devices");
  ASSERT_EQ(devices.size(), 4u);
  for (const char* key : {"busy_s", "bubble_ratio", "peak_memory_bytes"}) {
    EXPECT_TRUE(devices[0].contains(key)) << key;
  }
  EXPECT_EQ(j.value("schedule", ""), "1f1b");
}

TEST(SimulateCommandTest, DefaultComparesEveryScheduleOnTheEmbeddedModel) {
  CliRun r = Simulate({});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* s : {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "dualpipev"}) {
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
  }
  EXPECT_NE(r.out.find("nemotron-h-8b"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("n/a"), std::string::npos) << "every schedule runs by default:\n" << r.out;
}

TEST(SimulateCommandTest, TraceFileIsValidJsonWithOneEventPerOp) {
  const std::string path = TestPath("trace.json");
  auto args = Synthetic(4, 4, 8, "1f1b");
  args.push_back("--trace=" + path);
  CliRun r = Simulate(args);
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const Json j = Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << "trace is not JSON";
  ASSERT_TRUE(j.contains("traceEvents"));
  int compute = 0;
  for (const Json& e : j.at("traceEvents")) {
    if (e.value("ph", "") == "X" && e.value("cat", "") != "transfer") ++compute;
  }
  EXPECT_EQ(compute, 4 * 8 * 2);  // F and BW per stage and micro-batch
}

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = TestPath(name);
  std::ofstream(path) << text;
  return path;
}

TEST(SimulateCommandTest, BadInputsAreClearErrorsNamingTheFlagOrField) {
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  const std::string malformed = WriteFile("bad.json", "{\"layers\": [ {\"kind\": \"mlp\" ");
  const std::string unknown_kind = WriteFile(
      "kind.json",
      R"({"name":"x","layers":[{"kind":"transformer","dims":{"hidden":8,"ffn":8}}],)"
      R"("training":{"seq_len":8,"micro_batch_size":1,"num_microbatches":2}})");
  const std::string zero_size = WriteFile(
      "zero.json",
      R"({"name":"x","layers":[{"kind":"mlp","dims":{"hidden":0,"ffn":8}}],)"
      R"("training":{"seq_len":8,"micro_batch_size":1,"num_microbatches":2}})");
  const std::vector<Case> cases = {
      {{"--model=" + malformed}, "--model"},
      {{"--model=" + unknown_kind}, "layers[0].kind"},
      {{"--model=" + zero_size}, "layers[0].dims.hidden"},
      {{"--model=/no/such/file.json"}, "--model"},
      {Synthetic(4, 8, 8, "1f1b"), "--devices"},           // P larger than the stage count
      {Synthetic(4, 4, 0, "1f1b"), "--microbatches must be >= 1, got 0"},
      {Synthetic(4, 4, -3, "1f1b"), "--microbatches must be >= 1, got -3"},
      {{"--model=synthetic:layers=0,f=1,b=1,w=1", "--cluster=synthetic:devices=1"}, "--model"},
      {{"--model=synthetic:layers=4,f=-1,b=1,w=1", "--cluster=synthetic:devices=1"}, "--model"},
      {{"--cluster=synthetic:devices=0"}, "--cluster"},
      {{"--schedule=2f2b"}, "--schedule: unknown schedule '2f2b'"},
      {{"--devcies=4"}, "unknown flag --devcies"},
      {{"--devices=x"}, "--devices: expected an integer"},
      {{"--cluster=preset:b200"}, "--cluster: unknown cluster preset 'b200'"},
      {{"--model=zoo:gpt5"}, "--model: "},
  };
  for (const Case& c : cases) {
    CliRun r = Simulate(c.args);
    EXPECT_NE(r.code, 0) << c.expect;
    EXPECT_NE(r.err.find(c.expect), std::string::npos)
        << "expected '" << c.expect << "' in: " << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

TEST(SimulateCommandTest, HelpListsEveryFlag) {
  CliRun r = Simulate({"--help"});
  EXPECT_EQ(r.code, 0);
  for (const char* flag : {"--model", "--cluster", "--schedule", "--devices", "--microbatches",
                           "--chunks", "--plan", "--trace", "--json", "--contention"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
}

}  // namespace
}  // namespace octopipe::cli
