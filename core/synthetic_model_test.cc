// Pins the synthetic spec grammar and its error messages.
#include "core/synthetic_model.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace octopipe {
namespace {

using ::testing::HasSubstr;

TEST(SyntheticModelTest, BuildsIdenticalMeasuredLayers) {
  absl::StatusOr<ModelGraph> m = ParseSyntheticModel("layers=4,f=1,b=2,w=0.5");
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(4, m->num_layers());
  for (const Layer& l : m->layers) {
    EXPECT_EQ(LayerKind::kMlp, l.kind);
    EXPECT_EQ(1.0, *l.measured.forward_s);
    EXPECT_EQ(2.0, *l.measured.backward_input_s);
    EXPECT_EQ(0.5, *l.measured.weight_grad_s);
    EXPECT_EQ(0.0, *l.measured.activation_bytes);
    EXPECT_EQ(0.0, *l.measured.param_bytes);
    EXPECT_EQ(0.0, *l.measured.output_bytes);
  }
  EXPECT_EQ("L3.synthetic_mlp", m->layers[3].name);
  EXPECT_TRUE(Validate(*m).ok());
}

TEST(SyntheticModelTest, KeysInAnyOrderWithSpacesAndZeroTimes) {
  absl::StatusOr<ModelGraph> m = ParseSyntheticModel(" w=0 , b=0,f=1e-3, layers=1 ");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(1, m->num_layers());
  EXPECT_EQ(1e-3, *m->layers[0].measured.forward_s);
  EXPECT_EQ(0.0, *m->layers[0].measured.weight_grad_s);
}

void ExpectError(absl::string_view spec, absl::string_view fragment) {
  absl::StatusOr<ModelGraph> m = ParseSyntheticModel(spec);
  ASSERT_EQ(absl::StatusCode::kInvalidArgument, m.status().code()) << spec;
  EXPECT_THAT(std::string(m.status().message()), HasSubstr(std::string(fragment))) << spec;
}

TEST(SyntheticModelTest, ErrorsNameTheKeyAndValue) {
  ExpectError("layers=0,f=1,b=1,w=1", "layers=0: must be >= 1");
  ExpectError("layers=x,f=1,b=1,w=1", "layers=x: not an integer");
  ExpectError("layers=2.5,f=1,b=1,w=1", "layers=2.5: not an integer");
  ExpectError("layers=2,f=-1,b=1,w=1", "f=-1: must be >= 0");
  ExpectError("layers=2,f=1,b=abc,w=1", "b=abc: not a finite number");
  ExpectError("layers=2,f=1,b=1,w=inf", "w=inf: not a finite number");
  ExpectError("layers=2,f=1,b=1,w=1,x=3", "unknown key 'x'");
  ExpectError("layers=2,f=1,b=1", "missing key 'w'");
  ExpectError("layers=2,f=1,f=2,b=1,w=1", "key 'f' given twice");
  ExpectError("layers=2,f=1,b,w=1", "'b' is not key=value");
  ExpectError("", "'' is not key=value");
}

}  // namespace
}  // namespace octopipe
