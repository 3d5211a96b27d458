// RMSNorm with a learned gain, row by row: n = xhat * g, xhat = x * r, r = 1/sqrt(mean(x^2) + eps).
// Split the same way as the layers: the input gradient needs (xhat, r, g); the gain gradient
// needs only (dn, xhat), so B keeps those two for W.
#ifndef OCTOPIPE_EXECUTOR_LAYERS_RMSNORM_H_
#define OCTOPIPE_EXECUTOR_LAYERS_RMSNORM_H_

#include "executor/tensor.h"

namespace octopipe::executor {

inline constexpr float kRmsNormEps = 1e-5f;

// x [T, H], gain [1, H] -> n [T, H]; writes xhat [T, H] and inv_rms [T, 1] for the backward.
Tensor RmsNormForward(const Tensor& x, const Tensor& gain, Tensor* xhat, Tensor* inv_rms);

// dx = r * (dxhat - xhat * mean(dxhat * xhat)), dxhat = dn * g, per row.
Tensor RmsNormBackwardInput(const Tensor& dn, const Tensor& gain, const Tensor& xhat,
                            const Tensor& inv_rms);

// dgain += sum over rows of dn * xhat.
void RmsNormBackwardWeight(const Tensor& dn, const Tensor& xhat, Tensor* dgain);

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_LAYERS_RMSNORM_H_
