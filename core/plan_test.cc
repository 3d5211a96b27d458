#include "core/plan.h"

#include <cmath>
#include <numeric>
#include <random>

#include "gtest/gtest.h"

namespace octopipe {
namespace {

int64_t Sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

TEST(VocabShardColumnsTest, LargestRemainder) {
  // Quotas 5.5, 3.3, 2.2 of 11: floors 5, 3, 2 and the one column left to the largest
  // remainder (device 0).
  EXPECT_EQ(VocabShardColumns(11, {0.5, 0.3, 0.2}), (std::vector<int64_t>{6, 3, 2}));
  // Fractions need not be normalised: 1:2 of 31 is 10.33 and 20.67.
  EXPECT_EQ(VocabShardColumns(31, {1.0, 2.0}), (std::vector<int64_t>{10, 21}));
  // Unusable fractions (zero, negative, NaN) mean equal shards.
  EXPECT_EQ(VocabShardColumns(7, {0.0, 1.0}), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(VocabShardColumns(7, {-1.0, 1.0}), (std::vector<int64_t>{4, 3}));
}

TEST(VocabShardColumnsTest, EveryShardGetsAColumn) {
  // 1e-6 of 10 columns rounds to 0 (the others 5 and 5): the shard takes one from the widest,
  // the lowest index among equals.
  EXPECT_EQ(VocabShardColumns(10, {1e-6, 1.0, 1.0}), (std::vector<int64_t>{1, 4, 5}));
  EXPECT_EQ(VocabShardColumns(3, {1e-9, 1e-9, 1.0}), (std::vector<int64_t>{1, 1, 1}));
}

// Equal fractions give exactly the integer equal split (vocab / P, the first vocab % P one
// more), whatever the floating-point rounding of vocab / P.
TEST(VocabShardColumnsTest, EqualSharesAreTheIntegerSplit) {
  for (int P = 1; P <= 9; ++P) {
    for (int64_t vocab = P; vocab <= 3000; ++vocab) {
      const std::vector<int64_t> c = EqualVocabShardColumns(vocab, P);
      ASSERT_EQ(c.size(), static_cast<size_t>(P));
      for (int d = 0; d < P; ++d) {
        ASSERT_EQ(c[d], vocab / P + (d < vocab % P ? 1 : 0)) << vocab << " / " << P;
      }
    }
  }
}

// Random fractions: sums to vocab, every shard >= 1, and a shard whose quota is >= 1 is at most
// its quota rounded up and at least its quota rounded down less one column per shard raised to
// one column.
TEST(VocabShardColumnsTest, RandomFractions) {
  std::mt19937 rng(12);
  std::uniform_real_distribution<double> u(0.01, 5.0);
  for (int trial = 0; trial < 2000; ++trial) {
    const int P = 1 + static_cast<int>(rng() % 8);
    const int64_t vocab = P + static_cast<int64_t>(rng() % 200);
    std::vector<double> f(P);
    double total = 0;
    for (double& x : f) total += (x = u(rng));
    const std::vector<int64_t> c = VocabShardColumns(vocab, f);
    ASSERT_EQ(Sum(c), vocab);
    int raised = 0;
    for (int d = 0; d < P; ++d) raised += vocab * f[d] / total < 1 ? 1 : 0;
    for (int d = 0; d < P; ++d) {
      ASSERT_GE(c[d], 1);
      const double quota = vocab * f[d] / total;
      if (quota >= 1) {
        ASSERT_LE(c[d], std::ceil(quota - 1e-9)) << trial;
        ASSERT_GE(c[d], std::floor(quota + 1e-9) - raised) << trial;
      }
    }
  }
}

Plan SplitPlan(int devices) {
  Plan plan;
  plan.num_devices = devices;
  plan.num_microbatches = 1;
  plan.vocab_parallel = true;
  plan.stages = EvenPartition(4, devices);
  for (int s = 0; s < devices; ++s) plan.stages[s].device = s;
  return plan;
}

TEST(PlanVocabShardColumnsTest, ThePlansOrEqualShards) {
  Plan plan = SplitPlan(2);
  EXPECT_EQ(*PlanVocabShardColumns(plan, 9), (std::vector<int64_t>{5, 4}));
  plan.vocab_shard_columns = {2, 7};
  ASSERT_TRUE(ValidatePlanShape(plan, 4).ok());
  EXPECT_EQ(*PlanVocabShardColumns(plan, 9), (std::vector<int64_t>{2, 7}));
}

TEST(PlanVocabShardColumnsTest, BadColumnsNameTheField) {
  auto expect_error = [](const absl::Status& s, const std::string& part) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(part), absl::string_view::npos) << s;
  };
  Plan plan = SplitPlan(2);
  plan.vocab_shard_columns = {9};
  expect_error(ValidatePlanShape(plan, 4), "vocab_shard_columns has 1 entries for 2 devices");
  expect_error(PlanVocabShardColumns(plan, 9).status(), "vocab_shard_columns has 1 entries");
  plan.vocab_shard_columns = {0, 9};
  expect_error(ValidatePlanShape(plan, 4), "vocab_shard_columns[0] must be > 0");
  expect_error(PlanVocabShardColumns(plan, 9).status(), "vocab_shard_columns[0] must be > 0");
  plan.vocab_shard_columns = {3, 5};
  EXPECT_TRUE(ValidatePlanShape(plan, 4).ok());  // the sum needs the model
  expect_error(PlanVocabShardColumns(plan, 9).status(),
               "vocab_shard_columns sum to 8 but the model's vocabulary has 9");
  plan.vocab_parallel = false;
  expect_error(ValidatePlanShape(plan, 4), "vocab_shard_columns: 2 entries in a plan without");
  plan.vocab_shard_columns.clear();
  expect_error(PlanVocabShardColumns(plan, 9).status(), "vocab_parallel is false");
  plan.vocab_parallel = true;
  expect_error(PlanVocabShardColumns(plan, 1).status(), "vocabulary 1, 2 devices");
}

}  // namespace
}  // namespace octopipe
