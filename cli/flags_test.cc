#include "cli/flags.h"

#include "gtest/gtest.h"

namespace octopipe::cli {
namespace {

TEST(FlagSetTest, ParsesEveryTypeAndBothForms) {
  std::string model = "zoo:x";
  int64_t devices = 0;
  double budget = 10;
  bool json = false, contention = true;
  FlagSet flags("simulate", "summary");
  flags.String("model", &model, "model");
  flags.Int("devices", &devices, "devices");
  flags.Double("time-budget", &budget, "budget");
  flags.Bool("json", &json, "json");
  flags.Bool("contention", &contention, "contention");
  ASSERT_TRUE(flags.Parse({"--model=a.json", "--devices", "8", "--time-budget=2.5", "--json",
                           "--no-contention"})
                  .ok());
  EXPECT_EQ(model, "a.json");
  EXPECT_EQ(devices, 8);
  EXPECT_DOUBLE_EQ(budget, 2.5);
  EXPECT_TRUE(json);
  EXPECT_FALSE(contention);
  EXPECT_TRUE(flags.was_set("devices"));
  EXPECT_NE(flags.Usage().find("--time-budget=VALUE"), std::string::npos);
  EXPECT_NE(flags.Usage().find("default: \"zoo:x\""), std::string::npos);
}

TEST(FlagSetTest, ErrorsNameTheFlag) {
  int64_t devices = 0;
  FlagSet flags("simulate", "summary");
  flags.Int("devices", &devices, "devices");
  absl::Status s = flags.Parse({"--devcies=3"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("unknown flag --devcies"), absl::string_view::npos);
  s = flags.Parse({"--devices=three"});
  EXPECT_NE(s.message().find("--devices: expected an integer, got 'three'"),
            absl::string_view::npos);
  s = flags.Parse({"stray"});
  EXPECT_NE(s.message().find("unexpected argument 'stray'"), absl::string_view::npos);
  s = flags.Parse({"--devices"});
  EXPECT_NE(s.message().find("--devices: missing value"), absl::string_view::npos);
}

}  // namespace
}  // namespace octopipe::cli
