// Pins CriticalSwapSearch: the hand case where two swaps on the critical path reach the optimum;
// on random problems (irregular placements, transfers, recompute, split and unsplit backward,
// vocabulary passes, link contention) its order is a valid schedule whose Evaluator time is the
// time it reports, never above the input's on either clock, within memory when the input fits,
// and faster for a good share of greedy orders; bad inputs are errors.
#include "simulator/critical_swap.h"

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

// Two devices, stage d on device d, F = B = W = 1, two micro-batches, no transfer time (as in
// justify_test): device 1's order F1.0 F1.1 B1.0 W1.0 B1.1 W1.1 holds device 0's drain back, 8;
// 7 is optimal (device 0 cannot start a backward before 3 and has 4 units of backward work).
// Swapping F1.1 with B1.0 alone still gives 8 (B1.1 waits behind W1.0), so the search must take
// a move that does not improve and then W1.0 with B1.1: 7.
Schedule PoorTwoDeviceOrder() {
  Schedule poor;
  poor.ops = {{F(0, 0), F(0, 1), B(0, 0), W(0, 0), B(0, 1), W(0, 1)},
              {F(1, 0), F(1, 1), B(1, 0), W(1, 0), B(1, 1), W(1, 1)}};
  return poor;
}

TEST(CriticalSwapTest, TwoSwapsReachTheOptimum) {
  const PipelineProblem pb = UniformProblem({0, 1}, 2, 2, 1, 1, 1);
  const Schedule poor = PoorTwoDeviceOrder();
  absl::StatusOr<CriticalSwapResult> r = CriticalSwapSearch(pb, poor);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->input_time_s, 8);
  EXPECT_DOUBLE_EQ(r->iteration_time_s, 7);
  EXPECT_GE(r->improvements, 1);
  Evaluator evaluator;
  absl::StatusOr<Evaluator::Summary> after = evaluator.EvaluateSummary(pb, r->schedule);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_DOUBLE_EQ(after->iteration_time_s, 7);
  // Deterministic.
  absl::StatusOr<CriticalSwapResult> again = CriticalSwapSearch(pb, poor);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->schedule.ops, r->schedule.ops);
}

TEST(CriticalSwapTest, ZeroIterationsReturnTheInput) {
  const PipelineProblem pb = UniformProblem({0, 1}, 2, 2, 1, 1, 1);
  const Schedule poor = PoorTwoDeviceOrder();
  CriticalSwapOptions o;
  o.max_iterations = 0;
  absl::StatusOr<CriticalSwapResult> r = CriticalSwapSearch(pb, poor, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->schedule.ops, poor.ops);
  EXPECT_DOUBLE_EQ(r->iteration_time_s, 8);
  EXPECT_EQ(r->iterations, 0);
}

TEST(CriticalSwapTest, RandomSchedulesStayValidNeverSlowerAndWithinMemory) {
  std::mt19937_64 rng(23);
  Evaluator evaluator;
  int improved = 0;
  constexpr int kCases = 200;
  for (int i = 0; i < kCases; ++i) {
    const bool vocab = i % 5 == 4;
    PipelineProblem pb = RandomProblem(rng, vocab);
    pb.link_contention = i % 4 == 1;
    ListSchedulerOptions options;
    options.split_backward = vocab || i % 3 != 0;
    absl::StatusOr<ListScheduleResult> ls = ListSchedule(pb, RandomPolicy(rng), options);
    ASSERT_TRUE(ls.ok()) << ls.status();
    absl::StatusOr<Evaluator::Summary> before = evaluator.EvaluateSummary(pb, ls->schedule);
    ASSERT_TRUE(before.ok()) << before.status();
    // Every other case: memory capped just above the input's peak, so some swaps would not fit.
    if (i % 2 == 0) {
      absl::StatusOr<SimResult> full = evaluator.Evaluate(pb, ls->schedule);
      ASSERT_TRUE(full.ok());
      for (int d = 0; d < pb.num_devices; ++d) {
        pb.memory_capacity[d] = full->devices[d].peak_memory_bytes * (1 + 1e-9);
      }
      before = evaluator.EvaluateSummary(pb, ls->schedule);
      ASSERT_TRUE(before.ok() && before->fits_memory) << "case " << i;
    }
    CriticalSwapOptions o;
    o.max_iterations = 30;
    absl::StatusOr<CriticalSwapResult> r = CriticalSwapSearch(pb, ls->schedule, o);
    ASSERT_TRUE(r.ok()) << "case " << i << ": " << r.status();
    EXPECT_NEAR(r->input_time_s, before->iteration_time_s, 1e-9 * before->iteration_time_s);
    absl::StatusOr<Evaluator::Summary> after = evaluator.EvaluateSummary(pb, r->schedule);
    ASSERT_TRUE(after.ok()) << "case " << i << ": " << after.status();
    EXPECT_NEAR(after->iteration_time_s, r->iteration_time_s, 1e-9 * before->iteration_time_s)
        << "case " << i;
    EXPECT_LE(after->iteration_time_s, before->iteration_time_s * (1 + 1e-12)) << "case " << i;
    EXPECT_LE(after->steady_state_iteration_time_s,
              before->steady_state_iteration_time_s * (1 + 1e-12))
        << "case " << i;
    if (before->fits_memory) EXPECT_TRUE(after->fits_memory) << "case " << i;
    if (after->iteration_time_s < before->iteration_time_s * (1 - 1e-6)) ++improved;
  }
  // Random greedy orders on irregular placements leave room on the critical path.
  EXPECT_GT(improved, kCases / 10);
}

TEST(CriticalSwapTest, RejectsIncompleteAndDeadlockedSchedules) {
  const PipelineProblem pb = UniformProblem({0, 1}, 2, 1, 1, 1, 1);
  Schedule missing;
  missing.ops = {{F(0, 0), B(0, 0), W(0, 0)}, {F(1, 0), B(1, 0)}};
  EXPECT_EQ(CriticalSwapSearch(pb, missing).status().code(), absl::StatusCode::kInvalidArgument);
  Schedule cycle;
  cycle.ops = {{B(0, 0), F(0, 0), W(0, 0)}, {F(1, 0), B(1, 0), W(1, 0)}};
  EXPECT_EQ(CriticalSwapSearch(pb, cycle).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace octopipe
