// Pins the executor constraints (tuner/constraints.h): each case first checks that the
// unconstrained tuner's plan breaks the constraint (so the test fails if the constraint were
// ignored), then that the constrained plan keeps it; plus the validation errors.
//
// A frozen clock lets each search run to convergence, so results do not depend on the
// machine's speed.
#include "tuner/tuner.h"

#include "tuner/constraints.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>

#include "core/cluster.h"
#include "core/cluster_presets.h"
#include "core/cost_model.h"
#include "core/fake_clock.h"
#include "core/model_zoo.h"
#include "core/synthetic_model.h"
#include "gtest/gtest.h"

namespace octopipe {
namespace {

TunerOptions Options(int devices, int microbatches) {
  TunerOptions o;
  o.num_devices = devices;
  o.num_microbatches = microbatches;
  o.time_budget_s = 5;
  o.threads = 1;
  o.clock = std::make_shared<FakeClock>(0);
  return o;
}

ModelGraph Synthetic(const std::string& spec) {
  absl::StatusOr<ModelGraph> m = ParseSyntheticModel(spec);
  EXPECT_TRUE(m.ok()) << m.status();
  return *m;
}

int CountOps(const Plan& plan, OpKind kind) {
  int n = 0;
  for (const auto& ops : plan.schedule.ops) {
    for (const Op& op : ops) n += op.kind == kind ? 1 : 0;
  }
  return n;
}

int MaxStagesPerDevice(const Plan& plan) {
  std::map<int, int> count;
  int most = 0;
  for (const StageAssignment& st : plan.stages) most = std::max(most, ++count[st.device]);
  return most;
}

TEST(ConstraintsTest, NoBwSplitGivesAPlanWithoutWeightGradientOps) {
  const ModelGraph m = Synthetic("layers=8,f=1,b=1,w=1");
  TunerOptions o = Options(4, 8);
  absl::StatusOr<TuneResult> free = Tune(m, SyntheticCluster(4), CostModel(), o);
  ASSERT_TRUE(free.ok()) << free.status();
  ASSERT_GT(CountOps(free->plan, OpKind::kW), 0);  // W fills bubbles when allowed
  o.constraints.allow_bw_split = false;
  absl::StatusOr<TuneResult> r = Tune(m, SyntheticCluster(4), CostModel(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(0, CountOps(r->plan, OpKind::kW));
  EXPECT_GT(CountOps(r->plan, OpKind::kBW), 0);
  EXPECT_GE(r->predicted.iteration_time_s, free->predicted.iteration_time_s);
  // The best baseline is one without W ops as well (1F1B / GPipe / interleaved).
  for (const BaselineResult& b : r->baselines) {
    if (b.name == r->best_baseline) {
      EXPECT_EQ(0, CountOps(b.plan, OpKind::kW)) << b.name;
    }
  }
}

TEST(ConstraintsTest, AtMostOneStagePerDevice) {
  // 16 unit layers on 4 devices with 4 micro-batches: interleaving shrinks the bubble, so the
  // free tuner puts several stages on a device.
  const ModelGraph m = Synthetic("layers=16,f=1,b=1,w=1");
  TunerOptions o = Options(4, 4);
  absl::StatusOr<TuneResult> free = Tune(m, SyntheticCluster(4), CostModel(), o);
  ASSERT_TRUE(free.ok()) << free.status();
  ASSERT_GT(MaxStagesPerDevice(free->plan), 1);
  o.constraints.max_stages_per_device = 1;
  absl::StatusOr<TuneResult> r = Tune(m, SyntheticCluster(4), CostModel(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(1, MaxStagesPerDevice(r->plan));
  EXPECT_TRUE(r->feasible);
}

TEST(ConstraintsTest, FixedPartitionAndFixedPlacementAreKept) {
  const ModelGraph m = Synthetic("layers=8,f=1,b=1,w=1");
  TunerOptions o = Options(2, 4);
  // A deliberately unbalanced split that no free search would choose.
  StageAssignment a, b;
  a.first_layer = 0;
  a.last_layer = 1;
  b.first_layer = 2;
  b.last_layer = 7;
  o.constraints.fixed_stages = {a, b};
  absl::StatusOr<TuneResult> r = Tune(m, SyntheticCluster(2), CostModel(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(2, r->plan.num_stages());
  EXPECT_EQ(1, r->plan.stages[0].last_layer);
  EXPECT_EQ(2, r->plan.stages[1].first_layer);
  EXPECT_NE(r->plan.stages[0].device, r->plan.stages[1].device);
  // Fixed placement: the first stage on device 1, the second on device 0.
  o.constraints.fixed_stages[0].device = 1;
  o.constraints.fixed_stages[1].device = 0;
  o.constraints.fixed_placement = true;
  r = Tune(m, SyntheticCluster(2), CostModel(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(2, r->plan.num_stages());
  EXPECT_EQ(1, r->plan.stages[0].device);
  EXPECT_EQ(0, r->plan.stages[1].device);
  EXPECT_EQ(6, r->plan.stages[1].last_layer - r->plan.stages[1].first_layer + 1);
}

TEST(ConstraintsTest, NoRecomputeWhenMemoryWouldAskForIt) {
  // Llama-3 8B on 4 GPUs of 47 GB (43 usable): weights and optimizer state take ~32 GB a device, so the
  // free tuner recomputes to keep micro-batches in flight.
  TrainingOptions t;
  absl::StatusOr<ModelGraph> m = ZooModel("llama3-8b", t);
  ASSERT_TRUE(m.ok());
  Cluster c = *ClusterPreset("h100-1node");
  for (HardwareSpec& h : c.hardware) h.memory_bytes = 47e9;
  TunerOptions o = Options(4, 16);
  o.clock = nullptr;
  o.time_budget_s = 3;
  absl::StatusOr<TuneResult> free = Tune(*m, c, CostModel(), o);
  ASSERT_TRUE(free.ok()) << free.status();
  bool any = false;
  for (const StageAssignment& st : free->plan.stages) any |= st.recompute;
  ASSERT_TRUE(any);
  o.constraints.allow_recompute = false;
  absl::StatusOr<TuneResult> r = Tune(*m, c, CostModel(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->feasible) << r->infeasible_reason;
  for (const StageAssignment& st : r->plan.stages) EXPECT_FALSE(st.recompute);
  EXPECT_EQ(0, CountOps(r->plan, OpKind::kR));
}

TEST(ConstraintsTest, RequiredRecomputeRecomputesEveryStageWhereMemoryDoesNotAskForIt) {
  // Llama-3 8B on 4 H100s (80 GB): everything fits, so the free tuner recomputes nothing (the
  // test fails if the requirement were ignored); required, every stage recomputes, each
  // micro-batch's R op is in the schedule, and the iteration is slower by the extra forwards.
  TrainingOptions t;
  absl::StatusOr<ModelGraph> m = ZooModel("llama3-8b", t);
  ASSERT_TRUE(m.ok());
  const Cluster c = *ClusterPreset("h100-1node");
  TunerOptions o = Options(4, 8);
  o.clock = nullptr;
  o.time_budget_s = 2;
  absl::StatusOr<TuneResult> free = Tune(*m, c, CostModel(), o);
  ASSERT_TRUE(free.ok()) << free.status();
  for (const StageAssignment& st : free->plan.stages) ASSERT_FALSE(st.recompute);
  ModelGraph model = *m;
  ASSERT_TRUE(ApplyRecomputeChoice("full", "recompute", &model, &o.constraints).ok());
  EXPECT_TRUE(o.constraints.require_recompute);
  absl::StatusOr<TuneResult> r = Tune(model, c, CostModel(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->feasible) << r->infeasible_reason;
  for (const StageAssignment& st : r->plan.stages) EXPECT_TRUE(st.recompute);
  EXPECT_EQ(static_cast<int>(r->plan.stages.size()) * 8, CountOps(r->plan, OpKind::kR));
  EXPECT_GT(r->predicted.iteration_time_s, free->predicted.iteration_time_s);
  EXPECT_TRUE(PlanMeetsConstraints(o.constraints, r->plan));
  EXPECT_FALSE(PlanMeetsConstraints(o.constraints, free->plan));
}

TEST(ConstraintsTest, RecomputeChoiceFollowsTheModelUnlessTheRequestSaysOtherwise) {
  auto apply = [](const std::string& choice, RecomputePolicy model_policy, bool no_recompute) {
    ModelGraph m;
    m.training.recompute = model_policy;
    ExecutorConstraints c;
    c.allow_recompute = !no_recompute;
    absl::Status s = ApplyRecomputeChoice(choice, "options.recompute", &m, &c);
    return std::tuple{s, m.training.recompute, c.allow_recompute, c.require_recompute};
  };
  using R = RecomputePolicy;
  // auto: the model's "full" is required; "selective" and "none" leave the tuner free.
  EXPECT_EQ(apply("auto", R::kFull, false), std::tuple(absl::OkStatus(), R::kFull, true, true));
  EXPECT_EQ(apply("", R::kSelective, false), std::tuple(absl::OkStatus(), R::kSelective, true, false));
  EXPECT_EQ(apply("auto", R::kNone, false), std::tuple(absl::OkStatus(), R::kNone, true, false));
  // Explicit choices override the model.
  EXPECT_EQ(apply("none", R::kFull, false), std::tuple(absl::OkStatus(), R::kNone, false, false));
  EXPECT_EQ(apply("selective", R::kFull, false),
            std::tuple(absl::OkStatus(), R::kSelective, false, false));
  EXPECT_EQ(apply("full", R::kNone, false), std::tuple(absl::OkStatus(), R::kFull, true, true));
  EXPECT_EQ(apply("full", R::kSelective, false), std::tuple(absl::OkStatus(), R::kFull, true, true));
  // Contradictions and unknown values name the field.
  for (auto [choice, policy] : {std::pair{"full", R::kNone}, std::pair{"auto", R::kFull}}) {
    absl::Status s = std::get<0>(apply(choice, policy, /*no_recompute=*/true));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << choice;
    EXPECT_NE(s.message().find("options.recompute"), std::string::npos) << s.message();
  }
  absl::Status bad = std::get<0>(apply("sometimes", R::kNone, false));
  EXPECT_NE(bad.message().find("options.recompute must be auto, none, selective or full, got "
                               "'sometimes'"),
            std::string::npos)
      << bad.message();
}

TEST(ConstraintsTest, ErrorsNameTheField) {
  const ModelGraph m = Synthetic("layers=8,f=1,b=1,w=1");
  TunerOptions o = Options(2, 4);
  StageAssignment a, b;
  a.first_layer = 0;
  a.last_layer = 2;
  b.first_layer = 4;
  b.last_layer = 7;
  o.constraints.fixed_stages = {a, b};
  absl::StatusOr<TuneResult> r = Tune(m, SyntheticCluster(2), CostModel(), o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(absl::StatusCode::kInvalidArgument, r.status().code());
  EXPECT_EQ("fixed_stages[1]: layers 4-7 do not continue the partition at layer 3",
            r.status().message());
  o.constraints.fixed_stages[1].first_layer = 3;
  o.constraints.fixed_stages[1].device = 5;
  o.constraints.fixed_placement = true;
  r = Tune(m, SyntheticCluster(2), CostModel(), o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ("fixed_stages[1].device: 5 is outside [0, 2)", r.status().message());
  o.constraints = ExecutorConstraints{};
  o.constraints.max_stages_per_device = -1;
  r = Tune(m, SyntheticCluster(2), CostModel(), o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ("max_stages_per_device must be >= 0 (0: no limit), got -1", r.status().message());
}

}  // namespace
}  // namespace octopipe
