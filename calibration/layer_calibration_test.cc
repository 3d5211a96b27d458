// Pins FitCalibration (how measured stage times become per-layer factors) and ParseOpKind.
//
// The predicted problem is a hand-made UniformProblem, so every expected factor is a closed
// form: ratio = sum(measured * samples) / sum(predicted * samples) over the op kinds reported
// for a stage, applied to exactly that stage's layers.
#include "calibration/layer_calibration.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "core/cost_model.h"
#include "core/plan.h"
#include "core/synthetic_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "simulator/problem.h"
#include "simulator/problem_builder.h"

namespace octopipe {
namespace {

using ::testing::HasSubstr;

constexpr int kLayers = 8;
constexpr double kF = 1.0, kB = 2.0, kW = 0.5;

// 8 layers in 4 stages of 2 layers ([0-1], [2-3], [4-5], [6-7]), one stage per device.
Plan FourStagePlan() {
  Plan plan;
  plan.num_devices = 4;
  plan.num_microbatches = 8;
  plan.stages = EvenPartition(kLayers, 4);
  for (int s = 0; s < 4; ++s) plan.stages[s].device = s;
  return plan;
}

// Every stage predicted F = 1 s, B = 2 s, W = 0.5 s, R = F.
PipelineProblem Predicted() { return UniformProblem({0, 1, 2, 3}, 4, 8, kF, kB, kW); }

MeasuredStageTime Time(int stage, OpKind kind, double seconds, int64_t samples = 1) {
  MeasuredStageTime t;
  t.stage = stage;
  t.kind = kind;
  t.seconds = seconds;
  t.samples = samples;
  return t;
}

void ExpectFactors(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t l = 0; l < want.size(); ++l) EXPECT_NEAR(got[l], want[l], 1e-12) << "layer " << l;
}

TEST(FitCalibrationTest, StageMeasuredThirtyPercentSlowerScalesExactlyItsLayers) {
  // Stage 1 (layers 2-3) runs every op kind 30% slower than predicted.
  const std::vector<MeasuredStageTime> times = {
      Time(1, OpKind::kF, kF * 1.3, 8), Time(1, OpKind::kB, kB * 1.3, 8),
      Time(1, OpKind::kW, kW * 1.3, 8)};
  absl::StatusOr<CalibrationUpdate> u =
      FitCalibration(FourStagePlan(), Predicted(), times, {}, kLayers);
  ASSERT_TRUE(u.ok()) << u.status();
  ExpectFactors(u->factors, {1, 1, 1.3, 1.3, 1, 1, 1, 1});
  EXPECT_NEAR(u->max_deviation, 0.3, 1e-12);
  EXPECT_EQ(u->worst_stage, 1);
}

TEST(FitCalibrationTest, StageRatioIsSampleWeightedOverTheReportedKinds) {
  // Stage 2: F measured 1.5 s over 1 sample (predicted 1), B measured 2.0 s over 3 samples
  // (predicted 2); W not reported. ratio = (1.5*1 + 2*3) / (1*1 + 2*3) = 7.5 / 7.
  const std::vector<MeasuredStageTime> times = {Time(2, OpKind::kF, 1.5, 1),
                                                Time(2, OpKind::kB, 2.0, 3)};
  absl::StatusOr<CalibrationUpdate> u =
      FitCalibration(FourStagePlan(), Predicted(), times, {}, kLayers);
  ASSERT_TRUE(u.ok()) << u.status();
  const double ratio = 7.5 / 7.0;
  ExpectFactors(u->factors, {1, 1, 1, 1, ratio, ratio, 1, 1});
  EXPECT_NEAR(u->max_deviation, ratio - 1, 1e-12);
  EXPECT_EQ(u->worst_stage, 2);
}

TEST(FitCalibrationTest, CombinedAndRecomputeKindsCompareWithTheirOwnPrediction) {
  // BW is predicted as B + W = 2.5 s; R as F = 1 s.
  const std::vector<MeasuredStageTime> times = {Time(0, OpKind::kBW, 2.5 * 1.2),
                                                Time(3, OpKind::kR, 1.0 * 0.9)};
  absl::StatusOr<CalibrationUpdate> u =
      FitCalibration(FourStagePlan(), Predicted(), times, {}, kLayers);
  ASSERT_TRUE(u.ok()) << u.status();
  ExpectFactors(u->factors, {1.2, 1.2, 1, 1, 1, 1, 0.9, 0.9});
  EXPECT_NEAR(u->max_deviation, 0.2, 1e-12);
  EXPECT_EQ(u->worst_stage, 0);
}

TEST(FitCalibrationTest, WorstStageIsTheLargestDeviationEitherWay) {
  // 20% faster on stage 0, 30% slower on stage 3, exact on stage 1.
  const std::vector<MeasuredStageTime> times = {
      Time(0, OpKind::kF, kF * 0.8), Time(1, OpKind::kF, kF), Time(3, OpKind::kF, kF * 1.3)};
  absl::StatusOr<CalibrationUpdate> u =
      FitCalibration(FourStagePlan(), Predicted(), times, {}, kLayers);
  ASSERT_TRUE(u.ok()) << u.status();
  ExpectFactors(u->factors, {0.8, 0.8, 1, 1, 1, 1, 1.3, 1.3});
  EXPECT_NEAR(u->max_deviation, 0.3, 1e-12);
  EXPECT_EQ(u->worst_stage, 3);

  // Faster is a deviation too.
  u = FitCalibration(FourStagePlan(), Predicted(), {Time(2, OpKind::kB, kB * 0.75)}, {},
                     kLayers);
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_NEAR(u->max_deviation, 0.25, 1e-12);
  EXPECT_EQ(u->worst_stage, 2);
}

TEST(FitCalibrationTest, ExistingFactorsAreMultipliedNotReplaced) {
  // The prediction already includes the old factors, so a stage still 30% off compounds.
  const std::vector<double> old = {2, 2, 0.5, 0.5, 1, 1, 1, 1};
  absl::StatusOr<CalibrationUpdate> u = FitCalibration(
      FourStagePlan(), Predicted(), {Time(1, OpKind::kF, kF * 1.3)}, old, kLayers);
  ASSERT_TRUE(u.ok()) << u.status();
  ExpectFactors(u->factors, {2, 2, 0.65, 0.65, 1, 1, 1, 1});
}

TEST(FitCalibrationTest, NoReportsOrExactReportsLeaveFactorsAtOne) {
  absl::StatusOr<CalibrationUpdate> u =
      FitCalibration(FourStagePlan(), Predicted(), {}, {}, kLayers);
  ASSERT_TRUE(u.ok()) << u.status();
  ExpectFactors(u->factors, std::vector<double>(kLayers, 1.0));
  EXPECT_EQ(u->max_deviation, 0);
  EXPECT_EQ(u->worst_stage, -1);

  u = FitCalibration(FourStagePlan(), Predicted(),
                     {Time(0, OpKind::kF, kF, 4), Time(0, OpKind::kB, kB, 4)}, {}, kLayers);
  ASSERT_TRUE(u.ok()) << u.status();
  ExpectFactors(u->factors, std::vector<double>(kLayers, 1.0));
  EXPECT_NEAR(u->max_deviation, 0, 1e-12);
}

TEST(FitCalibrationTest, KindPredictedFreeIsIgnored) {
  // With W predicted 0 s there is nothing to compare a measured W with.
  const PipelineProblem no_w = UniformProblem({0, 1, 2, 3}, 4, 8, kF, kB, 0.0);
  absl::StatusOr<CalibrationUpdate> u =
      FitCalibration(FourStagePlan(), no_w, {Time(1, OpKind::kW, 0.7, 8)}, {}, kLayers);
  ASSERT_TRUE(u.ok()) << u.status();
  ExpectFactors(u->factors, std::vector<double>(kLayers, 1.0));
  EXPECT_EQ(u->max_deviation, 0);
  EXPECT_EQ(u->worst_stage, -1);
}

// Errors are kInvalidArgument naming the entry and the field.
void ExpectInvalid(const std::vector<MeasuredStageTime>& times, const std::string& field) {
  absl::StatusOr<CalibrationUpdate> u =
      FitCalibration(FourStagePlan(), Predicted(), times, {}, kLayers);
  ASSERT_FALSE(u.ok()) << field;
  EXPECT_EQ(u.status().code(), absl::StatusCode::kInvalidArgument) << u.status();
  EXPECT_THAT(std::string(u.status().message()), HasSubstr(field));
}

TEST(FitCalibrationTest, StageOutOfRangeNamesTheEntry) {
  ExpectInvalid({Time(4, OpKind::kF, 1)}, "times[0].stage");
  ExpectInvalid({Time(0, OpKind::kF, 1), Time(-1, OpKind::kF, 1)}, "times[1].stage");
}

TEST(FitCalibrationTest, NonPositiveOrNonFiniteSecondsNameTheEntry) {
  ExpectInvalid({Time(0, OpKind::kF, 0)}, "times[0].seconds");
  ExpectInvalid({Time(0, OpKind::kF, 1), Time(1, OpKind::kB, -2)}, "times[1].seconds");
  ExpectInvalid({Time(0, OpKind::kF, std::numeric_limits<double>::quiet_NaN())},
                "times[0].seconds");
  ExpectInvalid({Time(0, OpKind::kF, std::numeric_limits<double>::infinity())},
                "times[0].seconds");
}

TEST(FitCalibrationTest, SamplesBelowOneNameTheEntry) {
  ExpectInvalid({Time(0, OpKind::kF, 1, 0)}, "times[0].samples");
  ExpectInvalid({Time(2, OpKind::kF, 1, 2), Time(2, OpKind::kF, 1, -3)}, "times[1].samples");
}

// Vocabulary parallelism: the head (layer 7) is split over the 4 devices; device d's S pass is
// predicted 0.4 s and its T pass 0.2 s (S and T reported with stage = device).
Plan FourStageVocabPlan() {
  Plan plan = FourStagePlan();
  plan.vocab_parallel = true;
  return plan;
}

PipelineProblem PredictedWithVocab() {
  PipelineProblem p = Predicted();
  p.vocab_parallel = true;
  p.vocab_s_s.assign(4, 0.4);
  p.vocab_t_s.assign(4, 0.2);
  p.vocab_activation_bytes.assign(4, 0.0);
  return p;
}

TEST(FitCalibrationTest, VocabularyPassesOfEveryDeviceFitTheHeadsFactor) {
  // S on device 0: 0.6 s x 8, T on device 1: 0.3 s x 4, S on device 2: 0.4 s x 8 (T on device 3
  // not reported). ratio = (0.6*8 + 0.3*4 + 0.4*8) / (0.4*8 + 0.2*4 + 0.4*8) = 9.2 / 7.2.
  const std::vector<MeasuredStageTime> times = {Time(0, OpKind::kS, 0.6, 8),
                                                Time(1, OpKind::kT, 0.3, 4),
                                                Time(2, OpKind::kS, 0.4, 8)};
  absl::StatusOr<CalibrationUpdate> u =
      FitCalibration(FourStageVocabPlan(), PredictedWithVocab(), times, {}, kLayers);
  ASSERT_TRUE(u.ok()) << u.status();
  const double ratio = 9.2 / 7.2;
  ExpectFactors(u->factors, {1, 1, 1, 1, 1, 1, 1, ratio});
  EXPECT_TRUE(u->vocab_reported);
  EXPECT_NEAR(u->vocab_deviation, ratio - 1, 1e-12);
  EXPECT_NEAR(u->max_deviation, ratio - 1, 1e-12);
  EXPECT_TRUE(u->worst_is_vocab);
  EXPECT_EQ(u->worst_stage, -1);
}

TEST(FitCalibrationTest, LastStageRatioDoesNotScaleASplitHead) {
  // Stage 3 (layers 6-7) 20% slower, the vocabulary passes 10% faster: layer 6 takes the
  // stage's ratio, the head (layer 7), whose cost is not in the stage, the passes'.
  const std::vector<MeasuredStageTime> times = {
      Time(3, OpKind::kF, kF * 1.2, 8), Time(3, OpKind::kB, kB * 1.2, 8),
      Time(0, OpKind::kS, 0.4 * 0.9, 8), Time(0, OpKind::kT, 0.2 * 0.9, 8),
      Time(3, OpKind::kS, 0.4 * 0.9, 8), Time(3, OpKind::kT, 0.2 * 0.9, 8)};
  absl::StatusOr<CalibrationUpdate> u =
      FitCalibration(FourStageVocabPlan(), PredictedWithVocab(), times, {2, 2, 1, 1, 1, 1, 1, 3},
                     kLayers);
  ASSERT_TRUE(u.ok()) << u.status();
  ExpectFactors(u->factors, {2, 2, 1, 1, 1, 1, 1.2, 3 * 0.9});
  EXPECT_NEAR(u->max_deviation, 0.2, 1e-12);
  EXPECT_EQ(u->worst_stage, 3);
  EXPECT_FALSE(u->worst_is_vocab);
  EXPECT_NEAR(u->vocab_deviation, 0.1, 1e-12);

  // Without the split the same stage report scales both layers of the stage.
  u = FitCalibration(FourStagePlan(), Predicted(), {Time(3, OpKind::kF, kF * 1.2, 8)}, {},
                     kLayers);
  ASSERT_TRUE(u.ok()) << u.status();
  ExpectFactors(u->factors, {1, 1, 1, 1, 1, 1, 1.2, 1.2});
  EXPECT_FALSE(u->vocab_reported);
}

TEST(FitCalibrationTest, VocabularyPassesAreCheckedAgainstThePlan) {
  // A plan without the split has no S or T to calibrate.
  ExpectInvalid({Time(0, OpKind::kF, 1), Time(0, OpKind::kS, 1)}, "times[1].kind S");
  // The stage of a vocabulary pass is a device: [0, 3] here.
  for (int device : {-1, 4}) {
    absl::StatusOr<CalibrationUpdate> u = FitCalibration(
        FourStageVocabPlan(), PredictedWithVocab(), {Time(device, OpKind::kT, 1)}, {}, kLayers);
    ASSERT_FALSE(u.ok()) << device;
    EXPECT_EQ(u.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(u.status().message()),
                HasSubstr("times[0].stage of a vocabulary pass is its device: must be in [0, 3]"));
  }
  absl::StatusOr<CalibrationUpdate> u = FitCalibration(
      FourStageVocabPlan(), PredictedWithVocab(), {Time(1, OpKind::kS, 0)}, {}, kLayers);
  EXPECT_THAT(std::string(u.status().message()), HasSubstr("times[0].seconds must be > 0"));
}

// FitMeasuredTimes against a real ProblemBuilder: 4 synthetic layers (F 1, B 2, W 0.5 s; no
// op overhead, free links), the last made the head with F 2, B 4, W 2 s; 2 stages [0-1] on
// device 0 and [2-3] on device 1, the head split over both devices (equal shards, 0.5 each):
// predicted S(d) = (2 + 4) x 0.5 = 3 s, T(d) = 2 x 0.5 = 1 s; stage 1's F is layer 2's alone.
struct VocabSetup {
  ModelGraph model;
  Cluster cluster = SyntheticCluster(2);
  Plan plan;
};

VocabSetup SmallVocabSetup() {
  VocabSetup v;
  v.model = *ParseSyntheticModel("layers=4,f=1,b=2,w=0.5");
  Layer& head = v.model.layers.back();
  head.kind = LayerKind::kHead;
  head.dims.vocab = 1000;
  head.measured.forward_s = 2.0;
  head.measured.backward_input_s = 4.0;
  head.measured.weight_grad_s = 2.0;
  v.plan.num_devices = 2;
  v.plan.num_microbatches = 4;
  v.plan.vocab_parallel = true;
  v.plan.stages = EvenPartition(4, 2);
  v.plan.stages[1].device = 1;
  return v;
}

absl::StatusOr<ProblemBuilder> BuilderOf(const VocabSetup& v, const std::vector<double>& f) {
  return ProblemBuilder::Create(v.model, v.cluster, CostModel(), 2, f, v.plan.vocab_parallel);
}

TEST(FitMeasuredTimesTest, VocabularyPassesCalibrateTheHeadAsTheProblemCostsIt) {
  const VocabSetup v = SmallVocabSetup();
  absl::StatusOr<ProblemBuilder> builder = BuilderOf(v, {});
  ASSERT_TRUE(builder.ok()) << builder.status();
  absl::StatusOr<PipelineProblem> p = builder->Build(v.plan);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_NEAR(p->vocab_s_s[0], 3.0, 1e-12);
  ASSERT_NEAR(p->vocab_t_s[1], 1.0, 1e-12);
  ASSERT_NEAR(p->forward_s[1], 1.0, 1e-12);

  // Stage 1 50% slower; S 6 s on device 0 and 3 s on device 1, T 1 s on both (4 samples each):
  // head factor = (6*4 + 3*4 + 1*4 + 1*4) / (3*4 + 3*4 + 1*4 + 1*4) = 44 / 32.
  const std::vector<MeasuredStageTime> stages = {
      Time(1, OpKind::kF, 1.5, 4), Time(1, OpKind::kB, 3.0, 4), Time(0, OpKind::kS, 6.0, 4),
      Time(1, OpKind::kS, 3.0, 4), Time(0, OpKind::kT, 1.0, 4), Time(1, OpKind::kT, 1.0, 4)};
  absl::StatusOr<CalibrationUpdate> u = FitMeasuredTimes(*builder, v.plan, stages, {}, {});
  ASSERT_TRUE(u.ok()) << u.status();
  const double head = 44.0 / 32.0;
  ExpectFactors(u->factors, {1, 1, 1.5, head});
  EXPECT_NEAR(u->max_deviation, 0.5, 1e-12);
  EXPECT_EQ(u->worst_stage, 1);
  EXPECT_NEAR(u->vocab_deviation, head - 1, 1e-12);

  // The calibrated problem predicts what was measured: S = 3 x 44/32 on each device, and the
  // same report against it deviates nowhere (the fit is consistent with ProblemBuilder).
  absl::StatusOr<ProblemBuilder> calibrated = BuilderOf(v, u->factors);
  ASSERT_TRUE(calibrated.ok()) << calibrated.status();
  p = calibrated->Build(v.plan);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NEAR(p->vocab_s_s[0], 3.0 * head, 1e-12);
  EXPECT_NEAR(p->vocab_t_s[1], 1.0 * head, 1e-12);
  const std::vector<MeasuredStageTime> as_predicted = {
      Time(1, OpKind::kF, 1.5, 4), Time(0, OpKind::kS, 3.0 * head, 4),
      Time(1, OpKind::kT, 1.0 * head, 4)};
  absl::StatusOr<CalibrationUpdate> again =
      FitMeasuredTimes(*calibrated, v.plan, as_predicted, {}, u->factors);
  ASSERT_TRUE(again.ok()) << again.status();
  ExpectFactors(again->factors, u->factors);
  EXPECT_NEAR(again->max_deviation, 0, 1e-12);
}

TEST(FitMeasuredTimesTest, LayerTimesCalibrateTheirLayersButNotASplitHead) {
  const VocabSetup v = SmallVocabSetup();
  absl::StatusOr<ProblemBuilder> builder = BuilderOf(v, {});
  ASSERT_TRUE(builder.ok()) << builder.status();
  const std::vector<MeasuredStageTime> stages = {Time(0, OpKind::kS, 4.5, 4),
                                                 Time(1, OpKind::kS, 4.5, 4)};
  // Layer 0 twice as slow in F; the head's own layer times (its norm on the last stage's
  // device, 10 ms) must not drag its factor down.
  const std::vector<MeasuredLayerTime> layers = {
      {0, OpKind::kF, 2.0, 4}, {3, OpKind::kF, 0.01, 4}, {3, OpKind::kB, 0.01, 4}};
  absl::StatusOr<CalibrationUpdate> u = FitMeasuredTimes(*builder, v.plan, stages, layers, {});
  ASSERT_TRUE(u.ok()) << u.status();
  ExpectFactors(u->factors, {2, 1, 1, 1.5});

  // Without the split the head's layer times are its whole cost and calibrate it.
  VocabSetup plain = v;
  plain.plan.vocab_parallel = false;
  builder = BuilderOf(plain, {});
  ASSERT_TRUE(builder.ok()) << builder.status();
  u = FitMeasuredTimes(*builder, plain.plan, {}, {{3, OpKind::kF, 3.0, 4}}, {});
  ASSERT_TRUE(u.ok()) << u.status();
  ExpectFactors(u->factors, {1, 1, 1, 1.5});

  // Vocabulary passes are stage times, not layer times.
  builder = BuilderOf(v, {});
  ASSERT_TRUE(builder.ok()) << builder.status();
  u = FitMeasuredTimes(*builder, v.plan, {}, {{3, OpKind::kS, 3.0, 4}}, {});
  ASSERT_FALSE(u.ok());
  EXPECT_THAT(std::string(u.status().message()),
              HasSubstr("layer_times[0].op_kind must be F, B, W or R (vocabulary passes are "
                        "stage times"));
}

// A split embedding (layer 0 an embedding over the head's 1000 columns, equal shards) runs on
// stage 0's device for that device's half only: its layer times compare with half its cost.
TEST(FitMeasuredTimesTest, ASplitEmbeddingsLayerTimesCalibrateByItsShare) {
  VocabSetup v = SmallVocabSetup();
  Layer& embedding = v.model.layers.front();
  embedding.kind = LayerKind::kEmbedding;
  embedding.dims.vocab = 1000;
  absl::StatusOr<ProblemBuilder> builder = BuilderOf(v, {});
  ASSERT_TRUE(builder.ok()) << builder.status();
  ASSERT_TRUE(builder->split_embedding());
  // Layer 0 predicted F 1 s whole, 0.5 s for device 0's half: measured 0.5 s is as predicted,
  // 1.5 s three times slower.
  absl::StatusOr<CalibrationUpdate> u =
      FitMeasuredTimes(*builder, v.plan, {}, {{0, OpKind::kF, 0.5, 4}}, {});
  ASSERT_TRUE(u.ok()) << u.status();
  ExpectFactors(u->factors, {1, 1, 1, 1});
  u = FitMeasuredTimes(*builder, v.plan, {}, {{0, OpKind::kF, 1.5, 4}, {0, OpKind::kW, 0.25, 4}},
                       {});
  ASSERT_TRUE(u.ok()) << u.status();
  ExpectFactors(u->factors, {(1.5 + 0.25) / (0.5 + 0.25), 1, 1, 1});
  // Unequal shards: device 0 holds 100 of the 1000 columns.
  v.plan.vocab_shard_columns = {100, 900};
  u = FitMeasuredTimes(*builder, v.plan, {}, {{0, OpKind::kF, 0.1, 4}}, {});
  ASSERT_TRUE(u.ok()) << u.status();
  ExpectFactors(u->factors, {1, 1, 1, 1});
}

TEST(ParseOpKindTest, AcceptsTheFiveKinds) {
  const std::vector<std::pair<std::string, OpKind>> kinds = {{"F", OpKind::kF},
                                                             {"B", OpKind::kB},
                                                             {"W", OpKind::kW},
                                                             {"BW", OpKind::kBW},
                                                             {"R", OpKind::kR}};
  for (const auto& [text, kind] : kinds) {
    absl::StatusOr<OpKind> k = ParseOpKind(text);
    ASSERT_TRUE(k.ok()) << text << ": " << k.status();
    EXPECT_EQ(*k, kind) << text;
  }
}

TEST(ParseOpKindTest, RejectsAnythingElseNamingTheValue) {
  for (const std::string text : {"", "f", "bw", "FB", "WB", "X", " F", "F "}) {
    absl::StatusOr<OpKind> k = ParseOpKind(text);
    ASSERT_FALSE(k.ok()) << "'" << text << "'";
    EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(k.status().message()), HasSubstr("op_kind"));
    EXPECT_THAT(std::string(k.status().message()), HasSubstr("'" + text + "'"));
  }
}

