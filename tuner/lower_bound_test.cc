// Pins the lower bound's closed forms on uniform and head-heavy chains, that it is tight where
// the schedule is forced (one micro-batch), and that it is a bound: no plan the tuner or a
// baseline produces is predicted faster, on heterogeneous zoo models and synthetic chains.
#include "tuner/lower_bound.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cluster.h"
#include "core/cluster_presets.h"
#include "core/cost_model.h"
#include "core/fake_clock.h"
#include "core/model_zoo.h"
#include "core/synthetic_model.h"
#include "gtest/gtest.h"
#include "simulator/evaluator.h"
#include "simulator/justify.h"
#include "simulator/list_scheduler.h"
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

TEST(LowerBoundTest, UniformChainIsBoundByItsFill) {
  // 8 layers of F = B = W = 1 on 4 devices, 8 micro-batches: work 24 * 8 / 4 = 48; chain
  // 8 + 8 + 1 = 17; layer 7: 7 + 8 * 3 = 31. Assignment: every device holds two layers (else
  // one holds three: 8 * 9 = 72), and the device whose lowest layer is highest has it at layer
  // >= 3, so it starts at >= 3 and ends at >= 3 + 8 * 6 = 51.
  LowerBound lb = PipelineLowerBound(Chain(std::vector<double>(8, 1.0)), 4, 8, false);
  EXPECT_DOUBLE_EQ(lb.work_s, 48);
  EXPECT_DOUBLE_EQ(lb.chain_s, 17);
  EXPECT_DOUBLE_EQ(lb.layer_s, 31);
  EXPECT_EQ(lb.heaviest_layer, 7);
  EXPECT_NEAR(lb.assignment_s, 51, 1e-3);
  EXPECT_NEAR(lb.seconds, 51, 1e-3);
  EXPECT_EQ(lb.binding, "assignment");
  // Steady state: no starts, so the work bound (each device exactly two layers).
  LowerBound steady = PipelineLowerBound(Chain(std::vector<double>(8, 1.0)), 4, 8, true);
  EXPECT_NEAR(steady.seconds, 48, 1e-3);
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

TEST(LowerBoundTest, AssignmentBoundHandCases) {
  // Five equal items on two bins: one bin holds three of them.
  EXPECT_NEAR(MinMaxAssignmentBound({4, 4, 4, 4, 4}, 2), 12, 1e-3);
  // Ten unit items and a 2.5 on four bins (total 12.5, mean 3.125): the 2.5 alone leaves ten
  // units on three bins (4); with one unit beside it, 3.5, which the other three bins (three
  // units each) match. With two beside it, 4.5.
  std::vector<double> head(10, 1.0);
  head.push_back(2.5);
  EXPECT_NEAR(MinMaxAssignmentBound(head, 4), 3.5, 1e-3);
  // Exactly balanced: the mean is the optimum.
  EXPECT_NEAR(MinMaxAssignmentBound({3, 3, 2, 2, 2}, 2), 6, 1e-3);
  // No more items than bins: the largest item.
  EXPECT_DOUBLE_EQ(MinMaxAssignmentBound({1, 7, 2}, 3), 7);
  EXPECT_DOUBLE_EQ(MinMaxAssignmentBound({}, 3), 0);
  EXPECT_DOUBLE_EQ(MinMaxAssignmentBound({1, 2}, 0), 0);
}

TEST(LowerBoundTest, HeadThatDoesNotDivideIsAssignmentBound) {
  // Ten layers of F = B = W = 1 (work 3 each) and a head of F = B = W = 2.5 (7.5) on 4 devices,
  // 8 micro-batches. Per micro-batch the least largest device load is 7.5 + 3 = 10.5 (see the
  // hand case above, scaled by 3), so 8 x 10.5 = 84 beats work (37.5 x 8 / 4 = 75), the head's
  // layer term (10 + 8 x 7.5 = 70; 10 + 8 x 5 + 10 = 60) and the chain (12.5 + 12.5 + 1).
  std::vector<double> t(10, 1.0);
  t.push_back(2.5);
  LowerBound lb = PipelineLowerBound(Chain(t), 4, 8, false);
  EXPECT_DOUBLE_EQ(lb.work_s, 75);
  EXPECT_DOUBLE_EQ(lb.layer_s, 70);
  EXPECT_DOUBLE_EQ(lb.chain_s, 26);
  EXPECT_NEAR(lb.assignment_s, 84, 2e-3);
  EXPECT_EQ(lb.binding, "assignment");
  EXPECT_NEAR(lb.seconds, 84, 2e-3);
  // The same holds for the steady state (each device still runs its whole share).
  LowerBound steady = PipelineLowerBound(Chain(t), 4, 8, true);
  EXPECT_EQ(steady.binding, "assignment");
  EXPECT_NEAR(steady.seconds, 84, 2e-3);
}

// min over all bins^n assignments of the largest bin sum.
double BruteForceMinMax(const std::vector<double>& items, int bins) {
  const int n = static_cast<int>(items.size());
  int64_t total = 1;
  for (int i = 0; i < n; ++i) total *= bins;
  double best = 1e300;
  for (int64_t code = 0; code < total; ++code) {
    std::vector<double> load(bins, 0.0);
    int64_t c = code;
    for (int i = 0; i < n; ++i, c /= bins) load[c % bins] += items[i];
    best = std::min(best, *std::max_element(load.begin(), load.end()));
  }
  return best;
}

TEST(LowerBoundTest, AssignmentBoundNeverExceedsTheOptimumAndIsExactOnFewValues) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> count(1, 8), bins(1, 3), small(1, 5);
  std::uniform_real_distribution<double> real(0.1, 3.0);
  for (int trial = 0; trial < 300; ++trial) {
    SCOPED_TRACE(trial);
    const int n = count(rng), P = bins(rng);
    std::vector<double> items(n), ints(n);
    for (int i = 0; i < n; ++i) {
      items[i] = real(rng);
      ints[i] = small(rng);
    }
    const double exact = BruteForceMinMax(items, P);
    // Any state budget, however coarse the rounding, stays below the optimum.
    for (int64_t states : {2, 8, 64, 1 << 15}) {
      EXPECT_LE(MinMaxAssignmentBound(items, P, states), exact * (1 + 1e-12)) << states;
    }
    // Few distinct values and room for every class: exact up to the search's tolerance.
    const double exact_ints = BruteForceMinMax(ints, P);
    const double b = MinMaxAssignmentBound(ints, P);
    EXPECT_LE(b, exact_ints * (1 + 1e-12));
    EXPECT_GE(b, exact_ints * (1 - 2e-5));
  }
}

