#include "planner_service/metrics/metrics.h"

#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace octopipe::metrics {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The whole page of a small registry, byte for byte: family order by name, children by label
// values, HELP escaping, histogram series, integer formatting.
TEST(RegistryTest, RendersGoldenText) {
  Registry registry;
  auto rpcs = registry.AddCounter("octopipe_rpcs_total", "RPCs handled.", "", {"method", "code"});
  auto jobs = registry.AddGauge("octopipe_jobs", "Jobs.\nSecond line with a \\ backslash.", "");
  auto tuning = registry.AddHistogram("octopipe_tuning_seconds", "Tuning time.", "seconds",
                                      {"kind"}, {0.1, 1, 10});
  ASSERT_TRUE(rpcs.ok()) << rpcs.status();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_TRUE(tuning.ok()) << tuning.status();

  (*rpcs)->WithLabels({"Plan", "OK"}).Inc();
  (*rpcs)->WithLabels({"Plan", "OK"}).Inc(2);
  (*rpcs)->WithLabels({"Heartbeat", "UNAVAILABLE"}).Inc();
  (*jobs)->WithLabels({}).Set(2);
  Histogram& h = (*tuning)->WithLabels({"job"});
  h.Observe(0.05);
  h.Observe(0.1);  // on a bound: counts in that bucket (le is "less or equal")
  h.Observe(2.5);
  h.Observe(100);

  EXPECT_EQ(registry.RenderText(),
            "# HELP octopipe_jobs Jobs.\\nSecond line with a \\\\ backslash.\n"
            "# TYPE octopipe_jobs gauge\n"
            "octopipe_jobs 2\n"
            "# HELP octopipe_rpcs_total RPCs handled.\n"
            "# TYPE octopipe_rpcs_total counter\n"
            "octopipe_rpcs_total{method=\"Heartbeat\",code=\"UNAVAILABLE\"} 1\n"
            "octopipe_rpcs_total{method=\"Plan\",code=\"OK\"} 3\n"
            "# HELP octopipe_tuning_seconds Tuning time.\n"
            "# TYPE octopipe_tuning_seconds histogram\n"
            "octopipe_tuning_seconds_bucket{kind=\"job\",le=\"0.1\"} 2\n"
            "octopipe_tuning_seconds_bucket{kind=\"job\",le=\"1\"} 2\n"
            "octopipe_tuning_seconds_bucket{kind=\"job\",le=\"10\"} 3\n"
            "octopipe_tuning_seconds_bucket{kind=\"job\",le=\"+Inf\"} 4\n"
            "octopipe_tuning_seconds_sum{kind=\"job\"} 102.65\n"
            "octopipe_tuning_seconds_count{kind=\"job\"} 4\n");
}

TEST(RegistryTest, LabelLessFamilyIsExportedAtZeroAndLabelledEmptyFamilyIsOmitted) {
  Registry registry;
  ASSERT_TRUE(registry.AddGauge("octopipe_agents_alive", "Agents.", "").ok());
  ASSERT_TRUE(registry.AddGauge("octopipe_predicted_bubble_ratio", "Bubble.", "ratio", {"job"})
                  .ok());
  EXPECT_EQ(registry.RenderText(),
            "# HELP octopipe_agents_alive Agents.\n"
            "# TYPE octopipe_agents_alive gauge\n"
            "octopipe_agents_alive 0\n");
}

TEST(RegistryTest, EscapesLabelValues) {
  Registry registry;
  auto g = registry.AddGauge("octopipe_predicted_iteration_seconds", "Predicted.", "seconds",
                             {"job"});
  ASSERT_TRUE(g.ok()) << g.status();
  (*g)->WithLabels({"a\"b\\c\nd"}).Set(0.5);
  EXPECT_THAT(registry.RenderText(),
              HasSubstr("octopipe_predicted_iteration_seconds{job=\"a\\\"b\\\\c\\nd\"} 0.5\n"));
  EXPECT_EQ(EscapeLabelValue("plain"), "plain");
  EXPECT_EQ(EscapeHelp("say \"hi\"\n"), "say \"hi\"\\n");  // quotes stay in HELP
}