// Per-layer calibration: each layer gets its own measured / predicted ratio; layers without
// reports keep their factor; the layers of one stage are no longer smeared together.
std::vector<LayerCost> LayerCosts() {
  std::vector<LayerCost> c(4);
  for (int l = 0; l < 4; ++l) {
    c[l].forward_s = 1.0 * (l + 1);
    c[l].backward_input_s = 2.0 * (l + 1);
    c[l].weight_grad_s = 0.5 * (l + 1);
    c[l].recompute_s = c[l].forward_s;
  }
  return c;
}

TEST(FitLayerCalibrationTest, EachLayerGetsItsOwnRatio) {
  // Layer 0 measured 3x slower in F and B; layer 2 half as fast in W only (F not reported);
  // layers 1 and 3 unreported.
  std::vector<MeasuredLayerTime> times = {
      {0, OpKind::kF, 3.0, 4}, {0, OpKind::kB, 6.0, 4}, {2, OpKind::kW, 3.0, 8}};
  absl::StatusOr<CalibrationUpdate> u = FitLayerCalibration(LayerCosts(), times, {1, 1, 2, 1});
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_DOUBLE_EQ(u->factors[0], 3.0);
  EXPECT_DOUBLE_EQ(u->factors[1], 1.0);
  EXPECT_DOUBLE_EQ(u->factors[2], 2.0 * 2.0);  // predicted W 1.5 s, measured 3 s
  EXPECT_DOUBLE_EQ(u->factors[3], 1.0);
  EXPECT_DOUBLE_EQ(u->max_deviation, 2.0);
  EXPECT_EQ(u->worst_layer, 0);
}