// min over all bins^n assignments of max over non-empty bins of S(lowest layer) + mult x load,
// S(l) = sum_{j<l} forward[j]: the pipeline assignment problem itself.
double BruteForcePipelineAssignment(const std::vector<double>& work,
                                    const std::vector<double>& forward, int bins, double mult) {
  const int n = static_cast<int>(work.size());
  std::vector<double> s(n + 1, 0.0);
  for (int l = 0; l < n; ++l) s[l + 1] = s[l] + forward[l];
  int64_t total = 1;
  for (int i = 0; i < n; ++i) total *= bins;
  double best = 1e300;
  for (int64_t code = 0; code < total; ++code) {
    std::vector<double> load(bins, 0.0);
    std::vector<int> lowest(bins, -1);
    int64_t c = code;
    for (int i = 0; i < n; ++i, c /= bins) {
      const int b = static_cast<int>(c % bins);
      load[b] += work[i];
      if (lowest[b] < 0) lowest[b] = i;
    }
    double t = 0;
    for (int b = 0; b < bins; ++b) {
      if (lowest[b] >= 0) t = std::max(t, s[lowest[b]] + mult * load[b]);
    }
    best = std::min(best, t);
  }
  return best;
}

TEST(LowerBoundTest, PipelineAssignmentBoundPlacesTheFirstLayers) {
  // Layers 0, 1, 2 of work 1, 1, 10 and forward 0.1, 5, 1 on 2 devices, M = 1. The relaxation
  // lets the second device start at S(1) = 0.1 holding only layer 2 (0.1 + 10); but a device
  // without layer 1 starts at S(2) = 5.1. So either layer 2 shares layer 0's device (11), or
  // its device also holds layer 1 (0.1 + 11 = 11.1), or it starts at 5.1 (15.1): 11.
  const std::vector<double> work = {1, 1, 10}, forward = {0.1, 5, 1};
  EXPECT_NEAR(StaggeredAssignmentBound(work, {0, 0.1}, 1.0), 10, 1e-3);
  EXPECT_NEAR(BruteForcePipelineAssignment(work, forward, 2, 1.0), 11, 1e-12);
  EXPECT_NEAR(PipelineAssignmentBound(work, forward, 2, 1.0, 3), 11, 1e-3);
  // Placing layer 0 alone sees part of it: layer 2 beside it (11), or on the other device,
  // whose lowest layer is 1 or above (0.1 + 10). With no layer placed: the relaxation.
  EXPECT_NEAR(PipelineAssignmentBound(work, forward, 2, 1.0, 1), 10.1, 1e-3);
  EXPECT_NEAR(PipelineAssignmentBound(work, forward, 2, 1.0, 0), 10, 1e-3);
  // Degenerate inputs.
  EXPECT_DOUBLE_EQ(PipelineAssignmentBound({}, {}, 2, 1.0, 3), 0);
  EXPECT_DOUBLE_EQ(PipelineAssignmentBound(work, forward, 0, 1.0, 3), 0);
  EXPECT_DOUBLE_EQ(PipelineAssignmentBound(work, {1, 2}, 2, 1.0, 3), 0);
}

