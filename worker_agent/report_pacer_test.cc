#include "worker_agent/report_pacer.h"

#include "gtest/gtest.h"

namespace octopipe::agent {
namespace {

TEST(ReportPacerTest, EveryNIterationsButAtMostOncePerInterval) {
  ReportPacer pacer(5, 1.0);
  // 1 ms iterations for 3 s: by iterations alone that would be 600 reports.
  int reports = 0;
  for (int i = 1; i <= 3000; ++i) reports += pacer.Due(i, i * 1e-3) ? 1 : 0;
  EXPECT_EQ(reports, 3);  // at 5 ms, then once per second (1.005 s, 2.005 s)
}

TEST(ReportPacerTest, SlowIterationsReportEveryNIterations) {
  ReportPacer pacer(5, 1.0);
  std::vector<int> at;
  for (int i = 1; i <= 20; ++i) {
    if (pacer.Due(i, i * 2.0)) at.push_back(i);  // 2 s per iteration
  }
  EXPECT_EQ(at, (std::vector<int>{5, 10, 15, 20}));
}

TEST(ReportPacerTest, ZeroIntervalIsByIterationsAndZeroIterationsIsOff) {
  ReportPacer by_iterations(2, 0);
  int reports = 0;
  for (int i = 1; i <= 10; ++i) reports += by_iterations.Due(i, 0) ? 1 : 0;
  EXPECT_EQ(reports, 5);
  ReportPacer off(0, 1.0);
  for (int i = 1; i <= 10; ++i) EXPECT_FALSE(off.Due(i, i * 10.0));
}

TEST(ReportPacerTest, ARestartedRunCountsItsIterationsAfresh) {
  ReportPacer pacer(3, 0);
  EXPECT_FALSE(pacer.Due(1, 0));
  EXPECT_FALSE(pacer.Due(2, 0));
  pacer.Restart();
  EXPECT_FALSE(pacer.Due(1, 0));
  EXPECT_FALSE(pacer.Due(2, 0));
  EXPECT_TRUE(pacer.Due(3, 0));
}

}  // namespace
}  // namespace octopipe::agent
