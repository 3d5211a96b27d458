// Pins the baseline set the tuner is judged against: all nine schedules reported by name in a
// fixed order, a baseline that cannot run carries its reason, one that runs over memory is kept
// with fits = false, 1F1B-balanced uses the exact min-max partition, the figures are the
// simulator's (1F1B's closed form on unit costs), and BestFittingBaseline picks the fastest
// fitting one under either objective.
#include "tuner/baselines.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "core/cluster_presets.h"
#include "core/cost_model.h"
#include "core/model_zoo.h"
#include "core/synthetic_model.h"
#include "gtest/gtest.h"
#include "simulator/problem_builder.h"
#include "simulator/schedules.h"
#include "tuner/partition.h"

namespace octopipe {
namespace {

const std::vector<std::string> kNames = {"gpipe",          "1f1b",  "1f1b-balanced",
                                         "interleaved-v2", "interleaved-v4", "zb-h1",
                                         "zb-h2",          "zb-v",  "dualpipev"};

const BaselineResult& Named(const std::vector<BaselineResult>& all, const std::string& name) {
  for (const BaselineResult& b : all) {
    if (b.name == name) return b;
  }
  ADD_FAILURE() << "no baseline named " << name;
  static const BaselineResult kNone;
  return kNone;
}

struct Inputs {
  ModelGraph model;
  Cluster cluster;
  CostModel cost;
};

std::vector<BaselineResult> RunAll(const Inputs& s, int P, int M) {
  absl::StatusOr<ProblemBuilder> b = ProblemBuilder::Create(s.model, s.cluster, s.cost, P);
  EXPECT_TRUE(b.ok()) << b.status();
  if (!b.ok()) return {};
  return RunBaselines(s.model, *b, M, /*link_contention=*/false);
}

Inputs Llama8b() {
  absl::StatusOr<ModelGraph> m = ZooModel("llama3-8b", TrainingOptions{});
  absl::StatusOr<Cluster> c = ClusterPreset("h100-1node");
  EXPECT_TRUE(m.ok() && c.ok());
  return Inputs{*m, *c, CostModel()};
}

Inputs Synthetic(int layers, int devices) {
  absl::StatusOr<ModelGraph> m =
      ParseSyntheticModel("layers=" + std::to_string(layers) + ",f=1,b=1,w=1");
  EXPECT_TRUE(m.ok()) << m.status();
  return Inputs{*m, SyntheticCluster(devices), CostModel()};
}

// The iteration spans at least the busiest device's work, and some device has work.
void ExpectSpansTheBusiestDevice(const BaselineResult& b) {
  double busiest = 0;
  for (const DeviceResult& d : b.result.devices) busiest = std::max(busiest, d.busy_s);
  EXPECT_GT(busiest, 0) << b.name;
  EXPECT_GE(b.result.iteration_time_s, busiest * (1 - 1e-12)) << b.name;
}

TEST(BaselinesTest, AllNineRunOnARealModelInAFixedOrder) {
  const std::vector<BaselineResult> all = RunAll(Llama8b(), 4, 16);
  ASSERT_EQ(all.size(), kNames.size());
  for (size_t i = 0; i < kNames.size(); ++i) {
    EXPECT_EQ(all[i].name, kNames[i]);
    EXPECT_TRUE(all[i].ran) << all[i].name << ": " << all[i].error;
    EXPECT_TRUE(all[i].error.empty()) << all[i].name;
    ExpectSpansTheBusiestDevice(all[i]);
    EXPECT_EQ(all[i].plan.num_devices, 4) << all[i].name;
    EXPECT_EQ(all[i].plan.num_microbatches, 16) << all[i].name;
    EXPECT_EQ(all[i].plan.schedule_name, kNames[i]);
    EXPECT_EQ(all[i].result.devices.size(), 4u) << all[i].name;
  }
  // The chunk counts are the schedules' own.
  EXPECT_EQ(Named(all, "1f1b").plan.num_stages(), 4);
  EXPECT_EQ(Named(all, "interleaved-v2").plan.num_stages(), 8);
  EXPECT_EQ(Named(all, "interleaved-v4").plan.num_stages(), 16);
  EXPECT_EQ(Named(all, "zb-v").plan.num_stages(), 8);
  EXPECT_EQ(Named(all, "dualpipev").plan.num_stages(), 8);
}

TEST(BaselinesTest, DualPipeVWithFewerThanTwoMicrobatchesPerDeviceCarriesItsReason) {
  const std::vector<BaselineResult> all = RunAll(Synthetic(16, 4), 4, 4);  // M = 4 < 2P = 8
  ASSERT_EQ(all.size(), kNames.size());
  const BaselineResult& d = Named(all, "dualpipev");
  EXPECT_FALSE(d.ran);
  EXPECT_FALSE(d.fits);
  EXPECT_NE(d.error.find("microbatches"), std::string::npos) << d.error;
  EXPECT_NE(d.error.find("dualpipev"), std::string::npos) << d.error;
  // Everything else still runs.
  for (const BaselineResult& b : all) {
    if (b.name != "dualpipev") {
      EXPECT_TRUE(b.ran) << b.name << ": " << b.error;
    }
  }
}

TEST(BaselinesTest, InterleavedV4WithTooFewLayersCarriesItsReason) {
  // 12 layers on 4 devices: V = 2 (8 stages) runs, V = 4 (16 stages) cannot.
  const std::vector<BaselineResult> all = RunAll(Synthetic(12, 4), 4, 8);
  ASSERT_EQ(all.size(), kNames.size());
  const BaselineResult& v4 = Named(all, "interleaved-v4");
  EXPECT_FALSE(v4.ran);
  EXPECT_NE(v4.error.find("16 stages"), std::string::npos) << v4.error;
  EXPECT_NE(v4.error.find("12 layers"), std::string::npos) << v4.error;
  EXPECT_TRUE(Named(all, "interleaved-v2").ran) << Named(all, "interleaved-v2").error;
  EXPECT_TRUE(Named(all, "zb-v").ran) << Named(all, "zb-v").error;
}

TEST(BaselinesTest, OverMemoryBaselinesAreReportedNotDropped) {
  // GPipe holds all 16 micro-batches' activations: over an H100's memory, but still reported.
  const std::vector<BaselineResult> all = RunAll(Llama8b(), 4, 16);
  const BaselineResult& gpipe = Named(all, "gpipe");
  EXPECT_TRUE(gpipe.ran);
  EXPECT_FALSE(gpipe.fits);
  EXPECT_FALSE(gpipe.result.fits_memory);
  EXPECT_TRUE(Named(all, "1f1b").fits);

  // 10 GB devices: nothing fits, every baseline is still there with its figures.
  Inputs tiny = Llama8b();
  tiny.cluster.hardware[0].memory_bytes = 10e9;
  const std::vector<BaselineResult> none = RunAll(tiny, 4, 16);
  ASSERT_EQ(none.size(), kNames.size());
  for (const BaselineResult& b : none) {
    EXPECT_TRUE(b.ran) << b.name << ": " << b.error;
    EXPECT_FALSE(b.fits) << b.name;
    ExpectSpansTheBusiestDevice(b);
    bool some_device_over = false;
    for (const DeviceResult& d : b.result.devices) {
      some_device_over |= d.peak_memory_bytes > tiny.cluster.usable_memory(0);
    }
    EXPECT_TRUE(some_device_over) << b.name;
  }
  EXPECT_EQ(BestFittingBaseline(none, false), nullptr);
  EXPECT_EQ(BestFittingBaseline(none, true), nullptr);
}

TEST(BaselinesTest, BalancedOneFOneBUsesTheMinMaxPartition) {
  const Inputs s = Llama8b();
  absl::StatusOr<ProblemBuilder> b = ProblemBuilder::Create(s.model, s.cluster, s.cost, 4);
  ASSERT_TRUE(b.ok());
  const std::vector<BaselineResult> all = RunBaselines(s.model, *b, 16, false);
  absl::StatusOr<std::vector<StageAssignment>> want = MinMaxPartition(*b, {0, 1, 2, 3});
  ASSERT_TRUE(want.ok());
  const Plan& balanced = Named(all, "1f1b-balanced").plan;
  ASSERT_EQ(balanced.num_stages(), 4);
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(balanced.stages[s].first_layer, (*want)[s].first_layer) << s;
    EXPECT_EQ(balanced.stages[s].last_layer, (*want)[s].last_layer) << s;
    EXPECT_EQ(balanced.stages[s].device, s);
  }
  // The zoo model's embedding and head make the even split unbalanced.
  EXPECT_LT(MaxStageWork(*b, balanced.stages), MaxStageWork(*b, Named(all, "1f1b").plan.stages));
  EXPECT_LT(Named(all, "1f1b-balanced").result.iteration_time_s,
            Named(all, "1f1b").result.iteration_time_s);
}

TEST(BaselinesTest, OneFOneBOnUnitCostsHasItsClosedForm) {
  // 8 unit layers on 4 devices: 2 layers per stage, F = 2, BW = 4; (M + P - 1) * 6.
  const std::vector<BaselineResult> all = RunAll(Synthetic(8, 4), 4, 8);
  const BaselineResult& b = Named(all, "1f1b");
  ASSERT_TRUE(b.ran) << b.error;
  EXPECT_TRUE(b.fits);  // synthetic layers hold no memory
  EXPECT_DOUBLE_EQ(b.result.iteration_time_s, (8 + 4 - 1) * 6.0);
  EXPECT_NEAR(b.result.bubble_ratio, 3.0 / 11.0, 1e-12);
}

TEST(BaselinesTest, BestFittingBaselinePicksTheMinimumUnderEachObjective) {
  const std::vector<BaselineResult> all = RunAll(Llama8b(), 4, 16);
  for (bool steady : {false, true}) {
    const BaselineResult* best = BestFittingBaseline(all, steady);
    ASSERT_NE(best, nullptr);
    EXPECT_TRUE(best->ran && best->fits) << best->name;
    auto obj = [&](const BaselineResult& b) {
      return steady ? b.result.steady_state_iteration_time_s : b.result.iteration_time_s;
    };
    for (const BaselineResult& b : all) {
      if (b.ran && b.fits) {
        EXPECT_LE(obj(*best), obj(b)) << best->name << " vs " << b.name;
      }
    }
  }
}

TEST(BaselinesTest, BestFittingBaselineSkipsFasterOnesThatDoNotFitOrDidNotRun) {
  auto make = [](const std::string& name, bool ran, bool fits, double sync, double steady) {
    BaselineResult b;
    b.name = name;
    b.ran = ran;
    b.fits = fits;
    b.result.iteration_time_s = sync;
    b.result.steady_state_iteration_time_s = steady;
    return b;
  };
  const std::vector<BaselineResult> all = {
      make("over-memory", true, false, 1.0, 1.0),
      make("not-run", false, false, 0.0, 0.0),
      make("a", true, true, 3.0, 2.0),
      make("b", true, true, 2.5, 2.2),
      make("c", true, true, 2.5, 2.6),  // ties the synchronous best: the earlier one stays
  };
  const BaselineResult* sync = BestFittingBaseline(all, false);
  ASSERT_NE(sync, nullptr);
  EXPECT_EQ(sync->name, "b");
  const BaselineResult* steady = BestFittingBaseline(all, true);
  ASSERT_NE(steady, nullptr);
  EXPECT_EQ(steady->name, "a");
  EXPECT_EQ(BestFittingBaseline({}, false), nullptr);
}

// ZB-H1, ZB-H2 and ZB-V are built for the model's own costs, not at unit cost: on a chain of
// 16 layers with unequal F, B, W (4 layers per stage) their orders differ from the
// unit-cost generator's and are never slower than the unit-cost orders on the same problem.
TEST(BaselinesTest, ZeroBubbleBaselinesAreBuiltForTheRealCosts) {
  Inputs s = Synthetic(16, 4);
  for (int l = 0; l < 16; ++l) {  // stage k = l / 4: F 1 + k/2, B 2.5 - k/2, W 1 per layer
    const int k = l / 4;
    s.model.layers[l].measured.forward_s = 1.0 + 0.5 * k;
    s.model.layers[l].measured.backward_input_s = 2.5 - 0.5 * k;
    s.model.layers[l].measured.weight_grad_s = 1.0;
  }
  absl::StatusOr<ProblemBuilder> b = ProblemBuilder::Create(s.model, s.cluster, s.cost, 4);
  ASSERT_TRUE(b.ok()) << b.status();
  const std::vector<BaselineResult> all = RunBaselines(s.model, *b, 8, false);
  for (const char* name : {"zb-h1", "zb-h2", "zb-v"}) {
    const BaselineResult& zb = Named(all, name);
    ASSERT_TRUE(zb.ran) << name << ": " << zb.error;
    absl::StatusOr<ScheduleKind> kind = ParseScheduleKind(name);
    ASSERT_TRUE(kind.ok());
    absl::StatusOr<GeneratedSchedule> unit = GenerateSchedule(*kind, 4, 0, 8);
    ASSERT_TRUE(unit.ok());
    absl::StatusOr<PipelineProblem> pb = b->Build(zb.plan);
    ASSERT_TRUE(pb.ok()) << pb.status();
    absl::StatusOr<SimResult> unit_result = Simulate(*pb, unit->schedule);
    ASSERT_TRUE(unit_result.ok()) << unit_result.status();
    const double built = zb.result.steady_state_iteration_time_s;
    const double unit_order = unit_result->steady_state_iteration_time_s;
    EXPECT_LE(built, unit_order) << name;
    // ZB-H1 ties here (174 s both); ZB-H2 158 s vs 164 s, ZB-V 153 s vs 154 s.
    if (std::string(name) != "zb-h1") {
      EXPECT_LT(built, unit_order) << name;
    }
    bool differs = false;
    for (int d = 0; d < 4; ++d) differs |= zb.plan.schedule.ops[d] != unit->schedule.ops[d];
    EXPECT_TRUE(differs) << name << ": the order did not adapt to the costs";
  }
}

}  // namespace
}  // namespace octopipe
