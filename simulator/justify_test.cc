// Pins JustifySchedule: on random problems (irregular placements, transfers, recompute, split
// and unsplit backward, vocabulary passes) its order is a valid schedule whose Evaluator time is
// the time it reports and never above the input's; it improves some list schedules; a
// hand-made case where the drain is packed better; bad inputs are errors.
#include "simulator/justify.h"

#include <random>

#include "gtest/gtest.h"
#include "simulator/evaluator.h"
#include "simulator/list_scheduler.h"
#include "simulator/problem.h"
#include "simulator/random_test_problem.h"

namespace octopipe {
namespace {

Op F(int s, int m) { return Op{OpKind::kF, s, m}; }
Op B(int s, int m) { return Op{OpKind::kB, s, m}; }
Op W(int s, int m) { return Op{OpKind::kW, s, m}; }


TEST(JustifyTest, RandomSchedulesStayValidTimedAsTheEvaluatorAndNeverSlower) {
  std::mt19937_64 rng(11);
  Evaluator evaluator;
  int improved = 0, cases = 0;
  for (int i = 0; i < 300; ++i) {
    const bool vocab = i % 5 == 4;
    const PipelineProblem pb = RandomProblem(rng, vocab);
    ListSchedulerOptions options;
    options.split_backward = vocab || i % 3 != 0;
    absl::StatusOr<ListScheduleResult> ls = ListSchedule(pb, RandomPolicy(rng), options);
    ASSERT_TRUE(ls.ok()) << ls.status();
    absl::StatusOr<Evaluator::Summary> before = evaluator.EvaluateSummary(pb, ls->schedule);
    ASSERT_TRUE(before.ok()) << before.status();
    absl::StatusOr<JustifyResult> j = JustifySchedule(pb, ls->schedule);
    ASSERT_TRUE(j.ok()) << j.status();
    EXPECT_NEAR(j->input_time_s, before->iteration_time_s, 1e-9 * before->iteration_time_s);
    absl::StatusOr<Evaluator::Summary> after = evaluator.EvaluateSummary(pb, j->schedule);
    ASSERT_TRUE(after.ok()) << "case " << i << ": " << after.status();
    EXPECT_NEAR(after->iteration_time_s, j->iteration_time_s, 1e-9 * before->iteration_time_s)
        << "case " << i;
    EXPECT_LE(after->iteration_time_s, before->iteration_time_s * (1 + 1e-12)) << "case " << i;
    ++cases;
    if (after->iteration_time_s < before->iteration_time_s * (1 - 1e-6)) ++improved;
  }
  EXPECT_EQ(cases, 300);
  // Greedy orders on irregular placements leave room: a good share of them gets faster.
  EXPECT_GT(improved, 30);
}

// Two devices, stage d on device d, F = B = W = 1, two micro-batches, no transfer time. The
// order below runs device 1's second forward before its first backward: device 1 F1.0 1-2,
// F1.1 2-3, B1.0 3-4, W1.0 4-5, B1.1 5-6, W1.1 6-7 holds device 0's drain back (B0.0 4-5, W0.0
// 5-6, B0.1 6-7, W0.1 7-8): 8. Device 0 cannot start a backward before 3 (F0.0, F1.0, B1.0)
// and has 4 units of backward work, so 7 is optimal; justified, device 1 runs B1.0 right after
// F1.0 and the second micro-batch's gradient reaches device 0 one unit earlier.
TEST(JustifyTest, TwoDevicesDrainReachesTheOptimum) {
  PipelineProblem pb = UniformProblem({0, 1}, 2, 2, 1, 1, 1);
  Schedule poor;
  poor.ops = {{F(0, 0), F(0, 1), B(0, 0), W(0, 0), B(0, 1), W(0, 1)},
              {F(1, 0), F(1, 1), B(1, 0), W(1, 0), B(1, 1), W(1, 1)}};
  Evaluator evaluator;
  absl::StatusOr<Evaluator::Summary> before = evaluator.EvaluateSummary(pb, poor);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_DOUBLE_EQ(before->iteration_time_s, 8);
  absl::StatusOr<JustifyResult> j = JustifySchedule(pb, poor);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_DOUBLE_EQ(j->input_time_s, 8);
  EXPECT_DOUBLE_EQ(j->iteration_time_s, 7);
  absl::StatusOr<Evaluator::Summary> after = evaluator.EvaluateSummary(pb, j->schedule);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_DOUBLE_EQ(after->iteration_time_s, 7);
}

TEST(JustifyTest, MovesRecomputeNextToItsBackward) {
  PipelineProblem pb = UniformProblem({0, 1}, 2, 1, 1, 2, 1);
  pb.recompute = {1, 0};
  Schedule s;
  s.ops = {{F(0, 0), Op{OpKind::kR, 0, 0}, B(0, 0), W(0, 0)}, {F(1, 0), B(1, 0), W(1, 0)}};
  absl::StatusOr<JustifyResult> j = JustifySchedule(pb, s);
  ASSERT_TRUE(j.ok()) << j.status();
  // R0.0 runs while device 0 waits for B1.0's gradient: F0 0-1, F1 1-2, B1 2-4; R0 1-2 or later,
  // B0 4-6, W0 6-7 — 7 either way.
  EXPECT_DOUBLE_EQ(j->iteration_time_s, 7);
  ASSERT_EQ(j->schedule.ops[0].size(), 4u);
  for (size_t i = 0; i < j->schedule.ops[0].size(); ++i) {
    if (j->schedule.ops[0][i].kind == OpKind::kR) {
      ASSERT_LT(i + 1, j->schedule.ops[0].size());
      EXPECT_EQ(j->schedule.ops[0][i + 1], B(0, 0));
    }
  }
}

TEST(JustifyTest, RejectsIncompleteAndDeadlockedSchedules) {
  PipelineProblem pb = UniformProblem({0, 1}, 2, 1, 1, 1, 1);
  Schedule missing;
  missing.ops = {{F(0, 0), B(0, 0), W(0, 0)}, {F(1, 0), B(1, 0)}};
  EXPECT_EQ(JustifySchedule(pb, missing).status().code(), absl::StatusCode::kInvalidArgument);
  Schedule duplicate;
  duplicate.ops = {{F(0, 0), F(0, 0), B(0, 0), W(0, 0)}, {F(1, 0), B(1, 0), W(1, 0)}};
  EXPECT_EQ(JustifySchedule(pb, duplicate).status().code(), absl::StatusCode::kInvalidArgument);
  Schedule wrong_device;
  wrong_device.ops = {{F(1, 0), F(0, 0), B(0, 0), W(0, 0)}, {B(1, 0), W(1, 0)}};
  EXPECT_EQ(JustifySchedule(pb, wrong_device).status().code(),
            absl::StatusCode::kInvalidArgument);
  Schedule cycle;  // device 0 runs its backward before its forward
  cycle.ops = {{B(0, 0), F(0, 0), W(0, 0)}, {F(1, 0), B(1, 0), W(1, 0)}};
  EXPECT_EQ(JustifySchedule(pb, cycle).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace octopipe