TEST(FormatValueTest, IntegersShortestDecimalsAndSpecials) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(-3), "-3");
  EXPECT_EQ(FormatValue(123456789), "123456789");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(0.025), "0.025");
  EXPECT_EQ(FormatValue(1e300), "1e+300");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
}

TEST(HistogramTest, BucketsAreCumulativeAndCountEqualsInfBucket) {
  Registry registry;
  auto family = registry.AddHistogram("octopipe_op_seconds", "Op time.", "seconds", {},
                                      {1, 2, 4});
  ASSERT_TRUE(family.ok()) << family.status();
  Histogram& h = (*family)->WithLabels({});
  for (double v : {0.5, 1.0, 1.5, 3.0, 3.5, 4.0, 8.0, -1.0}) h.Observe(v);
  // <=1: 0.5, 1.0, -1.0; <=2: +1.5; <=4: +3.0, 3.5, 4.0; +Inf: +8.0.
  EXPECT_EQ(h.CumulativeCounts(), (std::vector<uint64_t>{3, 4, 7}));
  EXPECT_EQ(h.Count(), 8u);
  EXPECT_DOUBLE_EQ(h.Sum(), 20.5);
  const std::string text = registry.RenderText();
  EXPECT_THAT(text, HasSubstr("octopipe_op_seconds_bucket{le=\"1\"} 3\n"
                              "octopipe_op_seconds_bucket{le=\"2\"} 4\n"
                              "octopipe_op_seconds_bucket{le=\"4\"} 7\n"
                              "octopipe_op_seconds_bucket{le=\"+Inf\"} 8\n"
                              "octopipe_op_seconds_sum 20.5\n"
                              "octopipe_op_seconds_count 8\n"));
}

TEST(HistogramTest, NanGoesToInfBucketOnly) {
  Registry registry;
  auto family = registry.AddHistogram("octopipe_x_seconds", "X.", "seconds", {}, {1});
  ASSERT_TRUE(family.ok());
  Histogram& h = (*family)->WithLabels({});
  h.Observe(std::nan(""));
  EXPECT_EQ(h.CumulativeCounts(), (std::vector<uint64_t>{0}));
  EXPECT_EQ(h.Count(), 1u);
}

// 8 threads hammer one cached child and, separately, look the child up each time: no lost
// update either way.
TEST(ConcurrencyTest, EightThreadsIncrementingOneChildGiveExactTotal) {
  Registry registry;
  auto family = registry.AddCounter("octopipe_events_total", "Events.", "", {"kind"});
  auto hist = registry.AddHistogram("octopipe_wait_seconds", "Wait.", "seconds", {}, {0.5});
  ASSERT_TRUE(family.ok());
  ASSERT_TRUE(hist.ok());
  constexpr int kThreads = 8;
  constexpr int kPerThread = 100000;
  Counter& cached = (*family)->WithLabels({"cached"});
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        cached.Inc();
        if (i % 100 == 0) (*family)->WithLabels({"looked_up"}).Inc(2);
        (*hist)->WithLabels({}).Observe(t % 2 == 0 ? 0.25 : 1.0);
      }
    });
  }
  // Scrapes racing with the writers must keep _count equal to the +Inf bucket.
  for (int i = 0; i < 20; ++i) {
    const std::string text = registry.RenderText();
    const auto value_after = [&text](const std::string& prefix) {
      const size_t at = text.find(prefix);
      EXPECT_NE(at, std::string::npos) << prefix;
      return text.substr(at + prefix.size(), text.find('\n', at) - at - prefix.size());
    };
    EXPECT_EQ(value_after("octopipe_wait_seconds_bucket{le=\"+Inf\"} "),
              value_after("octopipe_wait_seconds_count "));
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(cached.Value(), kThreads * kPerThread);
  EXPECT_EQ((*family)->WithLabels({"looked_up"}).Value(), kThreads * (kPerThread / 100) * 2);
  Histogram& h = (*hist)->WithLabels({});
  EXPECT_EQ(h.Count(), static_cast<uint64_t>(kThreads * kPerThread));
  EXPECT_EQ(h.CumulativeCounts()[0], static_cast<uint64_t>(kThreads / 2 * kPerThread));
  EXPECT_DOUBLE_EQ(h.Sum(), kThreads / 2 * kPerThread * (0.25 + 1.0));
}