TEST(FitLayerCalibrationTest, RejectsBadReportsNamingTheField) {
  auto fit = [](MeasuredLayerTime t) { return FitLayerCalibration(LayerCosts(), {t}, {}).status(); };
  EXPECT_THAT(std::string(fit({4, OpKind::kF, 1, 1}).message()),
              HasSubstr("layer_times[0].layer must be in [0, 3], got 4"));
  EXPECT_THAT(std::string(fit({1, OpKind::kF, 0, 1}).message()),
              HasSubstr("layer_times[0].seconds must be > 0"));
  EXPECT_THAT(std::string(fit({1, OpKind::kF, 1, 0}).message()),
              HasSubstr("layer_times[0].samples must be >= 1"));
  EXPECT_THAT(std::string(fit({1, OpKind::kBW, 1, 1}).message()),
              HasSubstr("op_kind must be F, B, W or R"));
}

TEST(ApplyLayerFactorsTest, ScalesEachLayersMeasuredTimesByItsFactor) {
  ModelGraph m;
  for (int l = 0; l < 2; ++l) {
    Layer layer;
    layer.name = "L" + std::to_string(l);
    layer.measured.forward_s = 1.0;
    layer.measured.backward_input_s = 2.0;
    layer.measured.weight_grad_s = 0.5;
    layer.measured.recompute_s = 1.0;
    layer.measured.activation_bytes = 100;
    layer.measured.sharded.push_back(MeasuredSharded{2, 1, 0.8, 1.2, 0.4, 0.6});
    m.layers.push_back(layer);
  }
  absl::StatusOr<ModelGraph> c = ApplyLayerFactors(m, {1.5, 0.5});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(*c->layers[0].measured.forward_s, 1.5);
  EXPECT_DOUBLE_EQ(*c->layers[0].measured.backward_input_s, 3.0);
  EXPECT_DOUBLE_EQ(*c->layers[1].measured.weight_grad_s, 0.25);
  EXPECT_DOUBLE_EQ(*c->layers[1].measured.recompute_s, 0.5);
  EXPECT_DOUBLE_EQ(*c->layers[1].measured.activation_bytes, 100);  // bytes are not times
  // The times measured with the layer split by TP scale with it.
  EXPECT_DOUBLE_EQ(c->layers[0].measured.sharded[0].forward_s, 1.2);
  EXPECT_DOUBLE_EQ(c->layers[1].measured.sharded[0].backward_input_s, 0.6);
  EXPECT_DOUBLE_EQ(c->layers[1].measured.sharded[0].weight_grad_s, 0.2);
  EXPECT_DOUBLE_EQ(c->layers[0].measured.sharded[0].recompute_s, 0.9);
  EXPECT_THAT(ApplyLayerFactors(m, {1.0}).status().message(), HasSubstr("factors: 1 for 2"));
  EXPECT_THAT(ApplyLayerFactors(m, {1.0, 0.0}).status().message(),
              HasSubstr("factors[1] must be finite and > 0, got 0"));
  m.layers[1].measured.forward_s.reset();
  EXPECT_THAT(ApplyLayerFactors(m, {1.0, 1.0}).status().message(),
              HasSubstr("layers[1] (L1): no measured F, B, W seconds"));
}

}  // namespace
}  // namespace octopipe
