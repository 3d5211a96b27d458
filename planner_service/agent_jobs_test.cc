// Agent jobs on the planner side: the reference model a job names is checked and planned as its
// own graph; every plan device gets its (node, local device).
#include "planner_service/agent_jobs.h"

#include "core/cluster_presets.h"
#include "gtest/gtest.h"

namespace octopipe::planner {
namespace {

proto::CreateJobRequest Request(const std::string& model, int64_t iterations) {
  proto::CreateJobRequest r;
  r.mutable_training()->set_reference_model(model);
  r.mutable_training()->set_iterations(iterations);
  return r;
}

TEST(AgentJobsTest, FillsTheModelFromTheReferenceSpec) {
  absl::StatusOr<proto::CreateJobRequest> r = ResolveAgentTraining(Request("ref:pattern=M*-E", 5));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model().layers_size(), 6);  // embedding, 4 letters, head
}

TEST(AgentJobsTest, RejectsUnknownModelsAndBadCountsNamingTheField) {
  absl::StatusOr<proto::CreateJobRequest> bad = ResolveAgentTraining(Request("ref:pattern=MQ", 5));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("training.reference_model"), std::string::npos)
      << bad.status();
  absl::StatusOr<proto::CreateJobRequest> zero = ResolveAgentTraining(Request("ref:pattern=M", 0));
  EXPECT_NE(zero.status().message().find("training.iterations"), std::string::npos)
      << zero.status();
  proto::CreateJobRequest plain;  // no training: unchanged
  EXPECT_TRUE(ResolveAgentTraining(plain).ok());
}

TEST(AgentJobsTest, DeviceSlotsFollowTheNodesInOrder) {
  Cluster c = *ClusterPreset("h100-4nodes");
  c.nodes.resize(2);
  c.nodes[0].name = "a";
  c.nodes[0].num_devices = 2;
  c.nodes[1].name = "b";
  c.nodes[1].num_devices = 2;
  proto::PlanVersion v;
  FillDeviceSlots(c, 3, &v);
  ASSERT_EQ(v.device_slots_size(), 3);
  EXPECT_EQ(v.device_slots(1).node_id(), "a");
  EXPECT_EQ(v.device_slots(1).local_device(), 1);
  EXPECT_EQ(v.device_slots(2).node_id(), "b");
  EXPECT_EQ(v.device_slots(2).local_device(), 0);
}

}  // namespace
}  // namespace octopipe::planner
