// Pins the classic schedules' closed forms at unit costs and no transfer time.
#include "simulator/schedules.h"

#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "simulator/evaluator.h"
#include "simulator/problem.h"

namespace octopipe {
namespace {

struct Eval {
  SimResult r;
};

// Unit layer costs: F = B = W = 1 per stage; schedules without a B/W split pay BW = 2.
SimResult RunUnit(ScheduleKind kind, int P, int V, int M) {
  auto g = GenerateSchedule(kind, P, V, M);
  EXPECT_TRUE(g.ok()) << g.status();
  const PipelineProblem pb = UniformProblem(g->stage_device, P, M, 1.0, 1.0, 1.0);
  auto r = Simulate(pb, g->schedule);
  EXPECT_TRUE(r.ok()) << ScheduleKindName(kind) << " P=" << P << " M=" << M << ": "
                      << r.status();
  return r.ok() ? *r : SimResult{};
}

TEST(SchedulesTest, GpipeAnd1F1BBubbleIsPMinus1OverMPlusPMinus1) {
  for (auto [p, m] : {std::pair{4, 8}, std::pair{8, 24}, std::pair{3, 5}, std::pair{4, 2}}) {
    for (ScheduleKind kind : {ScheduleKind::kGpipe, ScheduleKind::k1F1B}) {
      const SimResult r = RunUnit(kind, p, 1, m);
      EXPECT_NEAR(r.bubble_ratio, double(p - 1) / (m + p - 1), 1e-12)
          << ScheduleKindName(kind) << " p=" << p << " m=" << m;
      EXPECT_DOUBLE_EQ(r.iteration_time_s, 3.0 * (m + p - 1));
    }
  }
}

TEST(SchedulesTest, InterleavedBubbleIsPMinus1OverVMPlusPMinus1) {
  for (auto [p, v, m] : {std::tuple{4, 2, 8}, std::tuple{4, 4, 8}, std::tuple{8, 2, 24},
                         std::tuple{2, 3, 4}}) {
    const SimResult r = RunUnit(ScheduleKind::kInterleaved, p, v, m);
    EXPECT_NEAR(r.bubble_ratio, double(p - 1) / (v * m + p - 1), 1e-12)
        << "p=" << p << " v=" << v << " m=" << m;
  }
}

TEST(SchedulesTest, ZbH1IsThreeMPlusPMinus1UnderBothDefinitions) {
  for (auto [p, m, expect] : {std::tuple{4, 8, 27.0}, std::tuple{8, 24, 79.0}}) {
    const SimResult r = RunUnit(ScheduleKind::kZbH1, p, 1, m);
    EXPECT_DOUBLE_EQ(r.iteration_time_s, expect);
    EXPECT_DOUBLE_EQ(r.steady_state_iteration_time_s, expect);
  }
}

TEST(SchedulesTest, ZbH2SteadyStateIsThreeMWithNoBubble) {
  for (auto [p, m, steady] : {std::tuple{4, 8, 24.0}, std::tuple{8, 24, 72.0}}) {
    const SimResult r = RunUnit(ScheduleKind::kZbH2, p, 1, m);
    EXPECT_DOUBLE_EQ(r.steady_state_iteration_time_s, steady);
    EXPECT_NEAR(r.steady_state_bubble_ratio, 0.0, 1e-12);
    EXPECT_DOUBLE_EQ(r.iteration_time_s, steady + p - 1);
  }
}

TEST(SchedulesTest, ZbVSteadyStateIsSixMWithNoBubble) {
  for (auto [p, m, steady] : {std::tuple{4, 8, 48.0}, std::tuple{8, 24, 144.0}}) {
    const SimResult r = RunUnit(ScheduleKind::kZbV, p, 2, m);
    EXPECT_DOUBLE_EQ(r.steady_state_iteration_time_s, steady);
    EXPECT_NEAR(r.steady_state_bubble_ratio, 0.0, 1e-12);
    EXPECT_DOUBLE_EQ(r.iteration_time_s, steady + p - 1);
  }
}

std::string Order(const std::vector<Op>& ops) {
  std::string out;
  for (const Op& op : ops) out += (out.empty() ? "" : " ") + OpToString(op);
  return out;
}

// Megatron-LM accepts a micro-batch group size N in [P, M] whose last group is empty or holds
// >= P micro-batches; with N = P that forces M % P == 0, otherwise N grows.
TEST(SchedulesTest, InterleavedGroupSizeFollowsMegatronsRule) {
  EXPECT_EQ(InterleavedGroupSize(4, 8), 4);
  EXPECT_EQ(InterleavedGroupSize(4, 4), 4);
  EXPECT_EQ(InterleavedGroupSize(4, 6), 6);    // 6 % 4 = 2 < 4, 6 % 5 = 1 < 4
  EXPECT_EQ(InterleavedGroupSize(4, 9), 5);    // 9 % 4 = 1 < 4, 9 % 5 = 4 >= 4
  EXPECT_EQ(InterleavedGroupSize(4, 13), 7);   // 13 % 4, 5, 6 = 1, 3, 1; 13 % 7 = 6 >= 4
}

// P = 2, V = 2, M = 3: Megatron's group size is 3 (3 % 2 = 1 < 2), so the table is
// (mb, chunk) = (0,0) (1,0) (2,0) (0,1) (1,1) (2,1); rank d warms up (2 - d - 1) * 2 + 3.
TEST(SchedulesTest, InterleavedForMNotAMultipleOfPFollowsMegatronsTable) {
  auto g = GenerateSchedule(ScheduleKind::kInterleaved, 2, 2, 3);
  ASSERT_TRUE(g.ok()) << g.status();
  // Rank 0: stages 0 (chunk 0) and 2 (chunk 1); warm-up 5, then 1F1B, then the cool-down.
  EXPECT_EQ(Order(g->schedule.ops[0]),
            "F0.0 F0.1 F0.2 F2.0 F2.1 F2.2 BW2.0 BW2.1 BW2.2 BW0.0 BW0.1 BW0.2");
  // Rank 1: stages 1 and 3; warm-up 3.
  EXPECT_EQ(Order(g->schedule.ops[1]),
            "F1.0 F1.1 F1.2 F3.0 BW3.0 F3.1 BW3.1 F3.2 BW3.2 BW1.0 BW1.1 BW1.2");
  const SimResult r = RunUnit(ScheduleKind::kInterleaved, 2, 2, 3);
  EXPECT_GT(r.iteration_time_s, 0);
}

// DeepSeek's dualpipev.py, its eight steps transcribed by hand for P = 2, M = 4. Rank 0 holds
// stages 0 and 3, rank 1 stages 1 and 2; "B" + "W" are its zero-bubble backwards, "BW" the
// others; a forward-backward overlapped pair runs back to back (forward first).
TEST(SchedulesTest, DualPipeVMatchesDeepSeeksStepsForTwoRanks) {
  auto g = GenerateSchedule(ScheduleKind::kDualPipeV, 2, 2, 4);
  ASSERT_TRUE(g.ok()) << g.status();
  // Rank 0: 1: F0 F0 | 2: F0 F1 | 3: B1 W F1 | 4: F0 B1 F1 B0 | 5: B1 F1 B0 |
  // 6: B1, B0 (zero-bubble from i = 1 // 2 = 0 on an even rank) | 7: W B0 | 8: W.
  EXPECT_EQ(Order(g->schedule.ops[0]),
            "F0.0 F0.1 F0.2 F3.0 B3.0 W3.0 F3.1 F0.3 BW3.1 F3.2 BW0.0 BW3.2 F3.3 BW0.1 BW3.3 "
            "B0.2 W0.2 B0.3 W0.3");
  // Rank 1: 2: (F0 F1) x 2 | 4: (F0 B1 F1 B0) x 2 | 6: B1 B0, then zero-bubble from
  // i = 2 // 2 = 1 on an odd rank | 8: W W.
  EXPECT_EQ(Order(g->schedule.ops[1]),
            "F1.0 F2.0 F1.1 F2.1 F1.2 BW2.0 F2.2 BW1.0 F1.3 BW2.1 F2.3 BW1.1 BW2.2 BW1.2 "
            "B2.3 B1.3 W2.3 W1.3");
}

TEST(SchedulesTest, EveryScheduleIsDeadlockFreeOverManyShapes) {
  for (ScheduleKind kind : AllScheduleKinds()) {
    for (int p = 1; p <= 6; ++p) {
      for (int m = 1; m <= 14; ++m) {
        if (kind == ScheduleKind::kDualPipeV && m < 2 * p) continue;
        for (int v : {0, 3}) {
          if (v == 3 && kind != ScheduleKind::kInterleaved) continue;
          if (kind == ScheduleKind::kInterleaved && m < p) continue;
          auto g = GenerateSchedule(kind, p, v, m);
          ASSERT_TRUE(g.ok()) << g.status();
          // Non-uniform costs so orders cannot pass only by symmetry.
          PipelineProblem pb = UniformProblem(g->stage_device, p, m, 1.0, 1.3, 0.7);
          for (int s = 0; s < pb.num_stages; ++s) pb.forward_s[s] = 0.5 + 0.25 * (s % 3);
          auto r = Simulate(pb, g->schedule);
          EXPECT_TRUE(r.ok()) << ScheduleKindName(kind) << " p=" << p << " v=" << v
                              << " m=" << m << ": " << r.status();
        }
      }
    }
  }
}

// ScheduleForProblem builds the ZB family for the problem's costs (ZeroBubble's builders) and
// returns the cost-independent orders of the others, for the generator's own placement only.
TEST(SchedulesTest, ScheduleForProblemBuildsTheZbFamilyForTheCosts) {
  PipelineProblem pb = UniformProblem(LoopPlacement(3, 1), 3, 6, 1.0, 1.0, 1.0);
  pb.forward_s = {0.5, 1.5, 1.0};
  pb.backward_input_s = {2.0, 1.0, 1.5};
  absl::StatusOr<Schedule> built = ScheduleForProblem(ScheduleKind::kZbH2, 0, pb);
  ASSERT_TRUE(built.ok()) << built.status();
  absl::StatusOr<GeneratedSchedule> unit = GenerateSchedule(ScheduleKind::kZbH2, 3, 0, 6);
  ASSERT_TRUE(unit.ok());
  auto a = Simulate(pb, *built);
  auto b = Simulate(pb, unit->schedule);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_LE(a->steady_state_iteration_time_s, b->steady_state_iteration_time_s);

  absl::StatusOr<Schedule> one = ScheduleForProblem(ScheduleKind::k1F1B, 0, pb);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->ops, GenerateSchedule(ScheduleKind::k1F1B, 3, 0, 6)->schedule.ops);

  const PipelineProblem v = UniformProblem(VShapePlacement(3), 3, 6, 1.0, 1.0, 1.0);
  absl::StatusOr<Schedule> wrong = ScheduleForProblem(ScheduleKind::kInterleaved, 2, v);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("stage_device"), absl::string_view::npos);
}

TEST(SchedulesTest, RejectsBadParameters) {
  EXPECT_EQ(GenerateSchedule(ScheduleKind::k1F1B, 4, 2, 8).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GenerateSchedule(ScheduleKind::k1F1B, 4, 1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto s = GenerateSchedule(ScheduleKind::kDualPipeV, 4, 2, 7);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("microbatches"), absl::string_view::npos);
  EXPECT_FALSE(ParseScheduleKind("2f2b").ok());
  auto inter = GenerateSchedule(ScheduleKind::kInterleaved, 4, 2, 3);
  EXPECT_EQ(inter.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(inter.status().message().find("microbatches must be >= devices"),
            absl::string_view::npos);
}

}  // namespace
}  // namespace octopipe
