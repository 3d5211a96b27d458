#include "tests/agent_e2e_fixture.h"

#include <algorithm>
#include <cstring>
#include <fstream>

#include "core/cluster.h"
#include "core/cluster_presets.h"
#include "core/convert.h"
#include "executor/checkpoint.h"
#include "executor/inproc_transport.h"
#include "executor/model_spec.h"
#include "executor/trainer.h"
#include "simulator/classic_pipeline.h"

namespace octopipe::agent_e2e {

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool WaitUntil(const std::function<bool()>& done, double timeout_s, int poll_ms) {
  const double deadline = Now() + timeout_s;
  while (Now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(poll_ms));
  }
  return done();
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int64_t LatestCheckpoint(const std::string& dir, const executor::ModelSpec& spec) {
  absl::StatusOr<int64_t> latest = executor::LatestCompleteCheckpoint(dir, spec);
  return latest.ok() ? *latest : 0;
}

int64_t WaitForCheckpoint(const std::string& dir, const executor::ModelSpec& spec,
                          int64_t at_least, double timeout_s) {
  WaitUntil([&] { return LatestCheckpoint(dir, spec) >= at_least; }, timeout_s, /*poll_ms=*/20);
  return LatestCheckpoint(dir, spec);
}

// A job on nodes node-a, node-b, ... with one device each.
proto::CreateJobRequest AgentJob(int iterations, int num_nodes) {
  Cluster c = *ClusterPreset("h100-4nodes");
  c.nodes.resize(num_nodes);
  for (int i = 0; i < num_nodes; ++i) c.nodes[i].name = std::string("node-") + char('a' + i);
  for (Node& n : c.nodes) n.num_devices = 1;
  proto::CreateJobRequest r;
  r.set_name("agents");
  *r.mutable_cluster() = ClusterToProto(c);
  r.mutable_options()->set_time_budget_s(1);
  r.mutable_options()->set_seed(1);
  proto::AgentTraining* t = r.mutable_training();
  t->set_reference_model(kModel);
  t->set_iterations(iterations);
  t->set_checkpoint_interval(kCheckpointInterval);
  return r;
}

std::unique_ptr<grpc::ClientContext> Ctx() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  return ctx;
}

std::vector<std::vector<executor::Tensor>> UninterruptedWeights() {
  const executor::ModelSpec spec = *executor::ParseModelSpec(kModel);
  Plan plan = *ClassicPlan(ScheduleKind::k1F1B, 1, 0, spec.microbatches, executor::ToModelGraph(spec));
  executor::InProcHub hub(1);
  auto t = hub.Endpoint(0);
  executor::TrainOptions o;
  o.iterations = kIterations;
  absl::StatusOr<executor::RankResult> r = executor::TrainRank(spec, plan, 0, t.get(), o);
  EXPECT_TRUE(r.ok()) << r.status();
  std::vector<std::vector<executor::Tensor>> w;
  for (auto& layer : r->layers) {
    w.emplace_back();
    for (executor::Tensor* p : layer->params()) w.back().push_back(*p);
  }
  return w;
}

void ExpectUninterruptedWeights(const std::string& job_checkpoints) {
  const auto want = UninterruptedWeights();
  bool bitwise = true;
  for (size_t l = 0; l < want.size(); ++l) {
    absl::StatusOr<executor::LayerCheckpoint> got = executor::ReadLayerCheckpoint(
        executor::LayerCheckpointPath(job_checkpoints, kIterations, static_cast<int>(l)));
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->params.size(), want[l].size());
    for (size_t i = 0; i < want[l].size(); ++i) {
      const float scale = std::max(1e-12f, want[l][i].norm());
      EXPECT_LE((got->params[i] - want[l][i]).norm() / scale, 1e-4)
          << "layer " << l << " parameter " << i;
      bitwise = bitwise && std::memcmp(got->params[i].data(), want[l][i].data(),
                                       want[l][i].size() * sizeof(float)) == 0;
    }
  }
  std::printf("final weights bit-identical to the uninterrupted run: %s\n",
              bitwise ? "yes" : "no (within float rounding)");
}

}  // namespace octopipe::agent_e2e
