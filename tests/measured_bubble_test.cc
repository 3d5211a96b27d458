// The planner's pipeline-wide measured bubble ratio, end to end: the real octopipe-planner
// process, a job on two nodes with two devices each, real ReportStageTimes RPCs as the two
// nodes' agents send them (each with its own devices' busy and iteration seconds), and the
// planner's /metrics scraped over HTTP. The measured series appears only once every device of
// the plan has reported, equals 1 - busy / (devices x iteration time) across both nodes, sits
// next to the predicted one, and goes with the job.
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "core/cluster_presets.h"
#include "core/convert.h"
#include "core/test_dirs.h"
#include "gtest/gtest.h"
#include "proto/planner.grpc.pb.h"
#include "tests/planner_process.h"

namespace octopipe {
namespace {

using ::octopipe::testing::TestPath;
using testing::MetricValue;
using testing::PlannerProcess;
using testing::ScrapeMetrics;

constexpr char kPlanner[] = "planner_service/octopipe-planner";

std::unique_ptr<grpc::ClientContext> Ctx() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  return ctx;
}

proto::CreateJobRequest TwoNodeJob() {
  Cluster c = *ClusterPreset("h100-4nodes");
  c.nodes.resize(2);
  c.nodes[0].name = "node-a";
  c.nodes[1].name = "node-b";
  for (Node& n : c.nodes) n.num_devices = 2;
  proto::CreateJobRequest r;
  r.set_name("bubble");
  *r.mutable_cluster() = ClusterToProto(c);
  r.mutable_options()->set_time_budget_s(1);
  r.mutable_options()->set_seed(1);
  // One pipeline over the four devices (an agent job is otherwise planned as a layout, whose
  // reports come from pipeline 0's replica 0 only).
  r.mutable_options()->set_num_devices(4);
  proto::AgentTraining* t = r.mutable_training();
  t->set_reference_model("ref:pattern=M*-EM-,hidden=16,heads=2,ffn=24,experts=4,top_k=2,"
                         "moe_ffn=12,state=4,seq=8,vocab=32,seed=5,microbatches=8");
  t->set_iterations(100);
  return r;
}

class MeasuredBubbleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = TestPath("state");
    ASSERT_TRUE(planner_.Start({"--state_dir=" + dir, "--default_time_budget_s=1"}).ok())
        << planner_.log();
    stub_ = proto::Planner::NewStub(
        grpc::CreateChannel(planner_.address(), grpc::InsecureChannelCredentials()));
  }

  // The job's first plan version (waits for the planning).
  proto::PlanVersion FirstVersion(const std::string& job_id) {
    proto::WatchPlanRequest req;
    req.set_job_id(job_id);
    auto ctx = Ctx();
    auto reader = stub_->WatchPlan(ctx.get(), req);
    proto::PlanVersion v;
    EXPECT_TRUE(reader->Read(&v));
    ctx->TryCancel();
    reader->Finish();
    return v;
  }

  // A node's report: busy[d] and iteration[d] for each plan device d the node holds.
  grpc::Status Report(const std::string& job_id, int64_t version, const std::string& node,
                      const std::map<int, std::pair<double, double>>& devices) {
    proto::ReportStageTimesRequest req;
    req.set_job_id(job_id);
    req.set_plan_version(version);
    req.set_node_id(node);
    for (const auto& [device, times] : devices) {
      proto::DeviceBusyTime* t = req.add_device_times();
      t->set_device(device);
      t->set_busy_seconds(times.first);
      t->set_iteration_seconds(times.second);
      t->set_iterations(5);
    }
    proto::ReportStageTimesResponse resp;
    auto ctx = Ctx();
    return stub_->ReportStageTimes(ctx.get(), req, &resp);
  }

  std::optional<double> Gauge(const std::string& name, const std::string& job_id) {
    return MetricValue(ScrapeMetrics(planner_.metrics_port()),
                       absl::StrCat(name, "{job_id=\"", job_id, "\"}"));
  }

  PlannerProcess planner_{kPlanner};
  std::unique_ptr<proto::Planner::Stub> stub_;
};