TEST(LowerBoundTest, PipelineAssignmentBoundNeverExceedsTheOptimumAndIsExactWithAllPlaced) {
  std::mt19937_64 rng(13);
  std::uniform_int_distribution<int> count(1, 7), bins(1, 3), mult(1, 8);
  std::uniform_real_distribution<double> real(0.1, 3.0), fwd(0.0, 1.0);
  for (int trial = 0; trial < 300; ++trial) {
    SCOPED_TRACE(trial);
    const int n = count(rng), P = bins(rng);
    const double m = mult(rng);
    std::vector<double> work(n), forward(n);
    for (int i = 0; i < n; ++i) {
      work[i] = real(rng);
      forward[i] = fwd(rng) * work[i];
    }
    const double exact = BruteForcePipelineAssignment(work, forward, P, m);
    // Any prefix and any rounding stay below the optimum.
    for (int prefix : {0, 1, 2, 4, 7}) {
      for (int64_t states : {2, 16, 1 << 11}) {
        EXPECT_LE(PipelineAssignmentBound(work, forward, P, m, prefix, states),
                  exact * (1 + 1e-12))
            << prefix << " " << states;
      }
    }
    // Every layer placed exactly: the optimum, up to the search's tolerance.
    EXPECT_GE(PipelineAssignmentBound(work, forward, P, m, n), exact * (1 - 2e-5));
    // Never below the relaxation's closed forms.
    EXPECT_GE(PipelineAssignmentBound(work, forward, P, m, n),
              m * *std::max_element(work.begin(), work.end()) * (1 - 1e-12));
  }
}

// On the measured gpt-oss-20B profile's shape (24 layers, the first and the last heavy) the
// prefix placement tightens the pipeline bound, and PipelineLowerBound takes it by default.
TEST(LowerBoundTest, PrefixTightensTheBoundOnHeavyLayers) {
  std::vector<LayerCost> layers;
  for (int l = 0; l < 24; ++l) {
    LayerCost c;
    c.forward_s = (l == 0 || l == 23) ? 0.03 : (l % 2 == 0 ? 0.027 : 0.022);
    c.backward_input_s = c.weight_grad_s = (l % 2 == 0 ? 0.02 : 0.017);
    layers.push_back(c);
  }
  LowerBoundOptions relaxed;
  relaxed.prefix_layers = 0;
  const LowerBound plain = PipelineLowerBound(layers, 8, 32, false, relaxed);
  const LowerBound placed = PipelineLowerBound(layers, 8, 32, false);
  EXPECT_GT(placed.assignment_s, plain.assignment_s * 1.001);
  EXPECT_GE(placed.seconds, plain.seconds);
  // The steady state has no starts: both the same.
  EXPECT_DOUBLE_EQ(PipelineLowerBound(layers, 8, 32, true).seconds,
                   PipelineLowerBound(layers, 8, 32, true, relaxed).seconds);
}

TEST(LowerBoundTest, DegenerateInputsGiveZero) {
  EXPECT_DOUBLE_EQ(PipelineLowerBound({}, 4, 8, false).seconds, 0);
  EXPECT_DOUBLE_EQ(PipelineLowerBound(Chain({1}), 0, 8, false).seconds, 0);
  EXPECT_DOUBLE_EQ(LowerBoundGap(5, LowerBound{}), 0);
}

// A clock that advances `step_s` per reading: bounded search whatever the machine's speed.
std::shared_ptr<const Clock> SteppingClock(double step_s) {
  return std::make_shared<ReadCountingClock>(step_s);
}

