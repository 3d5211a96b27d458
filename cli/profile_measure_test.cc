// MessageTimes: which ops' inputs crossed ranks (the pipeline's edges) and how long they took;
// MeasureWhileHostDiffers: when a split is measured again.
#include "cli/profile_measure.h"

#include <functional>
#include <sstream>
#include <string>
#include <vector>

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

// Attempts whose host-speed probes are the given ratios of the reference (100 ms).
struct Canned {
  std::vector<double> ratios;
  int ran = 0;
  absl::StatusOr<double> operator()(int n) {
    EXPECT_EQ(n, ran);
    ++ran;
    return 0.1 * ratios.at(n);
  }
};

TEST(ProfileMeasureTest, ASplitIsMeasuredAgainWhileTheHostRunsAtAnotherSpeed) {
  std::ostringstream err;
  // Within 5% at once: one attempt, nothing said.
  Canned quiet{{1.03}};
  EXPECT_EQ(0, *MeasureWhileHostDiffers(0.1, 3, "TP2", err, std::ref(quiet)));
  EXPECT_EQ(1, quiet.ran);
  EXPECT_EQ("", err.str());
  // 15% slow, then 2% fast: the second is kept.
  Canned once{{1.15, 0.98}};
  EXPECT_EQ(1, *MeasureWhileHostDiffers(0.1, 3, "TP2", err, std::ref(once)));
  EXPECT_EQ(2, once.ran);
  EXPECT_EQ("octopipe profile: TP2: the host-speed probe ran 1.150x the F/B/W launches'; "
            "measuring again (attempt 2 of 3)\n",
            err.str());
  // Off every time: all three run, the closest (the third, 8% slow) kept, two retries said.
  err.str("");
  Canned noisy{{1.15, 0.88, 1.08}};
  EXPECT_EQ(2, *MeasureWhileHostDiffers(0.1, 3, "EP2", err, std::ref(noisy)));
  EXPECT_EQ(3, noisy.ran);
  EXPECT_NE(err.str().find("ran 0.880x the F/B/W launches'; measuring again (attempt 3 of 3)"),
            std::string::npos)
      << err.str();
  // The closest is kept, not the last: the first here (8% slow against 15% and 12%).
  Canned first{{1.08, 1.15, 1.12}};
  EXPECT_EQ(0, *MeasureWhileHostDiffers(0.1, 3, "TP2", err, std::ref(first)));
  EXPECT_EQ(3, first.ran);
  Canned middle{{1.15, 0.93, 1.12}};
  EXPECT_EQ(1, *MeasureWhileHostDiffers(0.1, 3, "TP2", err, std::ref(middle)));
  // Equally far (exact in binary: 1.25 and 0.75 of 1): the first.
  auto tie = [](int n) -> absl::StatusOr<double> { return n % 2 == 0 ? 1.25 : 0.75; };
  EXPECT_EQ(0, *MeasureWhileHostDiffers(1.0, 3, "TP2", err, tie));
  // An attempt that timed no probe is the farthest off.
  Canned unprobed{{1.2, 0.0, 1.3}};
  EXPECT_EQ(0, *MeasureWhileHostDiffers(0.1, 3, "TP2", err, std::ref(unprobed)));
  // No reference probe: one attempt whatever it measured.
  Canned blind{{2.0, 1.0}};
  EXPECT_EQ(0, *MeasureWhileHostDiffers(0, 3, "TP2", err, std::ref(blind)));
  EXPECT_EQ(1, blind.ran);
  // The first attempt's error is the result; a later one's keeps the closest so far.
  auto failing = [](int) -> absl::StatusOr<double> { return absl::InternalError("rank 1 died"); };
  EXPECT_EQ("rank 1 died", MeasureWhileHostDiffers(0.1, 3, "TP2", err, failing).status().message());
  err.str("");
  auto second_fails = [](int n) -> absl::StatusOr<double> {
    if (n == 0) return 0.115;
    return absl::InternalError("rank 1 died");
  };
  EXPECT_EQ(0, *MeasureWhileHostDiffers(0.1, 3, "TP2", err, second_fails));
  EXPECT_NE(err.str().find("TP2: attempt 2 failed (rank 1 died); keeping attempt 1"),
            std::string::npos)
      << err.str();
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
