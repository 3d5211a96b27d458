#include "planner_service/metrics/planner_metrics.h"

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner_service/metrics/metrics.h"

namespace octopipe::metrics {
namespace {

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

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
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
  const std::string path = absl::StrCat(TempDir(), "/", file_name);
  std::ofstream(path) << text;
  return RunShell(absl::StrCat("'", promtool, "' check metrics < '", path, "'"));
}

std::unique_ptr<PlannerMetrics> MustCreate(Registry& registry) {
  absl::StatusOr<std::unique_ptr<PlannerMetrics>> m = PlannerMetrics::Create(registry);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

void SetSomeValues(PlannerMetrics& m) {
  m.PlansComputed(PlanKind::kOneshot).Inc();
  m.PlansComputed(PlanKind::kJob).Inc(2);
  m.TuningSeconds().Observe(0.02);
  m.TuningSeconds().Observe(3.5);
  m.predicted_iteration_seconds->WithLabels({"job-1"}).Set(1.25);
  m.predicted_bubble_ratio->WithLabels({"job-1"}).Set(0.125);
  m.Replans(ReplanReason::kNodeFailure).Inc();
  m.agents_alive->Set(3);
  m.Rpcs("SubmitJob", absl::StatusCode::kOk).Inc();
  m.Rpcs("GetPlan", absl::StatusCode::kNotFound).Inc();
  m.jobs->Set(1);
}

TEST(PlannerMetricsTest, DeclaresEveryFamilyWithItsTypeAndLabels) {
  Registry registry;
  auto m = MustCreate(registry);
  ASSERT_NE(m, nullptr);
  SetSomeValues(*m);
  const std::string text = registry.RenderText();
  for (const char* type_line : {
           "# TYPE octopipe_plans_computed_total counter\n",
           "# TYPE octopipe_tuning_seconds histogram\n",
           "# TYPE octopipe_predicted_iteration_seconds gauge\n",
           "# TYPE octopipe_predicted_bubble_ratio gauge\n",
           "# TYPE octopipe_replans_total counter\n",
           "# TYPE octopipe_agents_alive gauge\n",
           "# TYPE octopipe_rpcs_total counter\n",
           "# TYPE octopipe_jobs gauge\n",
       }) {
    EXPECT_THAT(text, HasSubstr(type_line));
  }
  EXPECT_THAT(text, HasSubstr("octopipe_plans_computed_total{kind=\"job\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("octopipe_tuning_seconds_bucket{le=\"0.01\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("octopipe_tuning_seconds_bucket{le=\"0.025\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("octopipe_tuning_seconds_bucket{le=\"60\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("octopipe_tuning_seconds_count 2\n"));
  EXPECT_THAT(text, HasSubstr("octopipe_predicted_iteration_seconds{job=\"job-1\"} 1.25\n"));
  EXPECT_THAT(text, HasSubstr("octopipe_predicted_bubble_ratio{job=\"job-1\"} 0.125\n"));
  EXPECT_THAT(text, HasSubstr("octopipe_replans_total{reason=\"node_failure\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("octopipe_agents_alive 3\n"));
  EXPECT_THAT(text, HasSubstr("octopipe_rpcs_total{method=\"GetPlan\",code=\"NOT_FOUND\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("octopipe_rpcs_total{method=\"SubmitJob\",code=\"OK\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("octopipe_jobs 1\n"));
}

// Known label values exist before their first increment, so rate() sees the first one.
TEST(PlannerMetricsTest, KnownLabelValuesAreExportedAtZero) {
  Registry registry;
  auto m = MustCreate(registry);
  ASSERT_NE(m, nullptr);
  const std::string text = registry.RenderText();
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
           "octopipe_tuning_seconds_count 0\n",
       }) {
    EXPECT_THAT(text, HasSubstr(series));
  }
  // No job yet: the per-job and per-RPC families have no series and are left out.
  EXPECT_THAT(text, Not(HasSubstr("octopipe_predicted_iteration_seconds")));
  EXPECT_THAT(text, Not(HasSubstr("octopipe_rpcs_total")));
}

TEST(PlannerMetricsTest, TypedAccessorsAreTheLabelledChildren) {
  Registry registry;
  auto m = MustCreate(registry);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(&m->Replans(ReplanReason::kDrain), &m->replans->WithLabels({"drain"}));
  EXPECT_EQ(&m->PlansComputed(PlanKind::kOneshot), &m->plans_computed->WithLabels({"oneshot"}));
  EXPECT_EQ(&m->Rpcs("Plan", absl::StatusCode::kInvalidArgument),
            &m->rpcs->WithLabels({"Plan", "INVALID_ARGUMENT"}));
}

TEST(PlannerMetricsTest, CreateTwiceOnOneRegistryFails) {
  Registry registry;
  ASSERT_NE(MustCreate(registry), nullptr);
  auto again = PlannerMetrics::Create(registry);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
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
  m->predicted_bubble_ratio->WithLabels({"quote\"back\\slash\nnewline"}).Set(0.5);
  CommandResult check = PromtoolCheck(registry.RenderText(), "planner_metrics.prom");
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
