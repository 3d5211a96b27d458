#include "planner_service/metrics/planner_metrics.h"

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/test_dirs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace octopipe::metrics {
namespace {

using ::octopipe::testing::TestPath;
using ::testing::HasSubstr;
using ::testing::Not;

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

CommandResult RunShell(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen(absl::StrCat(command, " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) result.output.append(buf, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// Runs `promtool check metrics` (parse + lint) on `text`. A missing promtool is a failure, not
// a skip: CI installs it (Debian package `prometheus`, tools/setup.sh).
CommandResult PromtoolCheck(const std::string& text, const std::string& file_name) {
  CommandResult which = RunShell("which promtool");
  const std::string promtool(absl::StripTrailingAsciiWhitespace(which.output));
  if (which.exit_code != 0 || promtool.empty()) {
    const char* path = std::getenv("PATH");
    ADD_FAILURE() << "promtool not found on PATH (" << (path != nullptr ? path : "unset")
                  << "); install the Debian package `prometheus` (tools/setup.sh does)";
    return CommandResult{};
  }
  const std::string path = TestPath(file_name);
  std::ofstream(path) << text;
  return RunShell(absl::StrCat("'", promtool, "' check metrics < '", path, "'"));
}

using Registry = prometheus::Registry;

std::string RenderText(const Registry& registry) {
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

std::unique_ptr<PlannerMetrics> MustCreate(Registry& registry) {
  absl::StatusOr<std::unique_ptr<PlannerMetrics>> m = PlannerMetrics::Create(registry);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

void SetSomeValues(PlannerMetrics& m) {
  m.PlansComputed(PlanKind::kOneshot).Increment();
  m.PlansComputed(PlanKind::kJob).Increment(2);
  m.TuningSeconds().Observe(0.02);
  m.TuningSeconds().Observe(3.5);
  m.SetJobPrediction("job-1", 1.25, 0.125);
  m.SetJobMeasurement("job-1", 1.5, 0.25);
  m.Replans(ReplanReason::kNodeFailure).Increment();
  m.AgentsAlive().Set(3);
  m.Rpcs("SubmitJob", absl::StatusCode::kOk).Increment();
  m.Rpcs("GetPlan", absl::StatusCode::kNotFound).Increment();
  m.Jobs().Set(1);
  m.TuningQueueDepth("oneshot").Set(4);
}

TEST(PlannerMetricsTest, DeclaresEveryFamilyWithItsTypeAndLabels) {
  Registry registry;
  auto m = MustCreate(registry);
  ASSERT_NE(m, nullptr);
  SetSomeValues(*m);
  const std::string text = RenderText(registry);
  for (const char* type_line : {
           "# TYPE octopipe_plans_computed_total counter\n",
           "# TYPE octopipe_tuning_seconds histogram\n",
           "# TYPE octopipe_predicted_iteration_seconds gauge\n",
           "# TYPE octopipe_predicted_bubble_ratio gauge\n",
           "# TYPE octopipe_measured_iteration_seconds gauge\n",
           "# TYPE octopipe_measured_bubble_ratio gauge\n",
           "# TYPE octopipe_replans_total counter\n",
           "# TYPE octopipe_agents_alive gauge\n",
           "# TYPE octopipe_rpcs_total counter\n",
           "# TYPE octopipe_jobs gauge\n",
           "# TYPE octopipe_tuning_queue_depth gauge\n",
       }) {
    EXPECT_THAT(text, HasSubstr(type_line));
  }
  EXPECT_THAT(text, HasSubstr("octopipe_plans_computed_total{kind=\"job\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("octopipe_tuning_seconds_bucket{le=\"0.01\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("octopipe_tuning_seconds_bucket{le=\"0.025\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("octopipe_tuning_seconds_bucket{le=\"60\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("octopipe_tuning_seconds_count 2\n"));
  EXPECT_THAT(text, HasSubstr("octopipe_predicted_iteration_seconds{job_id=\"job-1\"} 1.25\n"));
  EXPECT_THAT(text, HasSubstr("octopipe_predicted_bubble_ratio{job_id=\"job-1\"} 0.125\n"));
  EXPECT_THAT(text, HasSubstr("octopipe_measured_iteration_seconds{job_id=\"job-1\"} 1.5\n"));
  EXPECT_THAT(text, HasSubstr("octopipe_measured_bubble_ratio{job_id=\"job-1\"} 0.25\n"));
  EXPECT_THAT(text, HasSubstr("octopipe_replans_total{reason=\"node_failure\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("octopipe_agents_alive 3\n"));
  EXPECT_THAT(text, HasSubstr("octopipe_rpcs_total{code=\"NOT_FOUND\",method=\"GetPlan\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("octopipe_rpcs_total{code=\"OK\",method=\"SubmitJob\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("octopipe_jobs 1\n"));
  EXPECT_THAT(text, HasSubstr("octopipe_tuning_queue_depth{lane=\"oneshot\"} 4\n"));
}

// Known label values exist before their first increment, so rate() sees the first one.
TEST(PlannerMetricsTest, KnownLabelValuesAreExportedAtZero) {
  Registry registry;
  auto m = MustCreate(registry);
  ASSERT_NE(m, nullptr);
  const std::string text = RenderText(registry);
  for (const char* series : {
           "octopipe_plans_computed_total{kind=\"oneshot\"} 0\n",
           "octopipe_plans_computed_total{kind=\"job\"} 0\n",
           "octopipe_replans_total{reason=\"measured\"} 0\n",
           "octopipe_replans_total{reason=\"node_failure\"} 0\n",
           "octopipe_replans_total{reason=\"drain\"} 0\n",
           "octopipe_replans_total{reason=\"node_join\"} 0\n",
           "octopipe_agents_alive 0\n",
           "octopipe_jobs 0\n",
           "octopipe_tuning_queue_depth{lane=\"jobs\"} 0\n",
           "octopipe_tuning_queue_depth{lane=\"oneshot\"} 0\n",
           "octopipe_plan_cache_lookups_total{result=\"hit\"} 0\n",
           "octopipe_plan_cache_lookups_total{result=\"miss\"} 0\n",
           "octopipe_tuning_seconds_count 0\n",
       }) {
    EXPECT_THAT(text, HasSubstr(series));
  }
  // No job or RPC yet: their labelled families have no series.
  EXPECT_THAT(text, Not(HasSubstr("octopipe_predicted_iteration_seconds{")));
  EXPECT_THAT(text, Not(HasSubstr("octopipe_rpcs_total{")));
}

TEST(PlannerMetricsTest, RpcCounterIsOneSeriesPerMethodAndCode) {
  Registry registry;
  auto m = MustCreate(registry);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(&m->Rpcs("Plan", absl::StatusCode::kInvalidArgument),
            &m->Rpcs("Plan", absl::StatusCode::kInvalidArgument));
  EXPECT_NE(&m->Rpcs("Plan", absl::StatusCode::kInvalidArgument),
            &m->Rpcs("Plan", absl::StatusCode::kOk));
}

TEST(PlannerMetricsTest, RemoveJobDropsItsSeriesOnly) {
  Registry registry;
  auto m = MustCreate(registry);
  ASSERT_NE(m, nullptr);
  m->SetJobPrediction("job-1", 1.5, 0.25);
  m->SetJobPrediction("job-2", 2.5, 0.5);
  m->SetJobMeasurement("job-1", 1.75, 0.3);
  m->SetJobMeasurement("job-2", 2.75, 0.6);
  m->RemoveJob("job-1");
  m->RemoveJob("job-never-seen");
  const std::string text = RenderText(registry);
  EXPECT_THAT(text, Not(HasSubstr("job_id=\"job-1\"")));
  EXPECT_THAT(text, HasSubstr("octopipe_predicted_iteration_seconds{job_id=\"job-2\"} 2.5\n"));
  EXPECT_THAT(text, HasSubstr("octopipe_predicted_bubble_ratio{job_id=\"job-2\"} 0.5\n"));
  EXPECT_THAT(text, HasSubstr("octopipe_measured_bubble_ratio{job_id=\"job-2\"} 0.6\n"));
}

// A name already taken by a metric of another type is refused with a status, not a throw.
TEST(PlannerMetricsTest, NameTakenByAnotherTypeIsInvalidArgument) {
  Registry registry;
  prometheus::BuildCounter().Name("octopipe_jobs").Help("a clash").Register(registry);
  auto m = PlannerMetrics::Create(registry);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("planner's metrics"));
}

TEST(PlannerMetricsTest, TuningBucketsSpanTenMillisecondsToAMinute) {
  const std::vector<double>& b = PlannerMetrics::TuningSecondsBuckets();
  ASSERT_FALSE(b.empty());
  EXPECT_EQ(b.front(), 0.01);
  EXPECT_EQ(b.back(), 60);
}

// The page a real Prometheus would scrape passes promtool's parser and linter (naming, units,
// _total suffixes, HELP present).
TEST(PromtoolTest, PlannerPagePassesPromtoolCheckMetrics) {
  Registry registry;
  auto m = MustCreate(registry);
  ASSERT_NE(m, nullptr);
  SetSomeValues(*m);
  m->SetJobPrediction("quote\"back\\slash\nnewline", 2, 0.5);
  CommandResult check = PromtoolCheck(RenderText(registry), "planner_metrics.prom");
  EXPECT_EQ(check.exit_code, 0) << check.output;
  EXPECT_EQ(check.output, "");
}

// The harness above can fail: promtool flags a page that breaks the conventions.
TEST(PromtoolTest, PromtoolRejectsABadPage) {
  CommandResult check = PromtoolCheck("# HELP octopipe_plans Plans.\n"
                                      "# TYPE octopipe_plans counter\n"
                                      "octopipe_plans 1\n",
                                      "bad.prom");
  EXPECT_NE(check.exit_code, 0);
  EXPECT_THAT(check.output, HasSubstr("_total"));
}

}  // namespace
}  // namespace octopipe::metrics
