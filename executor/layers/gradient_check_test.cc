// Pins the backward kernels of every layer kind against central finite differences of the
// forward, and the F/B/W split against orderings the executor may use:
//  - B's dx and W's parameter gradients match finite differences of a scalar loss (the head's
//    own loss; L = sum(y * R) for a fixed random R elsewhere);
//  - W run later, after other micro-batches' F and B on the same layer, gives what W run right
//    after B gives (all per-micro-batch state lives in the context);
//  - F1 F2 B2 W2 B1 W1 accumulates the same gradients as F1 B1 W1 F2 B2 W2.
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "executor/data.h"
#include "executor/layer.h"
#include "executor/layers/init.h"
#include "gtest/gtest.h"

namespace octopipe::executor {
namespace {

ModelDims TinyDims() {
  ModelDims d;
  d.vocab = 32;
  d.hidden = 16;
  d.heads = 2;
  d.ffn = 24;
  d.experts = 4;
  d.top_k = 2;
  d.moe_ffn = 12;
  d.state = 4;
  d.expand = 2;
  d.seq_len = 8;
  d.batch = 2;  // two sequences: attention and the scan must keep them apart
  d.seed = 7;
  return d;
}

std::unique_ptr<Layer> Make(const std::string& kind, const ModelDims& dims, int index = 3) {
  absl::StatusOr<std::unique_ptr<Layer>> layer = MakeLayer(kind, dims, index);
  EXPECT_TRUE(layer.ok()) << layer.status();
  return std::move(*layer);
}

Tensor Random(Eigen::Index rows, Eigen::Index cols, uint64_t stream, float a = 1.0f) {
  Tensor t(rows, cols);
  InitUniform(/*seed=*/99, /*layer_index=*/0, static_cast<int>(stream), a, &t);
  return t;
}

// Finite-difference step: large enough that float rounding of the forward (~1e-6 on the loss)
// stays far below the differences, small enough for the curvature. The MoE takes a smaller one
// so that few steps cross a top-k boundary (those samples are skipped).
float Step(const std::string& kind) { return kind == "moe" ? 1e-3f : 1e-2f; }
constexpr double kTolerance = 1e-2;
constexpr int kSamples = 48;

bool IsResidual(const std::string& kind) { return kind != "embedding" && kind != "head"; }

// The scalar the checks differentiate, evaluated in double from the layer's float output.
// `routing` receives the MoE's expert choices (empty for other kinds): the MoE's output jumps
// where a perturbation changes the top-k choice, a point where the gradient (taken with the
// choice held constant) does not describe the finite difference.
double Loss(const Layer& layer, const Tensor& x, const MicroBatch& mb, const Tensor& r,
            std::vector<int32_t>* routing = nullptr) {
  LayerContext ctx;
  const Tensor y = layer.Forward(x, mb, &ctx);
  if (routing != nullptr) {
    *routing = ctx.saved_index.empty() ? std::vector<int32_t>() : ctx.saved_index[0];
  }
  if (layer.kind() == "head") return y(0, 0);
  return (y.cast<double>().array() * r.cast<double>().array()).sum();
}

// A central difference of the loss along one coordinate `*value`, or nothing if either side
// changes the MoE's routing from `base_routing`.
std::optional<double> CentralDifference(const Layer& layer, const Tensor& x, const MicroBatch& mb,
                                        const Tensor& r, const std::vector<int32_t>& base_routing,
                                        float* value) {
  const float step = Step(std::string(layer.kind()));
  const float saved = *value;
  std::vector<int32_t> routing_up, routing_down;
  *value = saved + step;
  const double up = Loss(layer, x, mb, r, &routing_up);
  *value = saved - step;
  const double down = Loss(layer, x, mb, r, &routing_down);
  *value = saved;
  if (routing_up != base_routing || routing_down != base_routing) return std::nullopt;
  return (up - down) / (2.0 * step);
}

// The gradient of Loss with respect to the layer's output.
Tensor LossGrad(const std::string& kind, const Tensor& r) {
  if (kind == "head") return Tensor::Ones(1, 1);
  return r;
}

// Norm-wise relative error between two gradient samples.
double RelativeError(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  return std::sqrt(diff) / std::max({std::sqrt(na), std::sqrt(nb), 1e-12});
}

// Up to `count` distinct element indices of a tensor of `size`, chosen deterministically.
std::vector<Eigen::Index> Sample(Eigen::Index size, int count, uint64_t stream) {
  std::vector<Eigen::Index> out;
  if (size <= count) {
    for (Eigen::Index i = 0; i < size; ++i) out.push_back(i);
    return out;
  }
  SplitMix64 rng(MixSeed(5, stream));
  std::vector<char> used(static_cast<size_t>(size));
  while (static_cast<int>(out.size()) < count) {
    const Eigen::Index i = static_cast<Eigen::Index>(rng.Next() % static_cast<uint64_t>(size));
    if (!used[i]) {
      used[i] = 1;
      out.push_back(i);
    }
  }
  return out;
}

class GradientCheckTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GradientCheckTest, InputAndWeightGradientsMatchFiniteDifferences) {
  const std::string kind = GetParam();
  const ModelDims dims = TinyDims();
  std::unique_ptr<Layer> layer = Make(kind, dims);
  const MicroBatch mb = MakeMicroBatch(dims, /*seed=*/11, /*iteration=*/0, /*microbatch=*/0);
  const Eigen::Index rows = Eigen::Index{dims.batch} * dims.seq_len;
  Tensor x = kind == "embedding" ? Tensor() : Random(rows, dims.hidden, 1);
  const Tensor r = Random(rows, dims.hidden, 2);

