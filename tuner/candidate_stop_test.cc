// Pins the stop check inside one candidate evaluation: the tuner's budget (or a cancelled
// request) ends a long list scheduling or evaluation midway, leaving the candidate unscored,
// and an evaluation without it is unaffected.
#include <functional>
#include <vector>

#include "core/cost_model.h"
#include "core/synthetic_model.h"
#include "gtest/gtest.h"
#include "simulator/problem_builder.h"
#include "simulator/schedules.h"
#include "tuner/candidate.h"
#include "tuner/partition.h"

namespace octopipe {
namespace {

TEST(CandidateStopTest, StopCheckLeavesALongEvaluationUnscored) {
  const int P = 8, M = 512;  // 2 chunks: 16 stages x 512 micro-batches x (F, B, W) = 24576 ops
  const ModelGraph model = *ParseSyntheticModel("layers=32,f=1,b=2,w=1");
  absl::StatusOr<ProblemBuilder> builder =
      ProblemBuilder::Create(model, SyntheticCluster(P), CostModel(), P);
  ASSERT_TRUE(builder.ok()) << builder.status();
  absl::StatusOr<std::vector<StageAssignment>> stages =
      MinMaxPartition(*builder, LoopPlacement(P, 2));
  ASSERT_TRUE(stages.ok()) << stages.status();
  Candidate c;
  c.stages = *stages;
  CandidateEvaluator ev(*builder, M, /*link_contention=*/false);

  const Score full = ev.Evaluate(c);
  ASSERT_TRUE(full.scheduled) << full.why_not;

  // The candidate is list-scheduled first (polled every 4096 emitted ops: 6 polls for 24576
  // ops), then evaluated (polled every 4096 ops again). A stop at the 2nd poll ends the list
  // scheduling; one at the 7th, the evaluation.
  int polls = 0;
  const std::function<bool()> stop = [&polls] { return ++polls == 2; };
  const Score stopped = ev.Evaluate(c, nullptr, &stop);
  EXPECT_EQ(polls, 2);
  EXPECT_FALSE(stopped.scheduled);
  EXPECT_FALSE(stopped.fits);
  EXPECT_NE(stopped.why_not.find("list scheduling stopped after 8192 of 24576 ops"),
            std::string::npos)
      << stopped.why_not;

  polls = 0;
  const std::function<bool()> late = [&polls] { return ++polls == 7; };
  const Score stopped_late = ev.Evaluate(c, nullptr, &late);
  EXPECT_EQ(polls, 7);
  EXPECT_FALSE(stopped_late.scheduled);
  EXPECT_NE(stopped_late.why_not.find("stopped"), std::string::npos) << stopped_late.why_not;
  EXPECT_EQ(stopped_late.why_not.find("list scheduling"), std::string::npos)
      << stopped_late.why_not;

  // A stop check that never fires changes nothing.
  const std::function<bool()> never = [] { return false; };
  const Score again = ev.Evaluate(c, nullptr, &never);
  ASSERT_TRUE(again.scheduled) << again.why_not;
  EXPECT_EQ(again.iteration_time_s, full.iteration_time_s);
  EXPECT_EQ(again.memory_overflow_bytes, full.memory_overflow_bytes);
}

// The classic orders are generated on first use: a search out of time after its baselines
// never pays for the ZB family's unit-cost orders (seconds each at a million
// stage-micro-batches; it used to build all of them up front).
TEST(CandidateStopTest, ClassicOrdersAreGeneratedOnlyWhenAsked) {
  const ClassicOrders classic(/*devices=*/4, /*microbatches=*/8, /*num_layers=*/16);
  EXPECT_EQ(classic.generated(), 0);
  const GeneratedSchedule* h1 = classic.Get(ScheduleKind::kZbH1);
  ASSERT_NE(h1, nullptr);
  EXPECT_EQ(h1->num_stages, 4);
  EXPECT_EQ(classic.Get(ScheduleKind::kZbH1), h1);  // once per kind
  EXPECT_EQ(classic.generated(), 1);
  EXPECT_NE(classic.Get(ScheduleKind::k1F1B), nullptr);
  EXPECT_EQ(classic.generated(), 2);
}

}  // namespace
}  // namespace octopipe
