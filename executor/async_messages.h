// AsyncMessages: started sends and receives (PendingMessage) over any Transport.
//
// Where the transport has native asynchronous messages (Transport::has_async(): Gloo), they are
// used as they are: a started receive is a buffer posted to the transport, which fills it from
// its own event loop, and a send is written from the calling thread when the receiver has posted
// its buffer (queued in the transport otherwise). A message then passes one thread hand-off (the
// receiver's event loop wakes the waiting thread) instead of four.
//
// Otherwise (inproc, NCCL) the blocking Send / Recv run on threads: one sending and one
// receiving thread per peer, each running its peer's messages in start order. They live as long
// as this object (not one iteration) and run at communication priority, released from a rotated
// computing thread's core (executor/thread_priority.h, executor/core_rotation.h). After a failed
// call, the messages still queued to or from that peer fail at once with the first error instead
// of each waiting out the transport's timeout.
//
// Start* is called from one thread at a time; Wait and the destructor of a PendingMessage may
// run on any thread, but each message from one thread.
#ifndef OCTOPIPE_EXECUTOR_ASYNC_MESSAGES_H_
#define OCTOPIPE_EXECUTOR_ASYNC_MESSAGES_H_

#include <memory>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "executor/transport.h"

namespace octopipe::executor {

class AsyncMessages {
 public:
  // `transport` must outlive this object.
  explicit AsyncMessages(Transport* transport);
  // Stops the threads, after any call they are running returns. Every PendingMessage started
  // here must be destroyed first.
  ~AsyncMessages();
  AsyncMessages(const AsyncMessages&) = delete;
  AsyncMessages& operator=(const AsyncMessages&) = delete;

  // The transport's native messages, or a call queued on the peer's thread. `data` must stay
  // valid until the message is waited for or destroyed. Errors: a peer out of range or this
  // rank (kInvalidArgument); a native start that fails (the transport's error).
  absl::StatusOr<std::unique_ptr<PendingMessage>> StartSend(int dst, uint32_t tag,
                                                            const void* data, size_t bytes);
  absl::StatusOr<std::unique_ptr<PendingMessage>> StartRecv(int src, uint32_t tag, void* data,
                                                            size_t bytes);

  // Whether the transport's native messages are used (no threads).
  bool native() const { return native_; }
  // Threads started so far (0 when native).
  int threads() const;

 private:
  class Worker;  // one peer, one direction
  absl::StatusOr<Worker*> WorkerFor(int peer, bool send);
  // Queues a call on the peer's thread for that direction.
  absl::StatusOr<std::unique_ptr<PendingMessage>> Queue(int peer, bool send, uint32_t tag,
                                                        void* data, size_t bytes);

  Transport* const transport_;
  const bool native_;
  std::vector<std::unique_ptr<Worker>> senders_, receivers_;  // by peer, created on first use
};

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_ASYNC_MESSAGES_H_
