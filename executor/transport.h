// Transport: point-to-point messages between the ranks of one pipeline.
//
// Semantics the executor relies on: Send and Recv are blocking; messages between one (src, dst)
// pair with the same tag are delivered in the order they were sent; a Recv of `bytes` matches a
// Send of exactly `bytes`. Different peers proceed independently: a Transport must allow Send
// to different peers and Recv from different peers concurrently from different threads
// (AsyncMessages runs them on one sending and one receiving thread per peer).
//
// Asynchronous messages: a transport that has them natively (has_async(): Gloo's unbound
// buffers) starts a send or a receive and returns at once (StartSend / StartRecv), and the
// caller waits for it later (PendingMessage::Wait). The executor posts every receive of an
// iteration up front and sends from its computing thread, so a message costs no thread
// hand-off of its own (executor/async_messages.h gives the same interface over any transport).
// A peer that dies or a call that waits longer than the transport's timeout returns
// kUnavailable / kDeadlineExceeded naming the peer, so no rank hangs forever.
#ifndef OCTOPIPE_EXECUTOR_TRANSPORT_H_
#define OCTOPIPE_EXECUTOR_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "executor/collective.h"

namespace octopipe::executor {

// A message started asynchronously and not yet waited for.
class PendingMessage {
 public:
  virtual ~PendingMessage() = default;
  // Blocks until the message is done — a send's buffer may be reused, a receive's buffer holds
  // the message — or fails (after the transport's timeout, or at once when the link broke);
  // errors name the peer and the tag. Call at most once. Destroying a message that was not
  // waited for abandons it: its buffer is not touched after the destructor returns, but the
  // link is then out of step (an error path: the run ends).
  virtual absl::Status Wait() = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual absl::Status Send(int dst, uint32_t tag, const void* data, size_t bytes) = 0;
  virtual absl::Status Recv(int src, uint32_t tag, void* data, size_t bytes) = 0;
  virtual std::string name() const = 0;  // "inproc", "gloo", "nccl"

  // Whether StartSend / StartRecv are native (see the top comment). The buffer must stay valid
  // until the message is waited for or destroyed; messages of one (src, dst, tag) match in start
  // order, as with Send / Recv, and a started receive never keeps a send to another peer or with
  // another tag from proceeding. The defaults are kUnimplemented (use AsyncMessages).
  virtual bool has_async() const { return false; }
  virtual absl::StatusOr<std::unique_ptr<PendingMessage>> StartSend(int /*dst*/, uint32_t /*tag*/,
                                                                    const void* /*data*/,
                                                                    size_t /*bytes*/) {
    return absl::UnimplementedError(name() + " has no asynchronous send");
  }
  virtual absl::StatusOr<std::unique_ptr<PendingMessage>> StartRecv(int /*src*/, uint32_t /*tag*/,
                                                                    void* /*data*/,
                                                                    size_t /*bytes*/) {
    return absl::UnimplementedError(name() + " has no asynchronous receive");
  }

  // A collective group over `ranks` (distinct, in [0, size()), this rank among them; the group's
  // members are in this order), called by every member with the same ranks and `name` (see
  // executor/collective.h for the order in which several groups must be made). The group lives
  // independently of this transport's point-to-point messages: both may be used at once from
  // different threads.
  virtual absl::StatusOr<std::unique_ptr<Collective>> NewCollective(
      const std::vector<int>& /*ranks*/, const std::string& /*name*/) {
    return absl::UnimplementedError(name() + " has no collectives");
  }
};

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_TRANSPORT_H_