TEST_F(MeasuredBubbleTest, PipelineWideRatioFromEveryNodesReportsNextToThePrediction) {
  proto::Job job;
  {
    auto ctx = Ctx();
    grpc::Status s = stub_->CreateJob(ctx.get(), TwoNodeJob(), &job);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  const proto::PlanVersion v1 = FirstVersion(job.id());
  ASSERT_EQ(v1.version(), 1);
  // The plan's devices by node.
  std::map<std::string, std::vector<int>> devices_of;
  for (int d = 0; d < v1.device_slots_size(); ++d) {
    devices_of[v1.device_slots(d).node_id()].push_back(d);
  }
  ASSERT_EQ(devices_of.size(), 2u) << "the plan spans both nodes";
  const int num_devices = v1.device_slots_size();

  // Device d: busy 0.1 (d + 1) s of an iteration of 1.0 s, the last device's 1.2 s.
  double busy_sum = 0;
  std::map<std::string, std::map<int, std::pair<double, double>>> reports;
  for (const auto& [node, devices] : devices_of) {
    for (int d : devices) {
      const double busy = 0.1 * (d + 1);
      reports[node][d] = {busy, d == num_devices - 1 ? 1.2 : 1.0};
      busy_sum += busy;
    }
  }
  const double expected = 1 - busy_sum / (num_devices * 1.2);

  // The prediction is exported just after the version is published: wait for it.
  std::optional<double> predicted;
  for (int i = 0; i < 600 && !predicted.has_value(); ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    predicted = Gauge("octopipe_predicted_bubble_ratio", job.id());
  }
  ASSERT_TRUE(predicted.has_value()) << ScrapeMetrics(planner_.metrics_port());

  // One node's devices are not the pipeline: no measured series yet.
  grpc::Status s = Report(job.id(), 1, "node-a", reports["node-a"]);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_FALSE(Gauge("octopipe_measured_bubble_ratio", job.id()).has_value());

  // A bad device index is refused by name and changes nothing.
  s = Report(job.id(), 1, "node-b", {{num_devices, {0.1, 1.0}}});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("device_times[0].device"), std::string::npos)
      << s.error_message();
  EXPECT_FALSE(Gauge("octopipe_measured_bubble_ratio", job.id()).has_value());

  // The other node's report completes the pipeline.
  s = Report(job.id(), 1, "node-b", reports["node-b"]);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const std::string page = ScrapeMetrics(planner_.metrics_port());
  std::optional<double> measured =
      MetricValue(page, absl::StrCat("octopipe_measured_bubble_ratio{job_id=\"", job.id(), "\"}"));
  ASSERT_TRUE(measured.has_value()) << page;
  EXPECT_NEAR(*measured, expected, 1e-12);
  std::optional<double> iteration = MetricValue(
      page, absl::StrCat("octopipe_measured_iteration_seconds{job_id=\"", job.id(), "\"}"));
  ASSERT_TRUE(iteration.has_value()) << page;
  EXPECT_NEAR(*iteration, 1.2, 1e-12);
  EXPECT_TRUE(MetricValue(page, absl::StrCat("octopipe_predicted_bubble_ratio{job_id=\"",
                                             job.id(), "\"}"))
                  .has_value());

  // A newer report of node-a's devices (fully busy) moves the pipeline's ratio.
  std::map<int, std::pair<double, double>> busy_a;
  double busy_b = 0;
  for (const auto& [d, t] : reports["node-b"]) busy_b += t.first;
  for (int d : devices_of["node-a"]) busy_a[d] = {1.0, 1.0};
  s = Report(job.id(), 1, "node-a", busy_a);
  ASSERT_TRUE(s.ok()) << s.error_message();
  measured = Gauge("octopipe_measured_bubble_ratio", job.id());
  ASSERT_TRUE(measured.has_value());
  EXPECT_NEAR(*measured,
              1 - (static_cast<double>(busy_a.size()) + busy_b) / (num_devices * 1.2), 1e-12);

  // The series go with the job.
  proto::DeleteJobRequest del;
  del.set_job_id(job.id());
  proto::DeleteJobResponse del_resp;
  auto ctx = Ctx();
  ASSERT_TRUE(stub_->DeleteJob(ctx.get(), del, &del_resp).ok());
  EXPECT_FALSE(Gauge("octopipe_measured_bubble_ratio", job.id()).has_value());
  EXPECT_FALSE(Gauge("octopipe_predicted_bubble_ratio", job.id()).has_value());
}

}  // namespace
}  // namespace octopipe
