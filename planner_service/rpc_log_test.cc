// The planner's RPC log line, through a real in-process PlannerServer and a real gRPC client:
// one JSON line per call with method, job, code and latency.
#include "planner_service/rpc_log.h"

#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/ostream_sink.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "logging/logging.h"
#include "planner_service/server.h"
#include "proto/planner.grpc.pb.h"

namespace octopipe::planner {
namespace {

// The parsed JSON lines of the "rpc" logger in `text`.
std::vector<nlohmann::json> RpcLines(const std::string& text) {
  std::vector<nlohmann::json> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(j.is_discarded()) << "not JSON: " << line;
    if (!j.is_discarded() && j["logger"] == "rpc") out.push_back(j);
  }
  return out;
}

// A planner on a free port with its state under TEST_TMPDIR/`state`, and a client of it.
struct Served {
  std::unique_ptr<PlannerServer> server;
  std::unique_ptr<proto::Planner::Stub> stub;
};
Served Serve(const std::string& state) {
  PlannerServerOptions options;
  options.port = 0;
  options.metrics_port = -1;
  const char* tmp = std::getenv("TEST_TMPDIR");
  options.state_dir = absl::StrCat(tmp != nullptr ? tmp : ".", "/", state);
  Served s;
  s.server = std::make_unique<PlannerServer>(options);
  EXPECT_TRUE(s.server->Start().ok());
  s.stub = proto::Planner::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", s.server->port()), grpc::InsecureChannelCredentials()));
  return s;
}

TEST(RpcLogTest, OneJsonLinePerRpcWithMethodJobCodeAndLatency) {
  std::ostringstream out;
  logging::LogOptions log_options;
  log_options.json = true;
  log_options.level = spdlog::level::debug;  // the repeated calls' OK lines are debug
  log_options.sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  logging::Configure(log_options);

  Served served = Serve("rpc_log_state");
  PlannerServer& server = *served.server;
  proto::Planner::Stub* stub = served.stub.get();
  grpc::ClientContext ctx;
  proto::GetJobRequest request;
  request.set_job_id("job-that-does-not-exist");
  proto::GetJobResponse response;
  const grpc::Status status = stub->GetJob(&ctx, request, &response);
  ASSERT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  grpc::ClientContext list_ctx;
  proto::ListJobsResponse list;
  ASSERT_TRUE(stub->ListJobs(&list_ctx, proto::ListJobsRequest(), &list).ok());
  server.Shutdown(1);  // the lines are written before the status is sent; all are in now

  const std::vector<nlohmann::json> lines = RpcLines(out.str());
  ASSERT_EQ(lines.size(), 2u) << out.str();
  EXPECT_EQ(lines[0]["msg"], "rpc");
  EXPECT_EQ(lines[0]["method"], "GetJob");
  EXPECT_EQ(lines[0]["job"], "job-that-does-not-exist");
  EXPECT_EQ(lines[0]["code"], "NOT_FOUND");
  EXPECT_EQ(lines[0]["level"], "info");
  ASSERT_TRUE(lines[0]["latency_ms"].is_number());
  EXPECT_GT(lines[0]["latency_ms"].get<double>(), 0.0);
  EXPECT_NE(lines[0]["error"].get<std::string>().find("job-that-does-not-exist"),
            std::string::npos);
  EXPECT_EQ(lines[1]["method"], "ListJobs");
  EXPECT_EQ(lines[1]["code"], "OK");
  EXPECT_EQ(lines[1]["level"], "debug");  // agents and watchers repeat it: summarised instead
  EXPECT_FALSE(lines[1].contains("job"));  // ListJobs has no job id
  logging::Configure(logging::LogOptions{});
}

// A 10 KB job id is logged cut to 64 bytes with its length, and the repeated calls' summary
// line counts them by method once the interval has passed.
TEST(RpcLogTest, LongIdsAreCutAndRepeatedCallsAreSummarised) {
  std::ostringstream out;
  logging::LogOptions log_options;
  log_options.json = true;
  log_options.sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  logging::Configure(log_options);
  Served served = Serve("rpc_log_long_state");
  PlannerServer& server = *served.server;
  proto::Planner::Stub* stub = served.stub.get();
  grpc::ClientContext ctx;
  proto::DeleteJobRequest request;
  request.set_job_id(std::string(10000, 'x'));
  proto::DeleteJobResponse response;
  EXPECT_FALSE(stub->DeleteJob(&ctx, request, &response).ok());
  server.Shutdown(1);
  const std::vector<nlohmann::json> lines = RpcLines(out.str());
  ASSERT_EQ(lines.size(), 1u) << out.str().substr(0, 2000);
  EXPECT_EQ(lines[0]["job"], std::string(64, 'x') + "...(10000 bytes)");
  EXPECT_LT(out.str().size(), 4000u);
  logging::Configure(logging::LogOptions{});

  std::ostringstream summary_out;
  log_options.sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(summary_out);
  logging::Configure(log_options);
  RpcSummary summary(std::chrono::seconds(60));
  const auto t0 = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
  for (int i = 0; i < 5; ++i) summary.Count("Heartbeat", t0 + std::chrono::seconds(i));
  summary.Count("GetJob", t0 + std::chrono::seconds(30));
  EXPECT_TRUE(RpcLines(summary_out.str()).empty());  // within the minute: nothing yet
  summary.Count("Heartbeat", t0 + std::chrono::seconds(61));
  const std::vector<nlohmann::json> sum = RpcLines(summary_out.str());
  ASSERT_EQ(sum.size(), 1u) << summary_out.str();
  EXPECT_EQ(sum[0]["msg"], "rpc summary");
  EXPECT_EQ(sum[0]["level"], "info");
  EXPECT_EQ(sum[0]["Heartbeat"], 6);
  EXPECT_EQ(sum[0]["GetJob"], 1);
  logging::Configure(logging::LogOptions{});
}

}  // namespace
}  // namespace octopipe::planner
