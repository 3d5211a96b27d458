#include "planner_service/admission.h"

#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace octopipe::planner {
namespace {

using ::testing::HasSubstr;

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(AdmissionTest, DeadlineIsTheBudgetOrTheNearerClientDeadlineLessAMargin) {
  AdmissionOptions o;
  EXPECT_DOUBLE_EQ(CallDeadline(100, 2, kInf, o), 102);
  EXPECT_DOUBLE_EQ(CallDeadline(100, 2, 10, o), 102);
  EXPECT_DOUBLE_EQ(CallDeadline(100, 2, 1, o), 100.95);
}

TEST(AdmissionTest, MinimumBudgetIsATenthWithAFloor) {
  AdmissionOptions o;
  EXPECT_DOUBLE_EQ(MinBudget(10, o), 1);
  EXPECT_DOUBLE_EQ(MinBudget(0.1, o), 0.02);
  EXPECT_DOUBLE_EQ(MinBudget(0.01, o), 0.01);  // never more than asked
}

TEST(AdmissionTest, IdleServerAdmitsAndGivesTheFullBudget) {
  AdmissionOptions o;
  LoadSnapshot idle;
  idle.workers = 2;
  EXPECT_TRUE(Admit(0, 1, 1, idle, o).ok());
  EXPECT_DOUBLE_EQ(StartBudget(0, 1, 1, idle, o), 1);
}

TEST(AdmissionTest, BudgetDegradesWithTheQueueInsteadOfRefusing) {
  AdmissionOptions o;
  LoadSnapshot load;
  load.workers = 2;
  load.queued = 6;
  load.tasks_ahead = 8;
  load.typical_task_s = 0.5;
  // 7 tasks beyond a free worker x 0.5 s / 2 workers = 1.75 s wait; 10 s budget: admitted.
  EXPECT_TRUE(Admit(0, 10, 10, load, o).ok());
  EXPECT_DOUBLE_EQ(StartBudget(0, 10, 10, load, o), 10.0 * 2 / 8);
  // Never below the minimum budget, never past the deadline.
  load.queued = 1000;
  EXPECT_DOUBLE_EQ(StartBudget(0, 10, 10, load, o), 1);
  EXPECT_DOUBLE_EQ(StartBudget(9.5, 10, 10, load, o), 0.5);
  EXPECT_LE(StartBudget(11, 10, 10, load, o), 0);
}

TEST(AdmissionTest, RefusedOnlyWhenEvenTheMinimumBudgetCannotBeMet) {
  AdmissionOptions o;
  LoadSnapshot load;
  load.workers = 2;
  load.tasks_ahead = 41;  // 40 beyond a free worker x 0.5 s / 2 = 10 s of wait
  load.typical_task_s = 0.5;
  EXPECT_TRUE(Admit(0, 12, 4, load, o).ok());  // 10 + 0.4 <= 12
  const absl::Status s = Admit(0, 5, 4, load, o);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("41 tuning tasks ahead on 2 workers"));
  EXPECT_THAT(s.message(), HasSubstr("estimated wait of 10.00 s"));
}

TEST(AdmissionTest, UnknownTaskTimeCountsEachTaskAheadAsItsMinimumBudget) {
  AdmissionOptions o;
  LoadSnapshot burst;  // 64 calls at once, before any finished
  burst.workers = 2;
  burst.tasks_ahead = 40;
  // 39 waiting x 0.25 s / 2 = 4.9 s: a 2.5 s call is refused at once, not after waiting.
  EXPECT_EQ(Admit(0, 2.5, 2.5, burst, o).code(), absl::StatusCode::kResourceExhausted);
  burst.tasks_ahead = 10;  // 9 x 0.25 / 2 = 1.1 s + 0.25 <= 2.5
  EXPECT_TRUE(Admit(0, 2.5, 2.5, burst, o).ok());
}

TEST(AdmissionTest, TaskTimeIsAnExponentialMean) {
  TaskTimeEstimate e;
  EXPECT_EQ(e.Get(), 0);
  e.Add(1);
  EXPECT_DOUBLE_EQ(e.Get(), 1);
  e.Add(2);
  EXPECT_DOUBLE_EQ(e.Get(), 1.2);
}

}  // namespace
}  // namespace octopipe::planner
