#include "executor/layers/mamba.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "executor/layers/common.h"
#include "executor/layers/init.h"
#include "executor/layers/rmsnorm.h"

namespace octopipe::executor {
namespace {
// F: norm state, u, z, the step pre-activation and delta, B_t, C_t, the states h_t
// ([T, d*N], row t = h_t row-major), the scan output y and the gated g = y * silu(z).
// B appends the output gradients W needs; see mamba.h.
enum Slot {
  kXhat,
  kInvRms,
  kNorm,
  kU,
  kZ,
  kPre,
  kDelta,
  kBm,
  kCm,
  kStates,
  kY,
  kG,
  kForwardSlots,
  kDy = kForwardSlots,
  kDys,
  kDpre,
  kDbm,
  kDcm,
  kDxz,
  kDalog,
  kDn,
  kSlots
};

void CheckSequences(const MicroBatch& mb, Eigen::Index rows) {
  CheckOrDie(mb.seq_len > 0 && mb.batch > 0 && rows == Eigen::Index{mb.batch} * mb.seq_len,
             absl::StrCat("mamba layer: micro-batch of ", mb.batch, " x ", mb.seq_len,
                          " tokens does not match ", rows, " input rows"));
}
}  // namespace

void ScanForward(const ScanInputs& in, int batch, int s, Tensor* states, Tensor* y) {
  const int c = static_cast<int>(in.u.cols()), n = static_cast<int>(in.bm.cols());
  states->resize(in.u.rows(), Eigen::Index{c} * n);
  y->resize(in.u.rows(), c);
  for (int b = 0; b < batch; ++b) {
    for (int t = b * s; t < (b + 1) * s; ++t) {
      const float* h_prev = t == b * s ? nullptr : &(*states)(t - 1, 0);
      float* h = &(*states)(t, 0);
      for (int i = 0; i < c; ++i) {
        const float dl = in.delta(t, i), du = dl * in.u(t, i);
        float acc = 0;
        for (int j = 0; j < n; ++j) {
          const int ij = i * n + j;
          const float decay = std::exp(dl * in.a(i, j));
          h[ij] = (h_prev ? decay * h_prev[ij] : 0.0f) + du * in.bm(t, j);
          acc += h[ij] * in.cm(t, j);
        }
        (*y)(t, i) = acc + in.d_skip(0, i) * in.u(t, i);
      }
    }
  }
}

void ScanBackward(const ScanInputs& in, const Tensor& states, const Tensor& dys, int batch, int s,
                  Tensor* du, Tensor* ddelta, Tensor* dbm, Tensor* dcm, Tensor* dalog) {
  const int c = static_cast<int>(in.u.cols()), n = static_cast<int>(in.bm.cols());
  const Eigen::Index rows = in.u.rows();
  du->resize(rows, c);
  ddelta->resize(rows, c);
  *dbm = Tensor::Zero(rows, n);
  *dcm = Tensor::Zero(rows, n);
  *dalog = Tensor::Zero(c, n);
  std::vector<float> dh(static_cast<size_t>(c) * n);  // dL/dh_t, carried backward in time
  for (int b = 0; b < batch; ++b) {
    std::fill(dh.begin(), dh.end(), 0.0f);
    for (int t = (b + 1) * s - 1; t >= b * s; --t) {
      const float* h = &states(t, 0);
      const float* h_prev = t == b * s ? nullptr : &states(t - 1, 0);
      for (int i = 0; i < c; ++i) {
        const float dyi = dys(t, i), dl = in.delta(t, i), ui = in.u(t, i);
        float ddelta_i = 0, du_i = dyi * in.d_skip(0, i);
        for (int j = 0; j < n; ++j) {
          const int ij = i * n + j;
          // y_t = sum_j h_t C_t: into dh_t and dC_t.
          dh[ij] += dyi * in.cm(t, j);
          (*dcm)(t, j) += dyi * h[ij];
          // h_t = exp(delta A) h_{t-1} + delta u B_t.
          const float decay = std::exp(dl * in.a(i, j));
          const float hp = h_prev ? h_prev[ij] : 0.0f;
          const float g = dh[ij];
          ddelta_i += g * (hp * decay * in.a(i, j) + ui * in.bm(t, j));
          du_i += g * dl * in.bm(t, j);
          (*dbm)(t, j) += g * dl * ui;
          (*dalog)(i, j) += g * hp * decay * dl * in.a(i, j);  // dA/dA_log = A
          dh[ij] = g * decay;                                  // on to dh_{t-1}
        }
        (*ddelta)(t, i) = ddelta_i;
        (*du)(t, i) = du_i;
      }
    }
  }
}

MambaLayer::MambaLayer(const ModelDims& dims, int layer_index)
    : inner_(dims.expand * dims.hidden), state_(dims.state) {
  const int h = dims.hidden, d = inner_, n = state_;
  gain_ = Tensor::Ones(1, h);
  w_in_.resize(h, 2 * d);
  w_dt_.resize(d, d);
  b_dt_.resize(1, d);
  w_b_.resize(d, n);
  w_c_.resize(d, n);
  a_log_.resize(d, n);
  d_skip_ = Tensor::Ones(1, d);
  w_out_.resize(d, h);
  const float a_h = 1.0f / std::sqrt(static_cast<float>(h));
  const float a_d = 1.0f / std::sqrt(static_cast<float>(d));
  InitUniform(dims.seed, layer_index, /*param_index=*/1, a_h, &w_in_);
  InitUniform(dims.seed, layer_index, /*param_index=*/2, a_d, &w_dt_);
  // b_dt: softplus^-1(dt) = dt + log(1 - exp(-dt)), dt log-uniform in [1e-3, 1e-1].
  InitUniform(dims.seed, layer_index, /*param_index=*/3, 1.0f, &b_dt_);
  for (int i = 0; i < d; ++i) {
    const float unit = 0.5f * (b_dt_(0, i) + 1.0f);
    const float dt = std::exp(std::log(1e-3f) + unit * (std::log(1e-1f) - std::log(1e-3f)));
    b_dt_(0, i) = dt + std::log(-std::expm1(-dt));
  }
  InitUniform(dims.seed, layer_index, /*param_index=*/4, a_d, &w_b_);
  InitUniform(dims.seed, layer_index, /*param_index=*/5, a_d, &w_c_);
  for (int i = 0; i < d; ++i) {
    for (int j = 0; j < n; ++j) a_log_(i, j) = std::log(static_cast<float>(j + 1));
  }
  InitUniform(dims.seed, layer_index, /*param_index=*/8, a_d, &w_out_);
  std::vector<Tensor*> p = params(), g = grads();
  for (size_t i = 0; i < p.size(); ++i) *g[i] = Tensor::Zero(p[i]->rows(), p[i]->cols());
}

Tensor MambaLayer::Forward(const Tensor& x, const MicroBatch& mb, LayerContext* ctx) const {
  CheckSequences(mb, x.rows());
  const int d = inner_, s = mb.seq_len;
  ctx->Clear();
  ctx->saved.resize(kForwardSlots);
  std::vector<Tensor>& sv = ctx->saved;
  sv[kNorm] = RmsNormForward(x, gain_, &sv[kXhat], &sv[kInvRms]);
  const Tensor uz = sv[kNorm] * w_in_;
  const Tensor& u = sv[kU] = uz.leftCols(d);
  sv[kZ] = uz.rightCols(d);
  Tensor& pre = sv[kPre];
  pre.noalias() = u * w_dt_;
  pre.rowwise() += b_dt_.row(0);
  const Tensor& delta = sv[kDelta] = pre.unaryExpr([](float v) { return Softplus(v); });
  const Tensor& bm = sv[kBm] = u * w_b_;
  const Tensor& cm = sv[kCm] = u * w_c_;
  const Tensor a = -a_log_.array().exp().matrix();
  ScanForward({u, delta, bm, cm, a, d_skip_}, mb.batch, s, &sv[kStates], &sv[kY]);
  const Tensor& y = sv[kY];
  sv[kG] = y.array() * sv[kZ].unaryExpr([](float v) { return Silu(v); }).array();
  Tensor out = x;
  out.noalias() += sv[kG] * w_out_;
  return out;
}

Tensor MambaLayer::BackwardInput(const Tensor& dy, const MicroBatch& mb, LayerContext* ctx) const {
  CheckContext(*ctx, kForwardSlots, kind(), "BackwardInput");
  CheckSequences(mb, dy.rows());
  const int d = inner_, s = mb.seq_len;
  const Eigen::Index rows = dy.rows();
  ctx->saved.resize(kSlots);
  std::vector<Tensor>& sv = ctx->saved;
  const Tensor &u = sv[kU], &z = sv[kZ], &delta = sv[kDelta], &bm = sv[kBm], &cm = sv[kCm];
  const Tensor& states = sv[kStates];
  sv[kDy] = dy;
  Tensor dg;
  dg.noalias() = dy * w_out_.transpose();
  const Tensor& dys = sv[kDys] = dg.array() * z.unaryExpr([](float v) { return Silu(v); }).array();
  const Tensor dz =
      dg.array() * sv[kY].array() * z.unaryExpr([](float v) { return SiluGrad(v); }).array();

  const Tensor a = -a_log_.array().exp().matrix();
  Tensor du, ddelta;
  Tensor &dbm = sv[kDbm], &dcm = sv[kDcm];
  ScanBackward({u, delta, bm, cm, a, d_skip_}, states, dys, mb.batch, s, &du, &ddelta, &dbm, &dcm,
               &sv[kDalog]);
  Tensor& dpre = sv[kDpre] =
      ddelta.array() * sv[kPre].unaryExpr([](float v) { return Sigmoid(v); }).array();
  du.noalias() += dpre * w_dt_.transpose();
  du.noalias() += dbm * w_b_.transpose();
  du.noalias() += dcm * w_c_.transpose();
  Tensor& dxz = sv[kDxz];
  dxz.resize(rows, 2 * d);
  dxz.leftCols(d) = du;
  dxz.rightCols(d) = dz;
  Tensor& dn = sv[kDn];
  dn.noalias() = dxz * w_in_.transpose();
  Tensor dx = dy + RmsNormBackwardInput(dn, gain_, sv[kXhat], sv[kInvRms]);
  for (int slot : {kInvRms, kZ, kPre, kDelta, kBm, kCm, kStates, kY}) sv[slot] = Tensor();
  return dx;
}

void MambaLayer::BackwardWeight(const MicroBatch& /*mb*/, LayerContext* ctx) {
  CheckContext(*ctx, kSlots, kind(), "BackwardWeight");
  const std::vector<Tensor>& sv = ctx->saved;
  const Tensor& u = sv[kU];
  dw_out_.noalias() += sv[kG].transpose() * sv[kDy];
  dd_skip_ += (sv[kDys].array() * u.array()).colwise().sum().matrix();
  dw_dt_.noalias() += u.transpose() * sv[kDpre];
  db_dt_ += sv[kDpre].colwise().sum();
  dw_b_.noalias() += u.transpose() * sv[kDbm];
  dw_c_.noalias() += u.transpose() * sv[kDcm];
  da_log_ += sv[kDalog];
  dw_in_.noalias() += sv[kNorm].transpose() * sv[kDxz];
  RmsNormBackwardWeight(sv[kDn], sv[kXhat], &dgain_);
}

}  // namespace octopipe::executor
