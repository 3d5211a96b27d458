#include "executor/host_probe.h"

#include <algorithm>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace octopipe::executor {
namespace {

using ::testing::HasSubstr;

ModelSpec Spec(const std::string& text) {
  absl::StatusOr<ModelSpec> spec = ParseModelSpec(text);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

TEST(HostProbeTest, TimesEveryRepeatOfTheModelsOwnLayers) {
  absl::StatusOr<HostProbe> probe =
      RunHostProbe(Spec("ref:pattern=M*-E,hidden=16,heads=2,ffn=32,moe_ffn=16,seq=8,vocab=32"), 3);
  ASSERT_TRUE(probe.ok()) << probe.status();
  ASSERT_EQ(probe->samples.size(), 3u);
  for (double s : probe->samples) EXPECT_GT(s, 0);
  EXPECT_EQ(probe->seconds, MedianProbeSeconds(probe->samples));
  const auto [lo, hi] = std::minmax_element(probe->samples.begin(), probe->samples.end());
  EXPECT_DOUBLE_EQ(probe->spread, (*hi - *lo) / probe->seconds);
}

TEST(HostProbeTest, ABiggerModelTakesLonger) {
  // ~1000x the work (width 8x, sequence 16x, 4x the layers): no host noise hides that.
  const std::string small = "ref:pattern=-,hidden=16,heads=2,ffn=32,seq=8,vocab=32";
  const std::string big = "ref:pattern=----,hidden=128,heads=2,ffn=256,seq=128,vocab=32";
  absl::StatusOr<HostProbe> a = RunHostProbe(Spec(small), 3);
  absl::StatusOr<HostProbe> b = RunHostProbe(Spec(big), 3);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_GT(b->seconds, 10 * a->seconds);
}

TEST(HostProbeTest, RefusesNoRepeats) {
  absl::StatusOr<HostProbe> probe = RunHostProbe(Spec("ref:pattern=-,hidden=16,seq=8"), 0);
  EXPECT_EQ(probe.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(probe.status().message(), HasSubstr("repeats must be >= 1, got 0"));
}

TEST(HostProbeTest, MedianIgnoresMissingProbes) {
  EXPECT_EQ(MedianProbeSeconds({}), 0);
  EXPECT_EQ(MedianProbeSeconds({0, -1}), 0);
  EXPECT_DOUBLE_EQ(MedianProbeSeconds({0.3, 0, 0.1, 0.2}), 0.2);
  EXPECT_DOUBLE_EQ(MedianProbeSeconds({0.4, 0.1, 0.2, 0.3}), 0.25);
}

TEST(HostProbeTest, WorkloadIsEveryLayersMeasuredForwardBackwardAndWeightGradient) {
  ModelGraph model;
  model.layers.resize(2);
  model.layers[0].measured.forward_s = 1e-3;
  model.layers[0].measured.backward_input_s = 2e-3;
  model.layers[0].measured.weight_grad_s = 0.5e-3;
  model.layers[0].measured.recompute_s = 9.0;  // the probe recomputes nothing
  model.layers[1].measured.forward_s = 4e-3;
  model.layers[1].measured.backward_input_s = 5e-3;
  model.layers[1].measured.weight_grad_s = 6e-3;
  EXPECT_DOUBLE_EQ(ProbeWorkloadSeconds(model), 18.5e-3);
  model.layers[1].measured.weight_grad_s.reset();  // analytic costs: no reference
  EXPECT_EQ(ProbeWorkloadSeconds(model), 0);
  EXPECT_EQ(ProbeWorkloadSeconds(ModelGraph{}), 0);
}

}  // namespace
}  // namespace octopipe::executor
