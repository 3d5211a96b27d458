#include "executor/layers/rmsnorm.h"

#include <cmath>

namespace octopipe::executor {

Tensor RmsNormForward(const Tensor& x, const Tensor& gain, Tensor* xhat, Tensor* inv_rms) {
  const Eigen::Index rows = x.rows();
  const float inv_h = 1.0f / static_cast<float>(x.cols());
  inv_rms->resize(rows, 1);
  for (Eigen::Index t = 0; t < rows; ++t) {
    const float ms = x.row(t).squaredNorm() * inv_h;
    (*inv_rms)(t, 0) = 1.0f / std::sqrt(ms + kRmsNormEps);
  }
  *xhat = x.array().colwise() * inv_rms->col(0).array();
  return xhat->array().rowwise() * gain.row(0).array();
}

Tensor RmsNormBackwardInput(const Tensor& dn, const Tensor& gain, const Tensor& xhat,
                            const Tensor& inv_rms) {
  const float inv_h = 1.0f / static_cast<float>(dn.cols());
  Tensor dxhat = dn.array().rowwise() * gain.row(0).array();
  Tensor dx(dn.rows(), dn.cols());
  for (Eigen::Index t = 0; t < dn.rows(); ++t) {
    const float mean_dot = dxhat.row(t).dot(xhat.row(t)) * inv_h;
    dx.row(t) = inv_rms(t, 0) * (dxhat.row(t) - mean_dot * xhat.row(t));
  }
  return dx;
}

void RmsNormBackwardWeight(const Tensor& dn, const Tensor& xhat, Tensor* dgain) {
  *dgain += (dn.array() * xhat.array()).colwise().sum().matrix();
}

}  // namespace octopipe::executor
