// AdamW (decoupled weight decay, Loshchilov & Hutter; the PyTorch torch.optim.AdamW update):
//   p <- p - lr * wd * p
//   m <- b1 m + (1 - b1) g,   v <- b2 v + (1 - b2) g^2
//   p <- p - lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
// t counts Step calls from 1. Element by element in a fixed order, bias corrections in double:
// deterministic, so every rank stepping the same parameters with the same gradients gets
// bit-identical results.
// Ownership: the optimizer owns its moments; it neither owns nor keeps the tensors passed to
// Step. The first Step fixes the number and shapes of the parameters.
// Not thread-safe.
#ifndef OCTOPIPE_EXECUTOR_OPTIMIZER_H_
#define OCTOPIPE_EXECUTOR_OPTIMIZER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "executor/tensor.h"

namespace octopipe::executor {

struct AdamWOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  // Decoupled: shrinks every parameter by lr * weight_decay per step, gains included.
  float weight_decay = 0.0f;
};

class AdamW {
 public:
  explicit AdamW(const AdamWOptions& options) : options_(options) {}

  // One update of `params` by `grads` (same length, same shapes, index by index).
  // kInvalidArgument naming the index if the lengths or a shape differ, from each other or from
  // the first call; nothing is changed then.
  absl::Status Step(const std::vector<Tensor*>& params, const std::vector<const Tensor*>& grads);

  // Allocates the zero moments Step would allocate on its first call (nothing when they exist).
  // Call it before the first iteration: allocated by the first Step, the moments take heap that
  // the first iteration's activations had freed, and the second iteration's activations then
  // fault in fresh pages (measured: ~1,500 page faults, the second iteration 15-30% slower).
  // The updates are the same either way.
  void Reserve(const std::vector<Tensor*>& params);

  int64_t step() const { return step_; }
  const AdamWOptions& options() const { return options_; }
  // Moments by parameter index (empty before the first Step or Reserve), e.g. for checkpoints.
  const std::vector<Tensor>& first_moments() const { return m_; }
  const std::vector<Tensor>& second_moments() const { return v_; }

  // Replaces the state with one saved earlier (a checkpoint): `step` Step calls taken, and
  // their moments by parameter index (both empty when step is 0). kInvalidArgument when step
  // is negative, m and v differ in length or shape, or step > 0 comes without moments; nothing
  // is changed then.
  absl::Status Restore(int64_t step, std::vector<Tensor> m, std::vector<Tensor> v);

 private:
  AdamWOptions options_;
  int64_t step_ = 0;
  std::vector<Tensor> m_;
  std::vector<Tensor> v_;
};

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_OPTIMIZER_H_
