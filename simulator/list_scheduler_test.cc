// Pins FeedBonuses on a hand-computed split and that WeightedPolicy adds them to a forward's and
// a backward's priority (and to nothing else).
#include "simulator/list_scheduler.h"

#include <vector>

#include "gtest/gtest.h"
#include "simulator/problem.h"

namespace octopipe {
namespace {

// Stages 0 and 2 on device 0, stage 1 on device 1, F = B = W = 1, 2 micro-batches. Device 0
// starts at 0 and runs 2 x 6 = 12; device 1 starts after F0 (1) and runs 2 x 3 = 6, so 7.
// Scaled between them: device 0 is 1, device 1 is 0. F0 feeds device 1 (0), F1 feeds device 0
// (w), the last stage's F its own device's backward (w); B1 feeds device 0 (w), B2 device 1 (0),
// B0 nothing (0).
TEST(FeedBonusesTest, HandComputedSplit) {
  const PipelineProblem pb = UniformProblem({0, 1, 0}, 2, 2, 1, 1, 1);
  std::vector<double> fwd, bwd;
  FeedBonuses(pb, 0.5, &fwd, &bwd);
  EXPECT_EQ(fwd, (std::vector<double>{0.0, 0.5, 0.5}));
  EXPECT_EQ(bwd, (std::vector<double>{0.0, 0.5, 0.0}));
  FeedBonuses(pb, 0.0, &fwd, &bwd);
  EXPECT_EQ(fwd, (std::vector<double>{0.0, 0.0, 0.0}));
  EXPECT_EQ(bwd, (std::vector<double>{0.0, 0.0, 0.0}));
}

TEST(FeedBonusesTest, EquallyTightDevicesGetNone) {
  // Stage 0's forward takes no time, so device 1 starts at 0 too, and both stages cost 3 per
  // micro-batch (0 + 2 + 1 and 1 + 1 + 1): both devices 0 + 2 x 3 = 6.
  PipelineProblem pb = UniformProblem({0, 1}, 2, 2, 1, 1, 1);
  pb.forward_s = {0.0, 1.0};
  pb.backward_input_s = {2.0, 1.0};
  std::vector<double> fwd, bwd;
  FeedBonuses(pb, 1.0, &fwd, &bwd);
  EXPECT_EQ(fwd, (std::vector<double>{0.0, 0.0}));
  EXPECT_EQ(bwd, (std::vector<double>{0.0, 0.0}));
}

TEST(FeedBonusesTest, PolicyAddsThemToForwardAndBackwardOnly) {
  const PipelineProblem pb = UniformProblem({0, 1, 0}, 2, 2, 1, 1, 1);
  WeightedPolicy p;
  p.microbatch_weight = 0;
  p.stage_weight = 0;
  FeedBonuses(pb, 0.5, &p.forward_bonus, &p.backward_bonus);
  DeviceState state;
  EXPECT_DOUBLE_EQ(p.Priority(pb, Op{OpKind::kF, 1, 0}, 0, state), 2.0 + 0.5);
  EXPECT_DOUBLE_EQ(p.Priority(pb, Op{OpKind::kF, 0, 0}, 0, state), 2.0);
  EXPECT_DOUBLE_EQ(p.Priority(pb, Op{OpKind::kB, 1, 0}, 0, state), 3.0 + 0.5);
  EXPECT_DOUBLE_EQ(p.Priority(pb, Op{OpKind::kBW, 1, 0}, 0, state), 3.0 + 0.5);
  EXPECT_DOUBLE_EQ(p.Priority(pb, Op{OpKind::kW, 1, 0}, 0, state), 1.0);
}

}  // namespace
}  // namespace octopipe
