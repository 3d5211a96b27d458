#include "executor/optimizer.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace octopipe::executor {
namespace {

using ::testing::HasSubstr;

// Two steps worked by hand: lr 0.1, betas 0.9/0.999, weight decay 0.01.
//  step 1: p *= 0.999; m = 0.1 g, v = 0.001 g^2; m_hat = g, v_hat = g^2 -> p -= 0.1 sign(g)
//  step 2 (g = [-0.5, 0.25]): m = [-0.005, 0.0475], v = [0.00049975, 0.0001249375];
//          m_hat = m / 0.19, v_hat = v / 0.001999 = [0.25, 0.0625]
TEST(AdamWTest, TwoStepsMatchHandComputation) {
  AdamWOptions options;
  options.lr = 0.1f;
  options.weight_decay = 0.01f;
  AdamW adam(options);
  Tensor p(1, 2);
  p << 1.0f, -2.0f;
  Tensor g(1, 2);
  g << 0.5f, 0.25f;
  ASSERT_TRUE(adam.Step({&p}, {&g}).ok());
  EXPECT_EQ(adam.step(), 1);
  EXPECT_NEAR(p(0, 0), 0.999 - 0.1, 1e-6);
  EXPECT_NEAR(p(0, 1), -1.998 - 0.1, 1e-6);

  g << -0.5f, 0.25f;
  ASSERT_TRUE(adam.Step({&p}, {&g}).ok());
  EXPECT_EQ(adam.step(), 2);
  EXPECT_NEAR(p(0, 0), 0.899 * 0.999 + 0.1 * (0.005 / 0.19) / 0.5, 1e-6);
  EXPECT_NEAR(p(0, 1), -2.098 * 0.999 - 0.1 * (0.0475 / 0.19) / 0.25, 1e-6);
  EXPECT_NEAR(adam.first_moments()[0](0, 0), -0.005, 1e-7);
  EXPECT_NEAR(adam.second_moments()[0](0, 1), 0.0001249375, 1e-8);
}

// Reserve allocates the zero moments the first Step would (step stays 0), is a no-op once they
// exist, and the updates are bit-identical to an optimizer that allocated them in Step.
TEST(AdamWTest, ReservedMomentsGiveTheSameUpdates) {
  AdamWOptions options;
  options.lr = 0.1f;
  options.weight_decay = 0.01f;
  AdamW lazy(options), reserved(options);
  Tensor p1(2, 2), p2(2, 2), g(2, 2);
  p1 << 1.0f, -2.0f, 0.5f, 3.0f;
  p2 = p1;
  g << 0.5f, 0.25f, -1.0f, 0.125f;
  reserved.Reserve({&p2});
  EXPECT_EQ(reserved.step(), 0);
  ASSERT_EQ(reserved.first_moments().size(), 1u);
  EXPECT_EQ(reserved.first_moments()[0].rows(), 2);
  EXPECT_EQ(reserved.second_moments()[0].cols(), 2);
  EXPECT_EQ(reserved.first_moments()[0].cwiseAbs().maxCoeff(), 0.0f);
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(lazy.Step({&p1}, {&g}).ok());
    ASSERT_TRUE(reserved.Step({&p2}, {&g}).ok());
    reserved.Reserve({&p2});  // moments exist: changes nothing
    g *= -0.5f;
  }
  EXPECT_EQ(p1, p2);
  EXPECT_EQ(lazy.first_moments()[0], reserved.first_moments()[0]);
  EXPECT_EQ(lazy.second_moments()[0], reserved.second_moments()[0]);
  EXPECT_EQ(reserved.step(), 3);
}

TEST(AdamWTest, ZeroGradientOnlyDecays) {
  AdamWOptions options;
  options.lr = 0.5f;
  options.weight_decay = 0.1f;
  AdamW adam(options);
  Tensor p = Tensor::Constant(2, 2, 3.0f);
  const Tensor g = Tensor::Zero(2, 2);
  ASSERT_TRUE(adam.Step({&p}, {&g}).ok());
  EXPECT_TRUE(p.isApproxToConstant(3.0f * 0.95f));
}

TEST(AdamWTest, ShapeMismatchIsInvalidArgumentAndChangesNothing) {
  AdamW adam(AdamWOptions{});
  Tensor p = Tensor::Ones(2, 3);
  const Tensor g = Tensor::Ones(3, 2);
  absl::Status status = adam.Step({&p}, {&g});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("parameter 0 is 2x3, its gradient 3x2"));
  EXPECT_EQ(adam.step(), 0);
  EXPECT_TRUE(p.isOnes(0));

  const Tensor g_ok = Tensor::Ones(2, 3);
  ASSERT_TRUE(adam.Step({&p}, {&g_ok}).ok());
  Tensor q = Tensor::Ones(2, 3);
  status = adam.Step({&p, &q}, {&g_ok, &g_ok});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("2 parameters, but the optimizer state holds 1"));
  EXPECT_EQ(adam.step(), 1);
}

}  // namespace
}  // namespace octopipe::executor
