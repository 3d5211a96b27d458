// TpComm: the collectives a tensor-parallel layer shard makes (executor/layers/tp_layers.h),
// over a Collective group (executor/collective.h) it does not own.
//
// Layer ops return tensors, not statuses, so TpComm keeps the first failure (status()) and lets
// the caller compute on with whatever the buffers hold (after a failed all-reduce, whatever the
// transport left in the buffer; after a failed all-gather, the member's own piece and zero or
// whatever the transport wrote for the others). The engine checks Layer::comm_status() after
// every op. A group of one member makes no call at all.
//
// Every collective is one call of the group; the members of a group must make the same calls in
// the same order with the same sizes (the layers guarantee it by running the same ops in the same
// order on every member, as the executor's schedule does).
// Not thread-safe, like the layers that own it.
#ifndef OCTOPIPE_EXECUTOR_LAYERS_TP_COMM_H_
#define OCTOPIPE_EXECUTOR_LAYERS_TP_COMM_H_

#include "absl/status/status.h"
#include "executor/collective.h"
#include "executor/tensor.h"

namespace octopipe::executor {

class TpComm {
 public:
  // `group` must outlive this object.
  explicit TpComm(Collective* group) : group_(group) {}

  int rank() const { return group_->rank(); }
  int size() const { return group_->size(); }

  // t = the sum over members of their t (same shape on every member), in place.
  void AllReduceSum(Tensor* t);
  // Every member's `piece` (same shape on every member), stacked by rows in member order:
  // [size * rows, cols]. Built from one AllToAllV that sends the piece to every member.
  Tensor AllGather(const Tensor& piece);

  // OK, or the first failure of any call (kept; later failures are dropped).
  const absl::Status& status() const { return status_; }

 private:
  void Record(absl::Status s);

  Collective* group_;
  absl::Status status_;
};

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_LAYERS_TP_COMM_H_
