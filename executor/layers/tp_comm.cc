#include "executor/layers/tp_comm.h"

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace octopipe::executor {

void TpComm::Record(absl::Status s) {
  if (status_.ok() && !s.ok()) status_ = std::move(s);
}

void TpComm::AllReduceSum(Tensor* t) {
  if (size() == 1) return;
  Record(group_->AllReduceSum(t->data(), static_cast<size_t>(t->size())));
}

Tensor TpComm::AllGather(const Tensor& piece) {
  const int n = size();
  if (n == 1) return piece;
  const size_t count = static_cast<size_t>(piece.size());
  // AllToAllV sends consecutive pieces of `send`, one per member: the same piece n times.
  std::vector<float> send(count * static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) {
    std::copy(piece.data(), piece.data() + count, send.begin() + static_cast<ptrdiff_t>(j * count));
  }
  const std::vector<size_t> counts(static_cast<size_t>(n), count);
  Tensor out = Tensor::Zero(piece.rows() * n, piece.cols());    // row-major: pieces stack by rows
  out.middleRows(piece.rows() * rank(), piece.rows()) = piece;  // what a failed call leaves
  Record(group_->AllToAllV(send.data(), counts, out.data(), counts));
  return out;
}

}  // namespace octopipe::executor
