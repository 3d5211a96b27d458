#include "logging/logging.h"

#include <sstream>
#include <string>
#include <vector>

#include <spdlog/sinks/ostream_sink.h>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace octopipe::logging {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

// Routes every logger into `out` with `json` and `level`.
void CaptureInto(std::ostringstream& out, bool json,
                 spdlog::level::level_enum level = spdlog::level::info) {
  LogOptions options;
  options.json = json;
  options.level = level;
  options.sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  Configure(options);
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

TEST(LoggingTest, JsonEventIsOneObjectPerLineWithItsFields) {
  std::ostringstream out;
  CaptureInto(out, /*json=*/true);
  Event(*Logger("replan"), spdlog::level::info, "re-plan decision",
        {{"job", "job-7"}, {"deviation", 0.25}, {"replan", true}});
  Logger("rpc")->warn("plain \"quoted\" message");
  const std::vector<std::string> lines = Lines(out.str());
  ASSERT_EQ(lines.size(), 2u) << out.str();
  const nlohmann::json event = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(event["logger"], "replan");
  EXPECT_EQ(event["level"], "info");
  EXPECT_EQ(event["msg"], "re-plan decision");
  EXPECT_EQ(event["job"], "job-7");
  EXPECT_EQ(event["deviation"], 0.25);
  EXPECT_EQ(event["replan"], true);
  EXPECT_THAT(event["time"].get<std::string>(),
              MatchesRegex("[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}\\.[0-9]{3}Z"));
  const nlohmann::json plain = nlohmann::json::parse(lines[1]);
  EXPECT_EQ(plain["logger"], "rpc");
  EXPECT_EQ(plain["level"], "warning");
  EXPECT_EQ(plain["msg"], "plain \"quoted\" message");
  EXPECT_FALSE(plain.contains("job"));  // fields do not leak into the next line
}

TEST(LoggingTest, TextEventAppendsKeyValuePairs) {
  std::ostringstream out;
  CaptureInto(out, /*json=*/false);
  Event(*Logger("agents"), spdlog::level::info, "agent registered",
        {{"node", "node-1"}, {"devices", 4}, {"address", "has space"}});
  const std::vector<std::string> lines = Lines(out.str());
  ASSERT_EQ(lines.size(), 1u) << out.str();
  EXPECT_THAT(lines[0], HasSubstr("info  [agents] agent registered node=node-1 devices=4 "
                                  "address=\"has space\""));
}

TEST(LoggingTest, LinesBelowTheLevelAreDropped) {
  std::ostringstream out;
  CaptureInto(out, /*json=*/true, spdlog::level::warn);
  Event(*Logger("jobs"), spdlog::level::info, "dropped", {});
  Logger("jobs")->debug("dropped too");
  Logger("jobs")->error("kept");
  const std::vector<std::string> lines = Lines(out.str());
  ASSERT_EQ(lines.size(), 1u) << out.str();
  EXPECT_THAT(lines[0], HasSubstr("\"kept\""));
}

TEST(LoggingTest, SameComponentIsSameLogger) {
  EXPECT_EQ(Logger("store"), Logger("store"));
  EXPECT_NE(Logger("store"), Logger("jobs"));
  EXPECT_EQ(Logger("store")->name(), "store");
}

TEST(LoggingTest, ParseLevelAcceptsSpdlogNamesAndRefusesOthers) {
  EXPECT_EQ(*ParseLevel("debug"), spdlog::level::debug);
  EXPECT_EQ(*ParseLevel("WARN"), spdlog::level::warn);
  EXPECT_EQ(*ParseLevel("warning"), spdlog::level::warn);
  EXPECT_EQ(*ParseLevel("off"), spdlog::level::off);
  absl::StatusOr<spdlog::level::level_enum> bad = ParseLevel("loud");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("'loud'"));
}

}  // namespace
}  // namespace octopipe::logging
