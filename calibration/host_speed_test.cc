// ScaleToHostSpeed: layer times and CPU costs scale, links do not; a bad ratio names itself.
#include "calibration/host_speed.h"

#include <cmath>
#include <string>

#include "core/cluster_presets.h"
#include "core/synthetic_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace octopipe {
namespace {

TEST(HostSpeedTest, ScalesLayerTimesAndCpuCostsNotLinks) {
  ModelGraph model = *ParseSyntheticModel("layers=3,f=1,b=1,w=1");
  for (int l = 0; l < 3; ++l) {
    model.layers[l].measured.forward_s = 0.01 * (l + 1);
    model.layers[l].measured.backward_input_s = 0.02;
    model.layers[l].measured.weight_grad_s = 0.03;
    model.layers[l].measured.activation_bytes = 1e6;
  }
  Cluster cluster = *ClusterPreset("h100-1node");
  cluster.hardware[0].op_overhead_s = 1e-4;
  cluster.hardware[0].message_cpu_s = 2e-4;
  const Cluster before = cluster;
  ASSERT_TRUE(ScaleToHostSpeed(1.5, &model, &cluster).ok());
  for (int l = 0; l < 3; ++l) {
    EXPECT_DOUBLE_EQ(*model.layers[l].measured.forward_s, 0.015 * (l + 1));
    EXPECT_DOUBLE_EQ(*model.layers[l].measured.backward_input_s, 0.03);
    EXPECT_DOUBLE_EQ(*model.layers[l].measured.weight_grad_s, 0.045);
    EXPECT_DOUBLE_EQ(*model.layers[l].measured.activation_bytes, 1e6);  // bytes do not scale
  }
  EXPECT_DOUBLE_EQ(cluster.hardware[0].op_overhead_s, 1.5e-4);
  EXPECT_DOUBLE_EQ(cluster.hardware[0].message_cpu_s, 3e-4);
  EXPECT_DOUBLE_EQ(cluster.inter_node_link.bandwidth, before.inter_node_link.bandwidth);
  EXPECT_DOUBLE_EQ(cluster.inter_node_link.latency_s, before.inter_node_link.latency_s);
}

TEST(HostSpeedTest, ABadRatioIsRefusedNamingIt) {
  ModelGraph model = *ParseSyntheticModel("layers=2,f=1,b=1,w=1");
  Cluster cluster = *ClusterPreset("h100-1node");
  for (double r : {0.0, -1.0, std::nan("")}) {
    const absl::Status s = ScaleToHostSpeed(r, &model, &cluster);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("host speed ratio"));
  }
}

}  // namespace
}  // namespace octopipe
