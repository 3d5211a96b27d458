#include "core/cluster_presets.h"

#include "gtest/gtest.h"

namespace octopipe {
namespace {

TEST(ClusterPresetsTest, EveryPresetIsValidWithEightDevicesPerNode) {
  for (const std::string& name : ClusterPresetNames()) {
    auto c = ClusterPreset(name);
    ASSERT_TRUE(c.ok()) << name;
    EXPECT_TRUE(Validate(*c).ok()) << name << ": " << Validate(*c);
    EXPECT_EQ(c->num_devices() % 8, 0) << name;
  }
}

TEST(ClusterPresetsTest, LinksAndHardwareFollowTheData) {
  auto c = ClusterPreset("h100-4nodes");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->num_devices(), 32);
  EXPECT_DOUBLE_EQ(c->device_hardware(31).peak_flops, 989e12);
  EXPECT_DOUBLE_EQ(c->link(0, 7).bandwidth, 450e9);   // same node: NVLink, one direction
  EXPECT_DOUBLE_EQ(c->link(7, 8).bandwidth, 50e9);    // across nodes: IB NDR
  auto mixed = ClusterPreset("mixed-h100-a100");
  ASSERT_TRUE(mixed.ok());
  EXPECT_DOUBLE_EQ(mixed->device_hardware(0).peak_flops, 989e12);
  EXPECT_DOUBLE_EQ(mixed->device_hardware(16).peak_flops, 312e12);
  EXPECT_DOUBLE_EQ(mixed->link(16, 17).bandwidth, 300e9);
}

TEST(ClusterPresetsTest, UnknownNameListsTheValidOnes) {
  auto c = ClusterPreset("b200");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("h100-1node"), absl::string_view::npos);
}

}  // namespace
}  // namespace octopipe
