// The executor's central promise: pipeline training of the real heterogeneous reference model
// (selective scan, attention, SwiGLU MLP, top-k MoE, embedding, head) under any plan gives the
// loss and gradients of single-process training (fp32, relative error <= 1e-5): classic
// schedules, tuner-made plans and irregular plans (uneven partitions, several non-adjacent
// stages per rank, recompute), with one thread per rank over the in-process transport.
#include <algorithm>
#include <random>
#include <thread>

#include "core/cluster.h"
#include "core/cost_model.h"
#include "executor/inproc_transport.h"
#include "executor/model_spec.h"
#include "executor/reference_trainer.h"
#include "executor/testing/random_plan.h"
#include "executor/testing/reference_training.h"
#include "executor/trainer.h"
#include "gtest/gtest.h"
#include "simulator/classic_pipeline.h"
#include "simulator/list_scheduler.h"
#include "simulator/problem.h"
#include "simulator/schedules.h"
#include "tuner/tuner.h"

namespace octopipe::executor {
namespace {

ModelSpec Spec(int microbatches) {
  return ::octopipe::executor::testing::EqualityTestSpec(microbatches);
}

void ExpectMatchesSingleProcess(const ModelSpec& spec, const Plan& plan, const std::string& what) {
  // Single process.
  auto reference_layers = BuildModel(spec.pattern, spec.dims);
  ASSERT_TRUE(reference_layers.ok());
  const std::vector<MicroBatch> data = IterationData(spec, 7, 0, plan.num_microbatches);
  const ReferenceResult ref = RunReferenceIteration(*reference_layers, data);
  // Pipeline, one thread per rank.
  InProcHub hub(plan.num_devices);
  std::vector<absl::StatusOr<RankResult>> results(plan.num_devices);
  std::vector<std::thread> threads;
  TrainOptions options;
  options.iterations = 1;
  options.step_optimizer = false;
  for (int r = 0; r < plan.num_devices; ++r) {
    threads.emplace_back([&, r] {
      auto transport = hub.Endpoint(r);
      results[r] = TrainRank(spec, plan, r, transport.get(), options);
    });
  }
  for (auto& t : threads) t.join();
  double loss = -1;
  for (int r = 0; r < plan.num_devices; ++r) {
    ASSERT_TRUE(results[r].ok()) << what << " rank " << r << ": " << results[r].status();
    if (results[r]->iterations[0].has_loss) loss = results[r]->iterations[0].loss;
  }
  EXPECT_NEAR(loss, ref.loss, 1e-5 * std::abs(ref.loss)) << what;
  for (const StageAssignment& st : plan.stages) {
    for (int l = st.first_layer; l <= st.last_layer; ++l) {
      std::vector<Tensor*> g = results[st.device]->layers[l]->grads();
      ASSERT_EQ(g.size(), ref.grads_per_layer[l].size());
      for (size_t i = 0; i < g.size(); ++i) {
        const double scale = std::max(1e-12, static_cast<double>(ref.grads_per_layer[l][i].norm()));
        EXPECT_LE((*g[i] - ref.grads_per_layer[l][i]).norm() / scale, 1e-5)
            << what << ": layer " << l << " (" << spec.kinds[l] << ") grad " << i;
      }
    }
  }
}

TEST(PipelineEqualityTest, ClassicSchedulesOnTwoToFourRanks) {
  const ModelSpec spec = Spec(8);
  const ModelGraph graph = ToModelGraph(spec);
  for (ScheduleKind kind : {ScheduleKind::kGpipe, ScheduleKind::k1F1B, ScheduleKind::kInterleaved,
                            ScheduleKind::kZbH1, ScheduleKind::kZbV, ScheduleKind::kDualPipeV}) {
    for (int P : {2, 4}) {
      auto plan = ClassicPlan(kind, P, 0, 8, graph);
      ASSERT_TRUE(plan.ok()) << plan.status();
      ExpectMatchesSingleProcess(spec, *plan,
                                 std::string(ScheduleKindName(kind)) + " P=" + std::to_string(P));
    }
  }
}

TEST(PipelineEqualityTest, TunerMadePlans) {
  const ModelSpec spec = Spec(6);
  const ModelGraph graph = ToModelGraph(spec);
  for (int P : {2, 3}) {
    TunerOptions o;
    o.num_devices = P;
    o.num_microbatches = 6;
    o.time_budget_s = 5;
    auto r = Tune(graph, SyntheticCluster(P), CostModel(), o);
    ASSERT_TRUE(r.ok()) << r.status();
    ExpectMatchesSingleProcess(spec, r->plan, "tuned P=" + std::to_string(P));
  }
}

TEST(PipelineEqualityTest, IrregularPlansWithNonAdjacentStagesAndRecompute) {
  const ModelSpec spec = Spec(5);
  const int L = static_cast<int>(spec.kinds.size());  // 10
  // 5 stages on 3 ranks: rank 0 holds stages 0 and 3, rank 2 holds stages 2 and 4.
  Plan plan;
  plan.num_devices = 3;
  plan.num_microbatches = 5;
  plan.stages = {{0, 0, 0, false}, {1, 3, 1, true}, {4, 5, 2, false}, {6, 6, 0, true},
                 {7, L - 1, 2, false}};
  PipelineProblem pb = UniformProblem({0, 1, 2, 0, 2}, 3, 5, 1, 1, 1);
  pb.recompute = {0, 1, 0, 1, 0};
  WeightedPolicy policy;
  for (bool split : {true, false}) {
    ListSchedulerOptions lo;
    lo.split_backward = split;
    auto ls = ListSchedule(pb, policy, lo);
    ASSERT_TRUE(ls.ok());
    plan.schedule = ls->schedule;
    ExpectMatchesSingleProcess(spec, plan, split ? "irregular split" : "irregular unsplit");
  }
}

// 200 random valid schedules of the real model: random placements with several non-adjacent
// stages per rank, random uneven partitions, random recompute, split and unsplit backward, and
// random list-scheduling priorities (valid by construction: the list scheduler follows the
// data dependencies). None may deadlock, all must match single-process training.
TEST(PipelineEqualityTest, TwoHundredRandomValidSchedules) {
  std::mt19937 rng(2026);
  for (int trial = 0; trial < 200; ++trial) {
    const ModelSpec spec = Spec(1 + trial % 4);
    const int L = static_cast<int>(spec.kinds.size());
    const int P = 2 + trial % 3;
    const int S = P + static_cast<int>(rng() % (L - P + 1));
    const Plan plan =
        testing::RandomPlan(rng, L, P, S, spec.microbatches, /*split_backward=*/trial % 2 == 0);
    ExpectMatchesSingleProcess(spec, plan, "trial " + std::to_string(trial));
    if (HasFailure()) return;
  }
}

}  // namespace
}  // namespace octopipe::executor
