// MessageTimes: which ops' inputs crossed ranks (the pipeline's edges) and how long they took.
#include "cli/profile_measure.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace octopipe::cli {
namespace {

using ::testing::ElementsAre;

// Two stages on two ranks, one micro-batch: F0 on rank 0 feeds F1 on rank 1, B1 on rank 1
// feeds B0 on rank 0; W ops stay on their rank.
Plan TwoStages() {
  Plan p;
  p.num_devices = 2;
  p.num_microbatches = 1;
  p.stages = {StageAssignment{0, 0, 0, false}, StageAssignment{1, 1, 1, false}};
  return p;
}

TEST(ProfileMeasureTest, MessageTimesAreTheIdleWaitsOfOpsFedFromAnotherRank) {
  // Kinds: 0 = F, 1 = B, 2 = W (OpKind's values).
  // [iteration, stage, micro-batch, kind, start, end, previous op's end on that rank]
  const Json rank0 = Json::parse(R"({"ops": [[0, 0, 0, 0, 0.0, 1.0, 0.0],
                                             [0, 0, 0, 2, 4.5, 5.0, 4.0],
                                             [0, 0, 0, 1, 3.5, 4.0, 1.0]]})");
  const Json rank1 = Json::parse(R"({"ops": [[0, 1, 0, 0, 1.25, 2.0, 0.0],
                                             [0, 1, 0, 1, 2.0, 3.0, 2.0],
                                             [0, 1, 0, 2, 3.0, 3.5, 3.0]]})");
  // F1 waited 0.25 s for F0's output; B0 waited 0.5 s for B1's gradient; W and B1 were fed on
  // their own rank.
  EXPECT_THAT(MessageTimes(TwoStages(), {rank0, rank1}), ElementsAre(0.5, 0.25));
}

TEST(ProfileMeasureTest, AnOpThatWasBusyMeanwhileTellsNothing) {
  // B0's rank was busy until 3.2 s, after B1's gradient was sent at 3.0 s: not an idle wait.
  const Json rank0 = Json::parse(R"({"ops": [[0, 0, 0, 0, 0.0, 1.0, 0.0],
                                             [0, 0, 0, 1, 3.5, 4.0, 3.2]]})");
  const Json rank1 = Json::parse(R"({"ops": [[0, 1, 0, 0, 1.25, 2.0, 0.0],
                                             [0, 1, 0, 1, 2.0, 3.0, 2.0]]})");
  EXPECT_THAT(MessageTimes(TwoStages(), {rank0, rank1}), ElementsAre(0.25));
}

}  // namespace
}  // namespace octopipe::cli
