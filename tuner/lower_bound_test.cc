// Pins the lower bound's closed forms on uniform and head-heavy chains, that it is tight where
// the schedule is forced (one micro-batch), and that it is a bound: no plan the tuner or a
// baseline produces is predicted faster, on heterogeneous zoo models and synthetic chains.
#include "tuner/lower_bound.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "core/cluster_presets.h"
#include "core/cost_model.h"
#include "core/fake_clock.h"
#include "core/model_zoo.h"
#include "core/synthetic_model.h"
#include "gtest/gtest.h"
#include "simulator/problem_builder.h"
#include "tuner/tuner.h"

namespace octopipe {
namespace {

std::vector<LayerCost> Chain(const std::vector<double>& fbw) {
  std::vector<LayerCost> layers;
  for (double t : fbw) {
    LayerCost c;
    c.forward_s = c.backward_input_s = c.weight_grad_s = t;
    layers.push_back(c);
  }
  return layers;
}

TEST(LowerBoundTest, UniformChainIsWorkBound) {
  // 8 layers of F = B = W = 1 on 4 devices, 8 micro-batches: work 24 * 8 / 4 = 48; chain
  // 8 + 8 + 1 = 17; layer 7: 7 + 8 * 3 = 31.
  LowerBound lb = PipelineLowerBound(Chain(std::vector<double>(8, 1.0)), 4, 8, false);
  EXPECT_DOUBLE_EQ(lb.work_s, 48);
  EXPECT_DOUBLE_EQ(lb.chain_s, 17);
  EXPECT_DOUBLE_EQ(lb.layer_s, 31);
  EXPECT_EQ(lb.heaviest_layer, 7);
  EXPECT_DOUBLE_EQ(lb.seconds, 48);
  EXPECT_EQ(lb.binding, "work");
}

TEST(LowerBoundTest, HeavyHeadIsLayerBound) {
  // Three cheap layers and a head 10x as heavy, 4 devices, 4 micro-batches: the head's device
  // alone runs 4 * 30 = 120 s after the first forward (3 s) reached it.
  LowerBound lb = PipelineLowerBound(Chain({1, 1, 1, 10}), 4, 4, false);
  EXPECT_DOUBLE_EQ(lb.work_s, 39);
  EXPECT_DOUBLE_EQ(lb.layer_s, 123);
  EXPECT_EQ(lb.heaviest_layer, 3);
  EXPECT_EQ(lb.binding, "layer");
  EXPECT_DOUBLE_EQ(lb.seconds, 123);
  // Steady state: no arrival term.
  LowerBound steady = PipelineLowerBound(Chain({1, 1, 1, 10}), 4, 4, true);
  EXPECT_DOUBLE_EQ(steady.layer_s, 120);
  EXPECT_DOUBLE_EQ(steady.chain_s, 0);
  EXPECT_DOUBLE_EQ(steady.seconds, 120);
}

TEST(LowerBoundTest, OneMicrobatchIsChainBoundAndTight) {
  // M = 1: F through 4 layers, B back, then W of layer 0: 4 + 4 + 1 = 9, which one stage per
  // device with W after B achieves exactly.
  LowerBound lb = PipelineLowerBound(Chain({1, 1, 1, 1}), 4, 1, false);
  EXPECT_DOUBLE_EQ(lb.chain_s, 9);
  EXPECT_EQ(lb.binding, "chain");
  EXPECT_DOUBLE_EQ(lb.seconds, 9);
  EXPECT_DOUBLE_EQ(LowerBoundGap(9, lb), 0);
  EXPECT_DOUBLE_EQ(LowerBoundGap(12, lb), 0.25);
}

TEST(LowerBoundTest, DegenerateInputsGiveZero) {
  EXPECT_DOUBLE_EQ(PipelineLowerBound({}, 4, 8, false).seconds, 0);
  EXPECT_DOUBLE_EQ(PipelineLowerBound(Chain({1}), 0, 8, false).seconds, 0);
  EXPECT_DOUBLE_EQ(LowerBoundGap(5, LowerBound{}), 0);
}

// A clock that advances `step_s` per reading: bounded search whatever the machine's speed.
std::shared_ptr<const Clock> SteppingClock(double step_s) {
  return std::make_shared<FakeClock>(0, step_s);
}

struct Case {
  std::string model;  // zoo name or synthetic spec
  std::string cluster;
  int devices;
  int microbatches;
};

TEST(LowerBoundTest, NoTunedPlanOrBaselineBeatsTheBound) {
  const std::vector<Case> cases = {
      {"nemotron-h-8b", "h100-1node", 8, 16},
      {"llama3-8b", "h100-1node", 4, 8},
      {"qwen2-vl-7b", "h100-1node", 8, 8},
      {"synthetic:layers=12,f=1,b=2,w=1", "", 4, 8},
      {"synthetic:layers=6,f=1,b=1,w=1", "", 3, 2},
  };
  const CostModel cost;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.model);
    absl::StatusOr<ModelGraph> model =
        c.model.rfind("synthetic:", 0) == 0 ? ParseSyntheticModel(c.model.substr(10))
                                            : ZooModel(c.model, TrainingOptions{});
    ASSERT_TRUE(model.ok()) << model.status();
    absl::StatusOr<Cluster> cluster =
        c.cluster.empty() ? absl::StatusOr<Cluster>(SyntheticCluster(c.devices))
                          : ClusterPreset(c.cluster);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    absl::StatusOr<ProblemBuilder> builder =
        ProblemBuilder::Create(*model, *cluster, cost, c.devices);
    ASSERT_TRUE(builder.ok()) << builder.status();
    for (bool steady : {false, true}) {
      const LowerBound lb =
          PipelineLowerBound(FastestLayerCosts(*builder), c.devices, c.microbatches, steady);
      ASSERT_GT(lb.seconds, 0);
      TunerOptions o;
      o.num_devices = c.devices;
      o.num_microbatches = c.microbatches;
      o.objective = steady ? Objective::kSteadyState : Objective::kSynchronous;
      o.time_budget_s = 2;
      o.clock = SteppingClock(1e-3);
      absl::StatusOr<TuneResult> r = Tune(*model, *cluster, cost, o);
      ASSERT_TRUE(r.ok()) << r.status();
      const double tol = 1e-9 * lb.seconds;
      const double tuned = steady ? r->predicted.steady_state_iteration_time_s
                                  : r->predicted.iteration_time_s;
      EXPECT_GE(tuned + tol, lb.seconds) << "tuned plan below the bound (" << lb.binding << ")";
      int checked = 0;
      for (const BaselineResult& b : r->baselines) {
        if (!b.ran) continue;
        const double t = steady ? b.result.steady_state_iteration_time_s
                                : b.result.iteration_time_s;
        EXPECT_GE(t + tol, lb.seconds) << b.name << " below the bound (" << lb.binding << ")";
        ++checked;
      }
      EXPECT_GE(checked, 3);
    }
  }
}

}  // namespace
}  // namespace octopipe
