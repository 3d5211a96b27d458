#include "core/limits.h"

#include "core/synthetic_model.h"
#include "gtest/gtest.h"

namespace octopipe {
namespace {

TEST(LimitsTest, CheckLimitNamesFieldValueAndLimit) {
  absl::Status s = CheckLimit("options.num_microbatches", 2147483647, 4096, "max_microbatches");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(),
            "options.num_microbatches: 2147483647 exceeds the limit of 4096 (max_microbatches)");
  EXPECT_TRUE(CheckLimit("x", 4096, 4096, "max_x").ok());
}

TEST(LimitsTest, ModelOverTheLayerOrMicrobatchLimitIsRefused) {
  SizeLimits limits;
  limits.max_layers = 8;
  ModelGraph m = *ParseSyntheticModel("layers=9,f=1,b=1,w=1");
  absl::Status s = CheckModelSize(m, limits);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("model.layers: 9 exceeds the limit of 8 (max_layers)"),
            std::string::npos);
  m.layers.resize(8);
  m.training.num_microbatches = (int64_t{1} << 32) + 8;  // would truncate to 8 in an int
  s = CheckModelSize(m, limits);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("model.training.num_microbatches: 4294967304"), std::string::npos);
}

TEST(LimitsTest, ClusterDevicesAreSummedWithoutOverflow) {
  Cluster c = SyntheticCluster(4);
  c.nodes.push_back(c.nodes[0]);
  c.nodes[0].num_devices = 2147483647;
  c.nodes[1].num_devices = 2147483647;
  c.nodes[1].name = "node1";
  absl::Status s = CheckClusterSize(c, SizeLimits());
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("4294967294 exceeds the limit of 4096"), std::string::npos)
      << s.message();
}

TEST(LimitsTest, RunSizeBoundsTheLargestCandidate) {
  SizeLimits limits;
  EXPECT_TRUE(CheckRunSize(80, 8, 4, 32, 2, limits).ok());
  // 2^31-1 micro-batches: refused by the micro-batch limit before any op is counted.
  absl::Status s = CheckRunSize(80, 8, 4, 2147483647, 2, limits);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("num_microbatches"), std::string::npos);
  s = CheckRunSize(80, 8, 1000000, 32, 2, limits);
  EXPECT_NE(s.message().find("chunks: 1000000 exceeds the limit of 16"), std::string::npos);
  s = CheckRunSize(80, 8, 4, 32, 100000, limits);
  EXPECT_NE(s.message().find("threads: 100000 exceeds the limit of 64"), std::string::npos);
  // 4096 stages x 4096 micro-batches: each within its own limit, too much together.
  s = CheckRunSize(4096, 1024, 4, 4096, 1, limits);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("max_stage_microbatches"), std::string::npos) << s.message();
  s = CheckRunSize(4096, 4096, 1, 1, 1, limits);
  EXPECT_NE(s.message().find("max_layer_devices"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace octopipe
