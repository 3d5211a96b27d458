// InProcGroup: a Collective whose members are threads of one process — the test fake behind
// InProcHub's NewCollective, and what layer tests use to run tensor- and expert-parallel shards
// on threads.
//
// Every call is a rendezvous of all members: the last member to arrive does the work (sums in
// member order, copies the pieces of an all-to-all) into every member's buffer and wakes the
// others. A call that waits longer than the timeout returns kDeadlineExceeded naming the group
// and the members missing; after Abort() every pending and later call returns kUnavailable.
// Thread-safe; members may be used from different threads (one call at a time per member).
#ifndef OCTOPIPE_EXECUTOR_INPROC_COLLECTIVE_H_
#define OCTOPIPE_EXECUTOR_INPROC_COLLECTIVE_H_

#include <memory>
#include <string>

#include "executor/collective.h"

namespace octopipe::executor {

class InProcGroup {
 public:
  InProcGroup(int size, std::string name, double timeout_s = 60);
  ~InProcGroup();
  InProcGroup(const InProcGroup&) = delete;
  InProcGroup& operator=(const InProcGroup&) = delete;

  int size() const;
  // Member `index` of the group (0 <= index < size; anything else aborts the process). The
  // members share the group's state, so they may outlive the InProcGroup object.
  std::unique_ptr<Collective> Member(int index);
  // Fails every pending and later call (a member died).
  void Abort();

  struct State;  // defined in the .cc

 private:
  std::shared_ptr<State> state_;
};

// A group of one (every collective is the identity), for degree-1 groups on any transport.
std::unique_ptr<Collective> SoloCollective(const std::string& name);

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_INPROC_COLLECTIVE_H_