double BaselineObjectiveForTest(const BaselineResult& b, bool steady) {
  return steady ? b.result.steady_state_iteration_time_s : b.result.iteration_time_s;
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
      // The bound above is for whole layers; a split head has its own bound (vocab_choice_test).
      o.vocab_parallel = VocabParallelMode::kOff;
      absl::StatusOr<TuneResult> r = Tune(*model, *cluster, cost, o);
      ASSERT_TRUE(r.ok()) << r.status();
      const double tol = 1e-9 * lb.seconds;
      const double tuned = steady ? r->predicted.steady_state_iteration_time_s
                                  : r->predicted.iteration_time_s;
      EXPECT_GE(tuned + tol, lb.seconds) << "tuned plan below the bound (" << lb.binding << ")";
      if (!steady) {  // the split's own bound holds for the tuned plan's schedule
        PipelineProblem pb;
        builder->BuildInto(r->plan.stages, c.microbatches, &pb);
        const double split_bound = SplitScheduleLowerBound(pb);
        EXPECT_GT(split_bound, 0);
        EXPECT_GE(tuned * (1 + 1e-9), split_bound) << "tuned plan below its split's bound";
      }
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

// Random small chains (unequal F, B, W per layer) searched exhaustively by the tuner (every
// partition and placement with each seed policy) on free links without a memory cap: no
// evaluated plan, hence not the best one, and no baseline is faster than the bound.
TEST(LowerBoundTest, RandomSmallProblemsNeverBeatTheBound) {
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int> layers(2, 6), devices(1, 3), microbatches(1, 6);
  std::uniform_real_distribution<double> cost(0.2, 3.0);
  const CostModel cost_model;
  for (int trial = 0; trial < 12; ++trial) {
    SCOPED_TRACE(trial);
    const int L = layers(rng), P = std::min(L, devices(rng)), M = microbatches(rng);
    absl::StatusOr<ModelGraph> model =
        ParseSyntheticModel(absl::StrCat("layers=", L, ",f=1,b=1,w=1"));
    ASSERT_TRUE(model.ok()) << model.status();
    for (Layer& l : model->layers) {
      l.measured.forward_s = cost(rng);
      l.measured.backward_input_s = cost(rng);
      l.measured.weight_grad_s = cost(rng);
    }
    const Cluster cluster = SyntheticCluster(P);
    absl::StatusOr<ProblemBuilder> builder =
        ProblemBuilder::Create(*model, cluster, cost_model, P);
    ASSERT_TRUE(builder.ok()) << builder.status();
    for (bool steady : {false, true}) {
      const LowerBound lb = PipelineLowerBound(FastestLayerCosts(*builder), P, M, steady);
      TunerOptions o;
      o.num_devices = P;
      o.num_microbatches = M;
      o.objective = steady ? Objective::kSteadyState : Objective::kSynchronous;
      o.time_budget_s = 1e9;  // the exhaustive search runs to the end
      o.clock = SteppingClock(1e-3);
      absl::StatusOr<TuneResult> r = Tune(*model, cluster, cost_model, o);
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_FALSE(r->budget_exhausted);
      const double tol = 1e-9 * lb.seconds;
      EXPECT_GE((steady ? r->predicted.steady_state_iteration_time_s
                        : r->predicted.iteration_time_s) + tol,
                lb.seconds)
          << "L=" << L << " P=" << P << " M=" << M << " bound " << lb.binding;
      for (const BaselineResult& b : r->baselines) {
        if (!b.ran) continue;
        EXPECT_GE(BaselineObjectiveForTest(b, steady) + tol, lb.seconds) << b.name;
      }
    }
  }
}

// A priority drawn at random per op (a hash of the op and a seed): random non-delay list
// schedules of one split.
struct RandomPolicy : SchedulePolicy {
  uint64_t seed = 0;
  double Priority(const PipelineProblem&, const Op& op, double, const DeviceState&) const override {
    uint64_t h = seed ^ (static_cast<uint64_t>(op.kind) * 0x9E3779B97F4A7C15ULL) ^
                 (static_cast<uint64_t>(op.stage) << 20) ^ static_cast<uint64_t>(op.microbatch);
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return static_cast<double>(h % 1000003);
  }
};

// Hand case: stage 0 (device 0) F = 2, B = W = 0.01; stage 1 (device 1) F = 0.5,
// B = W = 0.25; 3 micro-batches. Device 1 receives a micro-batch every 2 s: its forwards start
// no earlier than 2, 4, 6, so its last W ends no earlier than 6 + 0.5 + 0.25 + 0.25 = 7 (and a
// schedule reaches 7). The staggered form max_d(start_d + M x load_d) is max(3 x 2.02,
// 2 + 3 x 1) = 6.06, and the whole-model bound is no larger (the layers are the stages).
TEST(LowerBoundTest, SplitBoundSeesTheFillRateHandCase) {
  PipelineProblem pb = UniformProblem({0, 1}, 2, 3, 0, 0, 0);
  pb.forward_s = {2, 0.5};
  pb.backward_input_s = {0.01, 0.25};
  pb.weight_grad_s = {0.01, 0.25};
  pb.recompute_s = pb.forward_s;
  EXPECT_NEAR(SplitScheduleLowerBound(pb), 7.0, 1e-12);
  std::vector<LayerCost> layers(2);
  layers[0].forward_s = 2;
  layers[0].backward_input_s = layers[0].weight_grad_s = 0.01;
  layers[1].forward_s = 0.5;
  layers[1].backward_input_s = layers[1].weight_grad_s = 0.25;
  EXPECT_LE(PipelineLowerBound(layers, 2, 3, false).seconds, 6.06 + 1e-9);
  // Tight: forwards first (device 0 runs its three, then its backward work) reaches it.
  WeightedPolicy forwards_first;
  forwards_first.kind_weight = {3.0, 2.0, 1.0, 2.0, 2.0};
  absl::StatusOr<ListScheduleResult> ls = ListSchedule(pb, forwards_first, {});
  ASSERT_TRUE(ls.ok()) << ls.status();
  EXPECT_NEAR(ls->iteration_time_s, 7.0, 1e-9);
}

// Random small splits (stages on devices at random, several stages per device, unequal costs,
// op overheads, recompute, link latencies): no schedule — random-priority list schedules with
// B/W split and unsplit, their justified orders, and the default policy's — is faster than
// the split's bound.
TEST(LowerBoundTest, RandomSchedulesNeverBeatTheSplitBound) {
  std::mt19937_64 rng(23);
  std::uniform_int_distribution<int> stages(1, 6), devices(1, 3), microbatches(1, 5);
  std::uniform_real_distribution<double> cost(0.2, 3.0), unit(0.0, 1.0);
  Evaluator evaluator;
  int tight = 0;
  for (int trial = 0; trial < 60; ++trial) {
    SCOPED_TRACE(trial);
    const int S = stages(rng), P = std::min(S, devices(rng)), M = microbatches(rng);
    std::vector<int> placement(S);
    for (int s = 0; s < S; ++s) placement[s] = s < P ? s : static_cast<int>(rng() % P);
    std::shuffle(placement.begin(), placement.end(), rng);
    PipelineProblem pb = UniformProblem(placement, P, M, 1, 1, 1);
    const double overhead = unit(rng) < 0.5 ? 0.0 : 0.1;
    pb.op_overhead_s.assign(S, overhead);
    for (int s = 0; s < S; ++s) {
      pb.forward_s[s] = cost(rng) + overhead;
      pb.backward_input_s[s] = cost(rng) + overhead;
      pb.weight_grad_s[s] = cost(rng) + overhead;
      pb.recompute_s[s] = pb.forward_s[s];
      pb.recompute[s] = unit(rng) < 0.2;
    }
    for (double& l : pb.link_latency_s) l = unit(rng) < 0.5 ? 0.0 : 0.05;
    const double bound = SplitScheduleLowerBound(pb);
    ASSERT_GT(bound, 0);
    double best = std::numeric_limits<double>::infinity();
    for (int k = 0; k < 40; ++k) {
      RandomPolicy random;
      random.seed = rng();
      WeightedPolicy weighted;
      const SchedulePolicy& policy = k == 0 ? static_cast<const SchedulePolicy&>(weighted) : random;
      ListSchedulerOptions o;
      o.split_backward = k % 2 == 0;
      absl::StatusOr<ListScheduleResult> ls = ListSchedule(pb, policy, o);
      ASSERT_TRUE(ls.ok()) << ls.status();
      absl::StatusOr<SimResult> sim = evaluator.Evaluate(pb, ls->schedule, {});
      ASSERT_TRUE(sim.ok()) << sim.status();
      EXPECT_GE(sim->iteration_time_s * (1 + 1e-9), bound) << "S=" << S << " P=" << P << " M=" << M;
      best = std::min(best, sim->iteration_time_s);
      absl::StatusOr<JustifyResult> j = JustifySchedule(pb, ls->schedule);
      ASSERT_TRUE(j.ok()) << j.status();
      absl::StatusOr<SimResult> js = evaluator.Evaluate(pb, j->schedule, {});
      ASSERT_TRUE(js.ok()) << js.status();
      EXPECT_GE(js->iteration_time_s * (1 + 1e-9), bound) << "justified, S=" << S;
      best = std::min(best, js->iteration_time_s);
    }
    if (best <= bound * (1 + 1e-9)) ++tight;
  }
  // Not vacuous: on some of them the bound is reached.
  EXPECT_GT(tight, 0);
}

}  // namespace
}  // namespace octopipe
