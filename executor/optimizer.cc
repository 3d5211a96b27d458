#include "executor/optimizer.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace octopipe::executor {

absl::Status AdamW::Step(const std::vector<Tensor*>& params,
                         const std::vector<const Tensor*>& grads) {
  if (params.size() != grads.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("AdamW: ", params.size(), " parameters but ", grads.size(), " gradients"));
  }
  if (!m_.empty() && m_.size() != params.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AdamW: ", params.size(), " parameters, but the optimizer state holds ", m_.size()));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = *params[i];
    const Tensor& g = *grads[i];
    if (p.rows() != g.rows() || p.cols() != g.cols() ||
        (!m_.empty() && (m_[i].rows() != p.rows() || m_[i].cols() != p.cols()))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "AdamW: parameter ", i, " is ", p.rows(), "x", p.cols(), ", its gradient ", g.rows(), "x",
          g.cols(),
          m_.empty() ? "" : absl::StrCat(", its state ", m_[i].rows(), "x", m_[i].cols())));
    }
  }
  Reserve(params);
  ++step_;
  const float b1 = options_.beta1, b2 = options_.beta2;
  const double t = static_cast<double>(step_);
  const float correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(b1), t));
  const float correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(b2), t));
  const float decay = 1.0f - options_.lr * options_.weight_decay;
  for (size_t i = 0; i < params.size(); ++i) {
    float* p = params[i]->data();
    const float* g = grads[i]->data();
    float* m = m_[i].data();
    float* v = v_[i].data();
    for (Eigen::Index k = 0; k < params[i]->size(); ++k) {
      p[k] *= decay;
      m[k] = b1 * m[k] + (1.0f - b1) * g[k];
      v[k] = b2 * v[k] + (1.0f - b2) * g[k] * g[k];
      const float m_hat = m[k] / correction1;
      const float v_hat = v[k] / correction2;
      p[k] -= options_.lr * m_hat / (std::sqrt(v_hat) + options_.eps);
    }
  }
  return absl::OkStatus();
}

void AdamW::Reserve(const std::vector<Tensor*>& params) {
  if (!m_.empty()) return;
  for (const Tensor* p : params) {
    m_.push_back(Tensor::Zero(p->rows(), p->cols()));
    v_.push_back(Tensor::Zero(p->rows(), p->cols()));
  }
}

absl::Status AdamW::Restore(int64_t step, std::vector<Tensor> m, std::vector<Tensor> v) {
  if (step < 0) return absl::InvalidArgumentError(absl::StrCat("AdamW: step ", step, " < 0"));
  if (m.size() != v.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("AdamW: ", m.size(), " first moments but ", v.size(), " second moments"));
  }
  if ((step > 0) != !m.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("AdamW: step ", step, " with ", m.size(), " moments"));
  }
  for (size_t i = 0; i < m.size(); ++i) {
    if (m[i].rows() != v[i].rows() || m[i].cols() != v[i].cols()) {
      return absl::InvalidArgumentError(absl::StrCat("AdamW: moments of parameter ", i,
                                                     " differ in shape"));
    }
  }
  step_ = step;
  m_ = std::move(m);
  v_ = std::move(v);
  return absl::OkStatus();
}

}  // namespace octopipe::executor
