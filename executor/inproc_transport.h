// InProcHub: a Transport whose ranks are threads of one process — the executor's test fake.
//
// A hub owns per-(src, dst, tag) FIFO queues; Endpoint(rank) hands out the Transport of one
// rank. Send copies the message into the queue (eager; or, with
// InProcOptions::synchronous_send, waits until the receiver has taken it, like Gloo's
// rendezvous sends, so tests can catch an executor that only works with buffered sends).
// Recv blocks until a message with its (src, tag) arrives, the timeout passes
// (kDeadlineExceeded naming the peer), or the peer is aborted (kUnavailable naming it).
//
// Abort(rank) simulates a rank dying: every pending and later Recv from that rank fails with
// kUnavailable (messages it sent before dying are dropped), as does every Send to it and every
// call the aborted rank itself makes; so does every collective of the groups it is a member of
// (NewCollective), for all members. It cannot be undone.
//
// Thread safety: the hub and all endpoints are safe to use from any number of threads.
// Ownership: endpoints share the hub's state, so they may outlive the InProcHub object.
#ifndef OCTOPIPE_EXECUTOR_INPROC_TRANSPORT_H_
#define OCTOPIPE_EXECUTOR_INPROC_TRANSPORT_H_

#include <memory>

#include "executor/transport.h"

namespace octopipe::executor {

struct InProcOptions {
  // How long Recv (and a synchronous Send) waits before kDeadlineExceeded. Short values make
  // failure tests fast; the default matches the real transports.
  double timeout_s = 60;
  // false: Send returns once the message is queued (unbounded buffering). true: Send returns
  // only when the matching Recv has taken the message — the semantics of Gloo and NCCL, which
  // exposes send/recv order mismatches as timeouts instead of hiding them in a buffer.
  bool synchronous_send = false;
};

class InProcHub {
 public:
  explicit InProcHub(int size, InProcOptions options = {});
  ~InProcHub();
  InProcHub(const InProcHub&) = delete;
  InProcHub& operator=(const InProcHub&) = delete;

  int size() const;

  // The transport of `rank` (0 <= rank < size; anything else is a programming error and
  // aborts the process). Calling it twice for one rank returns two handles on the same queues.
  std::unique_ptr<Transport> Endpoint(int rank);

  // Marks `rank` dead; see the top comment. Wakes every blocked call that involves it.
  void Abort(int rank);

  struct State;  // Shared with the endpoints; defined in the .cc.

 private:
  std::shared_ptr<State> state_;
};

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_INPROC_TRANSPORT_H_
