#include "planner_service/job_manager_test_fixture.h"

#include <utility>

#include "core/cluster_presets.h"
#include "core/convert.h"
#include "core/cost_model.h"
#include "core/model_zoo.h"
#include "gmock/gmock.h"
#include "simulator/problem_builder.h"

namespace octopipe::planner {

proto::CreateJobRequest SmallJob(const std::string& name, const Cluster& cluster,
                                 int devices,
                                 proto::VocabParallelChoice vocab_parallel) {
  TrainingOptions t;
  t.num_microbatches = 8;
  proto::CreateJobRequest r;
  r.set_name(name);
  *r.mutable_model() = ModelToProto(*ZooModel("llama3-8b", t));
  *r.mutable_cluster() = ClusterToProto(cluster);
  r.mutable_options()->set_num_devices(devices);
  r.mutable_options()->set_time_budget_s(5);
  r.mutable_options()->set_vocab_parallel(vocab_parallel);
  return r;
}

Cluster OneNode() { return *ClusterPreset("h100-1node"); }

Cluster TwoNodes() {
  Cluster c = *ClusterPreset("h100-4nodes");
  c.nodes.resize(2);
  for (Node& n : c.nodes) n.num_devices = 2;
  return c;
}

Cluster FourOneGpuNodes() {
  Cluster c = *ClusterPreset("h100-4nodes");
  for (Node& n : c.nodes) n.num_devices = 1;
  return c;
}

void SetAgentTraining(proto::CreateJobRequest* request, int64_t iterations) {
  proto::AgentTraining* t = request->mutable_training();
  t->set_reference_model(
      "ref:pattern=M*-E,hidden=32,heads=2,ffn=64,seq=32,vocab=64,microbatches=4");
  t->set_iterations(iterations);
}

const proto::NodeLossOption* ExpectChosenOption(const proto::PlanResult& result,
                                                double min_gain) {
  const proto::NodeLossOption* chosen = nullptr;
  const proto::NodeLossOption* quickest = nullptr;
  const proto::NodeLossOption* quickest_kept = nullptr;  // of the survivors' options
  int chosen_count = 0;
  for (const proto::NodeLossOption& o : result.node_loss_options()) {
    if (!o.not_offered().empty()) continue;
    if (o.chosen()) {
      chosen = &o;
      ++chosen_count;
    }
    if (quickest == nullptr || o.total_s() < quickest->total_s()) quickest = &o;
    if (o.kind() != "new layout" &&
        (quickest_kept == nullptr || o.total_s() < quickest_kept->total_s())) {
      quickest_kept = &o;
    }
  }
  EXPECT_EQ(chosen_count, 1) << result.DebugString();
  if (chosen_count != 1) return nullptr;
  if (chosen->total_s() != quickest->total_s()) {
    // Only the margin may pass over the quickest: a new layout, not min_gain quicker than the
    // survivors' best, which is the one chosen.
    EXPECT_EQ(quickest->kind(), "new layout") << result.DebugString();
    EXPECT_EQ(chosen, quickest_kept) << result.DebugString();
    EXPECT_GT(quickest->total_s(), chosen->total_s() * (1 - min_gain)) << result.DebugString();
    EXPECT_THAT(quickest->summary(), ::testing::HasSubstr("a new layout must gain"));
  }
  return chosen;
}

absl::StatusOr<PipelineProblem> Predicted(const proto::CreateJobRequest& job,
                                          const proto::PlanVersion& v,
                                          const std::vector<double>& factors) {
  absl::StatusOr<ModelGraph> model = ModelFromProto(job.model());
  if (!model.ok()) return model.status();
  absl::StatusOr<Cluster> cluster = ClusterFromProto(job.cluster());
  if (!cluster.ok()) return cluster.status();
  absl::StatusOr<Plan> plan = PlanFromProto(v.result().plan());
  if (!plan.ok()) return plan.status();
  absl::StatusOr<ProblemBuilder> builder = ProblemBuilder::Create(
      *model, *cluster, CostModel(), plan->num_devices, factors, plan->vocab_parallel);
  if (!builder.ok()) return builder.status();
  return builder->Build(*plan);
}

proto::ReportStageTimesRequest Report(const std::string& job_id, int64_t version,
                                      const PipelineProblem& p, int slow_stage, double slow,
                                      double others, double vocab) {
  proto::ReportStageTimesRequest r;
  r.set_job_id(job_id);
  r.set_plan_version(version);
  r.set_node_id("node0");
  const int slow_device = slow_stage >= 0 ? p.stage_device[slow_stage] : -1;
  for (int s = 0; s < p.num_stages; ++s) {
    const double f = p.stage_device[s] == slow_device ? slow : others;
    for (auto [kind, secs] : {std::pair{proto::OP_KIND_F, p.forward_s[s]},
                              std::pair{proto::OP_KIND_B, p.backward_input_s[s]},
                              std::pair{proto::OP_KIND_W, p.weight_grad_s[s]}}) {
      if (secs <= 0) continue;
      proto::StageTime* t = r.add_times();
      t->set_stage(s);
      t->set_kind(kind);
      t->set_seconds(secs * f);
      t->set_samples(8);
    }
  }
  for (int d = 0; p.vocab_parallel && d < p.num_devices; ++d) {
    for (auto [kind, secs] : {std::pair{proto::OP_KIND_S, p.vocab_s_s[d]},
                              std::pair{proto::OP_KIND_T, p.vocab_t_s[d]}}) {
      proto::StageTime* t = r.add_times();
      t->set_stage(d);
      t->set_kind(kind);
      t->set_seconds(secs * (vocab < 0 ? others : vocab));
      t->set_samples(8);
    }
  }
  return r;
}

}  // namespace octopipe::planner
