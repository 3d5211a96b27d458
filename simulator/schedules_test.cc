// Pins the classic schedules' closed forms at unit costs and no transfer time.
#include "simulator/schedules.h"

#include <tuple>

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

TEST(SchedulesTest, EveryScheduleIsDeadlockFreeOverManyShapes) {
  for (ScheduleKind kind : AllScheduleKinds()) {
    for (int p = 1; p <= 6; ++p) {
      for (int m = 1; m <= 14; ++m) {
        if (kind == ScheduleKind::kDualPipeV && m < 2 * p) continue;
        for (int v : {0, 3}) {
          if (v == 3 && kind != ScheduleKind::kInterleaved) continue;
          if (kind == ScheduleKind::kInterleaved && m % p != 0) continue;
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

TEST(SchedulesTest, RejectsBadParameters) {
  EXPECT_EQ(GenerateSchedule(ScheduleKind::k1F1B, 4, 2, 8).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GenerateSchedule(ScheduleKind::k1F1B, 4, 1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto s = GenerateSchedule(ScheduleKind::kDualPipeV, 4, 2, 7);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("microbatches"), absl::string_view::npos);
  EXPECT_FALSE(ParseScheduleKind("2f2b").ok());
  auto inter = GenerateSchedule(ScheduleKind::kInterleaved, 4, 2, 6);
  EXPECT_EQ(inter.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(inter.status().message().find("multiple of devices"), absl::string_view::npos);
}

}  // namespace
}  // namespace octopipe