TEST(GaugeTest, SetIncDec) {
  Registry registry;
  auto family = registry.AddGauge("octopipe_jobs", "Jobs.", "");
  ASSERT_TRUE(family.ok());
  Gauge& g = (*family)->WithLabels({});
  g.Set(5);
  g.Inc();
  g.Dec(2.5);
  EXPECT_DOUBLE_EQ(g.Value(), 3.5);
}

TEST(FamilyTest, WithLabelsReturnsTheSameChild) {
  Registry registry;
  auto family = registry.AddGauge("octopipe_g", "G.", "", {"a", "b"});
  ASSERT_TRUE(family.ok());
  EXPECT_EQ(&(*family)->WithLabels({"x", "y"}), &(*family)->WithLabels({"x", "y"}));
  EXPECT_NE(&(*family)->WithLabels({"x", "y"}), &(*family)->WithLabels({"y", "x"}));
}

TEST(FamilyTest, RemoveHidesTheSeriesUntilItIsUsedAgain) {
  Registry registry;
  auto family = registry.AddGauge("octopipe_predicted_bubble_ratio", "Bubble.", "ratio", {"job"});
  ASSERT_TRUE(family.ok());
  Gauge& a = (*family)->WithLabels({"a"});
  a.Set(0.25);
  (*family)->WithLabels({"b"}).Set(0.5);
  (*family)->Remove({"a"});
  (*family)->Remove({"never_seen"});  // no-op
  std::string text = registry.RenderText();
  EXPECT_THAT(text, Not(HasSubstr("job=\"a\"")));
  EXPECT_THAT(text, HasSubstr("octopipe_predicted_bubble_ratio{job=\"b\"} 0.5\n"));
  EXPECT_EQ(a.Value(), 0);  // reset, and the old reference is still valid
  EXPECT_EQ(&(*family)->WithLabels({"a"}), &a);
  EXPECT_THAT(registry.RenderText(), HasSubstr("octopipe_predicted_bubble_ratio{job=\"a\"} 0\n"));
}

struct BadDecl {
  std::string why;
  MetricInfo info;
  std::string message;  // expected substring of the error
};

MetricInfo Info(std::string name, MetricType type, std::string unit = "",
                std::vector<std::string> labels = {}, std::vector<double> buckets = {},
                std::string help = "Help.") {
  MetricInfo info;
  info.name = std::move(name);
  info.help = std::move(help);
  info.unit = std::move(unit);
  info.type = type;
  info.label_names = std::move(labels);
  info.buckets = std::move(buckets);
  return info;
}

TEST(ValidateTest, RejectsBadDeclarationsNamingTheMetric) {
  constexpr auto kC = MetricType::kCounter;
  constexpr auto kG = MetricType::kGauge;
  constexpr auto kH = MetricType::kHistogram;
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<BadDecl> cases = {
      {"no prefix", Info("plans_total", kC), "must start with 'octopipe_'"},
      {"prefix only", Info("octopipe_", kG), "must start with 'octopipe_'"},
      {"upper case", Info("octopipe_Jobs", kG), "must match [a-z_][a-z0-9_]*"},
      {"dash", Info("octopipe_agents-alive", kG), "must match"},
      {"colon", Info("octopipe_jobs:rate", kG), "must match"},
      {"space", Info("octopipe_jobs now", kG), "must match"},
      {"empty help", Info("octopipe_jobs", kG, "", {}, {}, ""), "help text is empty"},
      {"counter without _total", Info("octopipe_plans", kC), "must end in '_total'"},
      {"gauge with _total", Info("octopipe_plans_total", kG), "only counters may end in"},
      {"gauge with _count", Info("octopipe_plans_count", kG), "'_count'"},
      {"histogram with _bucket", Info("octopipe_x_bucket", kH, "", {}, {1}), "'_bucket'"},
      {"unit not in name", Info("octopipe_tuning_time", kG, "seconds"),
       "must carry its unit as a suffix: '_seconds'"},
      {"counter unit before _total", Info("octopipe_bytes_sent", kC, "bytes"),
       "must end in '_total'"},
      {"counter unit misplaced", Info("octopipe_sent_total", kC, "bytes"),
       "suffix: '_bytes_total'"},
      {"bad unit", Info("octopipe_x_seconds", kG, "Seconds"), "unit 'Seconds'"},
      {"bad label", Info("octopipe_jobs", kG, "", {"job-id"}), "label name 'job-id'"},
      {"reserved label", Info("octopipe_jobs", kG, "", {"__name"}), "label name '__name'"},
      {"duplicate label", Info("octopipe_jobs", kG, "", {"job", "job"}), "appears twice"},
      {"le on histogram", Info("octopipe_x_seconds", kH, "seconds", {"le"}, {1}),
       "'le' is reserved"},
      {"no buckets", Info("octopipe_x_seconds", kH, "seconds"), "at least one bucket"},
      {"unsorted buckets", Info("octopipe_x_seconds", kH, "seconds", {}, {1, 0.5}),
       "strictly increasing"},
      {"equal buckets", Info("octopipe_x_seconds", kH, "seconds", {}, {1, 1}),
       "strictly increasing"},
      {"inf bucket", Info("octopipe_x_seconds", kH, "seconds", {}, {1, inf}),
       "+Inf is implicit"},
      {"buckets on gauge", Info("octopipe_jobs", kG, "", {}, {1}), "only histograms"},
  };
  for (const BadDecl& c : cases) {
    absl::Status status = ValidateMetricInfo(c.info);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.why;
    EXPECT_THAT(std::string(status.message()), HasSubstr("metric '" + c.info.name + "'"))
        << c.why;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.message)) << c.why;
  }
}

