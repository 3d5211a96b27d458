// Transport: point-to-point messages between the ranks of one pipeline.
//
// Semantics the executor relies on: Send and Recv are blocking; messages between one (src, dst)
// pair with the same tag are delivered in the order they were sent; a Recv of `bytes` matches a
// Send of exactly `bytes`. Different peers proceed independently (the executor runs one
// receiving thread per peer and one sending thread per peer, so a Transport must allow Send to
// different peers and Recv from different peers concurrently from different threads).
// A peer that dies or a call that waits longer than the transport's timeout returns
// kUnavailable / kDeadlineExceeded naming the peer, so no rank hangs forever.
#ifndef OCTOPIPE_EXECUTOR_TRANSPORT_H_
#define OCTOPIPE_EXECUTOR_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace octopipe::executor {

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual absl::Status Send(int dst, uint32_t tag, const void* data, size_t bytes) = 0;
  virtual absl::Status Recv(int src, uint32_t tag, void* data, size_t bytes) = 0;
  virtual std::string name() const = 0;  // "inproc", "gloo", "nccl"
};

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_TRANSPORT_H_
