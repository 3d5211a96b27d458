// Collective: a group of ranks that reduce and exchange tensors together — the data-parallel
// gradient all-reduce, the tensor-parallel all-reduces inside a layer, and the expert-parallel
// token all-to-all.
//
// Semantics: every member calls each collective of the group in the same order with matching
// arguments (a call blocks until every member has made it); a member that dies or a call that
// waits longer than the transport's timeout returns kUnavailable / kDeadlineExceeded naming the
// group, so no member hangs forever. AllReduceSum leaves the same bits on every member (the sum
// is computed once, in a fixed order, and copied), so replicas that step the same optimizer on
// it stay bit-identical.
//
// A group is made with Transport::NewCollective, itself collective over the group's members:
// every member calls it with the same ranks and name. Ranks that create several groups must
// create them in one order that every rank agrees on (e.g. sorted by their member lists), as a
// member blocks in the creation until the others arrive.
#ifndef OCTOPIPE_EXECUTOR_COLLECTIVE_H_
#define OCTOPIPE_EXECUTOR_COLLECTIVE_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace octopipe::executor {

class Collective {
 public:
  virtual ~Collective() = default;
  // This member's index in the group (members are in the order of the ranks the group was made
  // with) and the group's size.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The group's name, for errors ("dp/layer-3", "tp/stage-1").
  virtual const std::string& name() const = 0;

  // data[i] = sum over members of their data[i], for i < count, in place.
  virtual absl::Status AllReduceSum(float* data, size_t count) = 0;

  // Member i sends send_counts[j] floats to member j, the pieces consecutive in `send` in member
  // order, and receives recv_counts[j] floats from member j into `recv`, consecutive in member
  // order. Member j's send_counts[i] must equal member i's recv_counts[j]. Counts may be 0.
  virtual absl::Status AllToAllV(const float* send, const std::vector<size_t>& send_counts,
                                 float* recv, const std::vector<size_t>& recv_counts) = 0;
};

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_COLLECTIVE_H_
