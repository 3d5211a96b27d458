#include "executor/data.h"

#include "gtest/gtest.h"

namespace octopipe::executor {
namespace {

ModelDims Dims() {
  ModelDims d;
  d.vocab = 64;
  d.seq_len = 16;
  d.batch = 3;
  return d;
}

TEST(DataTest, ShapesAndRanges) {
  const MicroBatch mb = MakeMicroBatch(Dims(), 1, 0, 0);
  EXPECT_EQ(mb.batch, 3);
  EXPECT_EQ(mb.seq_len, 16);
  ASSERT_EQ(mb.tokens.size(), 48u);
  ASSERT_EQ(mb.targets.size(), 48u);
  for (size_t i = 0; i < 48; ++i) {
    EXPECT_GE(mb.tokens[i], 0);
    EXPECT_LT(mb.tokens[i], 64);
    EXPECT_GE(mb.targets[i], 0);
    EXPECT_LT(mb.targets[i], 64);
  }
}

TEST(DataTest, TargetsAreNextTokensWithinEachSequence) {
  const MicroBatch mb = MakeMicroBatch(Dims(), 1, 0, 0);
  for (int j = 0; j < 3; ++j) {
    for (int i = 0; i + 1 < 16; ++i) EXPECT_EQ(mb.targets[j * 16 + i], mb.tokens[j * 16 + i + 1]);
  }
}

TEST(DataTest, DeterministicAndDistinctPerIterationAndMicroBatch) {
  const MicroBatch a = MakeMicroBatch(Dims(), 1, 2, 3);
  const MicroBatch b = MakeMicroBatch(Dims(), 1, 2, 3);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.targets, b.targets);
  EXPECT_NE(a.tokens, MakeMicroBatch(Dims(), 1, 2, 4).tokens);
  EXPECT_NE(a.tokens, MakeMicroBatch(Dims(), 1, 3, 3).tokens);
  EXPECT_NE(a.tokens, MakeMicroBatch(Dims(), 2, 2, 3).tokens);
  const std::vector<MicroBatch> all = MakeMicroBatches(Dims(), 1, 2, 4);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[3].tokens, a.tokens);
}

TEST(DataTest, MostTargetsFollowTheRule) {
  ModelDims dims = Dims();
  dims.batch = 8;
  dims.seq_len = 128;
  int follow = 0, total = 0;
  for (int m = 0; m < 4; ++m) {
    const MicroBatch mb = MakeMicroBatch(dims, 5, 0, m);
    for (size_t i = 0; i < mb.tokens.size(); ++i) {
      follow += mb.targets[i] == (kDataMultiplier * mb.tokens[i] + kDataOffset) % dims.vocab;
      ++total;
    }
  }
  // 7/8 follow by construction, plus the noisy draws that land on the rule by chance (1/64).
  const double expected = (1 - kDataNoise) + kDataNoise / dims.vocab;
  EXPECT_NEAR(static_cast<double>(follow) / total, expected, 0.02);
}

}  // namespace
}  // namespace octopipe::executor
