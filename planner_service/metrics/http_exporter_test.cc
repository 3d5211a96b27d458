#include "planner_service/metrics/http_exporter.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "planner_service/metrics/metrics.h"

namespace octopipe::metrics {
namespace {

using ::testing::HasSubstr;

class HttpExporterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto jobs = registry_.AddGauge("octopipe_jobs", "Jobs the planner manages.", "");
    auto rpcs = registry_.AddCounter("octopipe_rpcs_total", "RPCs.", "", {"method", "code"});
    ASSERT_TRUE(jobs.ok()) << jobs.status();
    ASSERT_TRUE(rpcs.ok()) << rpcs.status();
    jobs_ = &(*jobs)->WithLabels({});
    rpcs_ = *rpcs;
  }

  Registry registry_;
  Gauge* jobs_ = nullptr;
  CounterFamily* rpcs_ = nullptr;
};

// A real TCP round trip: port 0 picks a free port, the client reads the page and its headers.
TEST_F(HttpExporterTest, ServesMetricsOnAPickedPort) {
  jobs_->Set(3);
  rpcs_->WithLabels({"Plan", "OK"}).Inc(2);
  HttpExporter exporter(registry_, HttpExporterOptions{});
  EXPECT_EQ(exporter.port(), 0);
  ASSERT_TRUE(exporter.Start().ok());
  ASSERT_GT(exporter.port(), 0);

  httplib::Client client("127.0.0.1", exporter.port());
  httplib::Result res = client.Get("/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4");
  EXPECT_EQ(res->body,
            "# HELP octopipe_jobs Jobs the planner manages.\n"
            "# TYPE octopipe_jobs gauge\n"
            "octopipe_jobs 3\n"
            "# HELP octopipe_rpcs_total RPCs.\n"
            "# TYPE octopipe_rpcs_total counter\n"
            "octopipe_rpcs_total{method=\"Plan\",code=\"OK\"} 2\n");

  // Each scrape renders afresh.
  jobs_->Set(4);
  res = client.Get("/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_THAT(res->body, HasSubstr("octopipe_jobs 4\n"));
}

TEST_F(HttpExporterTest, HealthzAndUnknownPaths) {
  HttpExporter exporter(registry_, HttpExporterOptions{});
  ASSERT_TRUE(exporter.Start().ok());
  httplib::Client client("127.0.0.1", exporter.port());
  httplib::Result health = client.Get("/healthz");
  ASSERT_TRUE(health) << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "ok\n");
  httplib::Result missing = client.Get("/nope");
  ASSERT_TRUE(missing) << httplib::to_string(missing.error());
  EXPECT_EQ(missing->status, 404);
}

TEST_F(HttpExporterTest, StopClosesThePortIsIdempotentAndForbidsRestart) {
  HttpExporter exporter(registry_, HttpExporterOptions{});
  ASSERT_TRUE(exporter.Start().ok());
  const int port = exporter.port();
  exporter.Stop();
  exporter.Stop();
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(2);
  EXPECT_FALSE(client.Get("/healthz"));
  absl::Status again = exporter.Start();
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition) << again;
}

// httplib ignores stop() before its accept loop runs; Start waits for the loop, so an immediate
// Stop (and the destructor) must return instead of hanging.
TEST_F(HttpExporterTest, StopRightAfterStartReturns) {
  for (int i = 0; i < 20; ++i) {
    HttpExporter exporter(registry_, HttpExporterOptions{});
    ASSERT_TRUE(exporter.Start().ok());
  }
}

TEST_F(HttpExporterTest, StopWithoutStartIsANoOp) {
  HttpExporter exporter(registry_, HttpExporterOptions{});
  exporter.Stop();
  EXPECT_EQ(exporter.port(), 0);
}

TEST_F(HttpExporterTest, PortInUseIsUnavailable) {
  HttpExporter first(registry_, HttpExporterOptions{});
  ASSERT_TRUE(first.Start().ok());
  HttpExporterOptions options;
  options.port = first.port();
  HttpExporter second(registry_, options);
  absl::Status status = second.Start();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("127.0.0.1:" + std::to_string(first.port())));
}

TEST_F(HttpExporterTest, BadOptionsAreInvalidArgument) {
  HttpExporterOptions options;
  options.port = 70000;
  EXPECT_EQ(HttpExporter(registry_, options).Start().code(), absl::StatusCode::kInvalidArgument);
  options.port = 0;
  options.threads = 0;
  EXPECT_EQ(HttpExporter(registry_, options).Start().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace octopipe::metrics