  if (kind == "mamba") {
    // Steps delta = softplus(0) ~ 0.7 instead of the initial ~0.01, so that decay, state and
    // A_log terms of the scan's backward are large enough to be seen above float noise.
    layer->params()[3]->setZero();  // b_dt
  }

  // Analytic: F, B, then W into zeroed accumulators.
  LayerContext ctx;
  layer->Forward(x, mb, &ctx);
  const std::vector<int32_t> base_routing =
      ctx.saved_index.empty() ? std::vector<int32_t>() : ctx.saved_index[0];
  const Tensor dy = LossGrad(kind, r);
  const Tensor dx = layer->BackwardInput(dy, mb, &ctx);
  layer->ZeroGrads();
  layer->BackwardWeight(mb, &ctx);

  if (kind == "embedding") {
    EXPECT_EQ(dx.size(), 0);
  } else {
    ASSERT_EQ(dx.rows(), x.rows());
    ASSERT_EQ(dx.cols(), x.cols());
    // For residual layers compare the branch's part (dx - dy): the identity would hide errors.
    std::vector<double> analytic, numeric;
    for (Eigen::Index i : Sample(x.size(), kSamples, 100)) {
      const std::optional<double> fd =
          CentralDifference(*layer, x, mb, r, base_routing, x.data() + i);
      if (!fd) continue;
      const double identity = IsResidual(kind) ? r.data()[i] : 0.0;
      numeric.push_back(*fd - identity);
      analytic.push_back(dx.data()[i] - identity);
    }
    EXPECT_GE(numeric.size(), kSamples * 3 / 4) << kind << " dx: too many routing changes";
    EXPECT_LT(RelativeError(analytic, numeric), kTolerance) << kind << " dx";
  }

  std::vector<Tensor*> params = layer->params();
  std::vector<Tensor*> grads = layer->grads();
  ASSERT_EQ(params.size(), grads.size());
  for (size_t p = 0; p < params.size(); ++p) {
    ASSERT_EQ(params[p]->rows(), grads[p]->rows());
    ASSERT_EQ(params[p]->cols(), grads[p]->cols());
    std::vector<double> analytic, numeric;
    const int samples = std::min<int>(kSamples, static_cast<int>(params[p]->size()));
    for (Eigen::Index i : Sample(params[p]->size(), samples, 200 + p)) {
      const std::optional<double> fd =
          CentralDifference(*layer, x, mb, r, base_routing, params[p]->data() + i);
      if (!fd) continue;
      numeric.push_back(*fd);
      analytic.push_back(grads[p]->data()[i]);
    }
    EXPECT_GE(numeric.size(), samples * 3 / 4)
        << kind << " parameter " << p << ": too many routing changes";
    double norm = 0;
    for (double g : analytic) norm += g * g;
    EXPECT_GT(norm, 0.0) << kind << " parameter " << p << ": gradient sample is all zero";
    EXPECT_LT(RelativeError(analytic, numeric), kTolerance) << kind << " parameter " << p;
  }
}

std::vector<Tensor> CopyGrads(Layer& layer) {
  std::vector<Tensor> out;
  for (Tensor* g : layer.grads()) out.push_back(*g);
  return out;
}

void ExpectNear(const std::vector<Tensor>& a, const std::vector<Tensor>& b, double rel,
                const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double scale = std::max(1e-30, static_cast<double>(a[i].norm()));
    EXPECT_LE((a[i] - b[i]).norm() / scale, rel) << what << " gradient " << i;
  }
}

