// Tensor types of the executor's reference model: fp32, row-major, one row per token.
// A micro-batch of b sequences of s tokens is a [b*s, width] matrix.
#ifndef OCTOPIPE_EXECUTOR_TENSOR_H_
#define OCTOPIPE_EXECUTOR_TENSOR_H_

#include <cstdint>
#include <vector>

#include <eigen3/Eigen/Dense>

namespace octopipe::executor {

using Tensor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vector = Eigen::Matrix<float, 1, Eigen::Dynamic, Eigen::RowMajor>;

// One micro-batch of token ids and next-token targets, b sequences of s tokens each, row-major
// (sequence-major): position i of sequence j is element j*s + i.
struct MicroBatch {
  int batch = 1;
  int seq_len = 0;
  std::vector<int32_t> tokens;
  std::vector<int32_t> targets;
};

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_TENSOR_H_