TEST(ValidateTest, AcceptsConventionalNames) {
  EXPECT_TRUE(ValidateMetricInfo(Info("octopipe_sent_bytes_total", MetricType::kCounter, "bytes",
                                      {"peer"}))
                  .ok());
  EXPECT_TRUE(ValidateMetricInfo(Info("octopipe_tuning_seconds", MetricType::kHistogram,
                                      "seconds", {"kind"}, {0.01, 60}))
                  .ok());
  EXPECT_TRUE(ValidateMetricInfo(Info("octopipe_peak_memory_bytes", MetricType::kGauge, "bytes",
                                      {"device"}))
                  .ok());
}

TEST(RegistryTest, DeclarationErrorsComeBackFromAdd) {
  Registry registry;
  auto bad = registry.AddCounter("plans_total", "Plans.", "");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("metric 'plans_total'"));
  auto bad_hist = registry.AddHistogram("octopipe_x_seconds", "X.", "seconds", {}, {});
  EXPECT_EQ(bad_hist.status().code(), absl::StatusCode::kInvalidArgument);

  ASSERT_TRUE(registry.AddGauge("octopipe_jobs", "Jobs.", "").ok());
  auto again = registry.AddGauge("octopipe_jobs", "Jobs again.", "");
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(again.status().message()), HasSubstr("metric 'octopipe_jobs'"));
  auto other_type = registry.AddCounter("octopipe_jobs_total", "Jobs.", "");
  EXPECT_TRUE(other_type.ok());
}

using MetricsDeathTest = ::testing::Test;

TEST_F(MetricsDeathTest, WrongLabelCountAbortsNamingTheMetric) {
  Registry registry;
  auto family = registry.AddCounter("octopipe_rpcs_total", "RPCs.", "", {"method", "code"});
  ASSERT_TRUE(family.ok());
  EXPECT_DEATH((*family)->WithLabels({"Plan"}),
               "metric 'octopipe_rpcs_total' takes 2 label value\\(s\\) \\(method, code\\), "
               "got 1");
  EXPECT_DEATH((*family)->Remove({}), "octopipe_rpcs_total");
}

TEST_F(MetricsDeathTest, NegativeCounterIncrementAborts) {
  Registry registry;
  auto family = registry.AddCounter("octopipe_plans_total", "Plans.", "");
  ASSERT_TRUE(family.ok());
  Counter& c = (*family)->WithLabels({});
  EXPECT_DEATH(c.Inc(-1), "counter 'octopipe_plans_total' incremented by -1");
  EXPECT_DEATH(c.Inc(std::nan("")), "incremented by NaN");
}

}  // namespace
}  // namespace octopipe::metrics