TEST_P(GradientCheckTest, DeferredWeightGradientMatchesFusedBackward) {
  const std::string kind = GetParam();
  const ModelDims dims = TinyDims();
  const MicroBatch mb1 = MakeMicroBatch(dims, 11, 0, 1);
  const MicroBatch mb2 = MakeMicroBatch(dims, 11, 0, 2);
  const Eigen::Index rows = Eigen::Index{dims.batch} * dims.seq_len;
  const Tensor x1 = Random(rows, dims.hidden, 3), x2 = Random(rows, dims.hidden, 4);
  const Tensor dy1 = LossGrad(kind, Random(rows, dims.hidden, 5));
  const Tensor dy2 = LossGrad(kind, Random(rows, dims.hidden, 6));

  // Fused: W right after B.
  std::unique_ptr<Layer> fused = Make(kind, dims);
  LayerContext c;
  fused->Forward(x1, mb1, &c);
  const Tensor dx_fused = fused->BackwardInput(dy1, mb1, &c);
  fused->BackwardWeight(mb1, &c);

  // Split: another micro-batch's F and B run between B and W.
  std::unique_ptr<Layer> split = Make(kind, dims);
  LayerContext c1, c2;
  split->Forward(x1, mb1, &c1);
  const Tensor dx_split = split->BackwardInput(dy1, mb1, &c1);
  split->Forward(x2, mb2, &c2);
  split->BackwardInput(dy2, mb2, &c2);
  split->BackwardWeight(mb1, &c1);

  EXPECT_EQ(dx_fused, dx_split) << kind;
  ExpectNear(CopyGrads(*fused), CopyGrads(*split), 0.0, kind);
}

TEST_P(GradientCheckTest, InterleavedMicroBatchesAccumulateLikeSequential) {
  const std::string kind = GetParam();
  const ModelDims dims = TinyDims();
  const MicroBatch mb1 = MakeMicroBatch(dims, 11, 0, 1);
  const MicroBatch mb2 = MakeMicroBatch(dims, 11, 0, 2);
  const Eigen::Index rows = Eigen::Index{dims.batch} * dims.seq_len;
  const Tensor x1 = Random(rows, dims.hidden, 3), x2 = Random(rows, dims.hidden, 4);
  const Tensor dy1 = LossGrad(kind, Random(rows, dims.hidden, 5));
  const Tensor dy2 = LossGrad(kind, Random(rows, dims.hidden, 6));

  std::unique_ptr<Layer> seq = Make(kind, dims);
  LayerContext s1, s2;
  seq->Forward(x1, mb1, &s1);
  const Tensor dx1_seq = seq->BackwardInput(dy1, mb1, &s1);
  seq->BackwardWeight(mb1, &s1);
  seq->Forward(x2, mb2, &s2);
  const Tensor dx2_seq = seq->BackwardInput(dy2, mb2, &s2);
  seq->BackwardWeight(mb2, &s2);

  std::unique_ptr<Layer> inter = Make(kind, dims);
  LayerContext i1, i2;
  inter->Forward(x1, mb1, &i1);
  inter->Forward(x2, mb2, &i2);
  const Tensor dx2_inter = inter->BackwardInput(dy2, mb2, &i2);
  inter->BackwardWeight(mb2, &i2);
  const Tensor dx1_inter = inter->BackwardInput(dy1, mb1, &i1);
  inter->BackwardWeight(mb1, &i1);

  EXPECT_EQ(dx1_seq, dx1_inter) << kind;
  EXPECT_EQ(dx2_seq, dx2_inter) << kind;
  // Two summands per element in the other order: equal up to float reassociation.
  ExpectNear(CopyGrads(*seq), CopyGrads(*inter), 1e-6, kind);
}

INSTANTIATE_TEST_SUITE_P(AllKinds, GradientCheckTest,
                         ::testing::Values("embedding", "attention", "mlp", "moe", "mamba", "head"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace octopipe::executor
