// NcclTransport: the Transport over NCCL point-to-point (ncclSend/ncclRecv) — the GPU path.
//
// The executor works on host memory, so each call stages through a device buffer: Send copies
// host -> device and ncclSends; Recv ncclRecvs and copies device -> host. Correctness over
// speed: every call waits for its own completion.
//
// Availability: NCCL needs a CUDA device. Create() checks first and, on a host without one
// (cudaGetDeviceCount fails — error 35 "insufficient driver" on our CI machines — or finds 0
// devices), returns kFailedPrecondition naming the CUDA error. Each rank needs its own GPU
// (NCCL refuses two ranks of one communicator on the same device).
//
// Design:
//  * One 2-rank communicator per ordered pair (src -> dst), each with its own stream and
//    staging buffer, guarded by its own mutex. A communicator must not be used by two threads
//    at once, and one shared communicator would serialize every peer behind the slowest
//    rendezvous (and deadlock two ranks that Send to each other at the same time); per-
//    direction communicators let the executor's per-peer sending and receiving threads run
//    independently, exactly as with Gloo.
//  * Rank 0 generates all size*(size-1) ncclUniqueIds and publishes them as one blob under the
//    key "<prefix>.nccl_ids" — in the run's TCP store when `store_address` is set (no shared
//    file system across nodes), else as a file in `store_dir` (written to a temporary name,
//    then renamed) — and the others wait for it (executor/blob_rendezvous.h). Communicators are created in one global order, so creation cannot deadlock.
//  * NCCL has no tags: messages of one direction arrive in issue order. Each message carries a
//    16-byte header (tag, size) ahead of its payload, and a Recv that meets another tag's
//    message first keeps it in a host-side stash for a later Recv of that tag — so (src, dst,
//    tag) streams are FIFO and independent, as the Transport contract says.
//  * Collectives (NewCollective: the DP, TP and EP groups of a layout): member 0 of the group
//    makes an ncclUniqueId and sends it to the other members over this transport's links (on
//    a reserved tag, kNcclGroupIdTag), and every member joins one communicator of the group's
//    size with its own stream and staging buffer. AllReduceSum is ncclAllReduce (sum, float;
//    every member ends with the same bits: NCCL computes each element once and broadcasts it);
//    AllToAllV is an ncclSend/ncclRecv per member inside ncclGroupStart/End. Both stage through
//    the device like Send and Recv, and poll with the same deadline; a failure aborts the
//    group's communicator (later calls are kUnavailable). A group of one member does nothing.
//    Not yet run on a GPU by the tests here (the CI machines have none): the code paths are
//    those of the point-to-point links, which are.
//  * Communicators are non-blocking and every wait polls with a deadline: a call that exceeds
//    `timeout_s` returns kDeadlineExceeded, an NCCL/CUDA failure returns kUnavailable, both
//    naming the peer. Either aborts that direction's communicator (an in-flight NCCL
//    operation cannot be cancelled otherwise); later calls in that direction are kUnavailable.
//
// Thread safety: Send to different peers and Recv from different peers may run concurrently;
// calls in the same direction are serialized. Each call makes the configured device current on
// its thread. Do not fork() after a process has used CUDA.
#ifndef OCTOPIPE_EXECUTOR_NCCL_TRANSPORT_H_
#define OCTOPIPE_EXECUTOR_NCCL_TRANSPORT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/clock.h"
#include "executor/transport.h"

namespace octopipe::executor {

// The number of CUDA devices, or kFailedPrecondition saying why the NCCL transport cannot
// run here (the CUDA error's number, name and text, or "0 devices").
absl::StatusOr<int> CudaDeviceCount();

// True when CudaDeviceCount() succeeds with at least one device.
bool GpuAvailable();

struct NcclOptions {
  int rank = 0;
  int size = 1;
  // Where rank 0 publishes the ncclUniqueIds (executor/blob_rendezvous.h): "HOST:PORT" of a
  // TcpStoreServer (no shared file system needed; takes precedence), or a directory shared by
  // all ranks (created if missing).
  std::string store_address;
  std::string store_dir;
  // Per-run namespace: the ids are under the key "<prefix>.nccl_ids" (in store_dir: that file).
  // Must be fresh for each run; rank 0 refuses to overwrite an existing file
  // (kFailedPrecondition).
  std::string prefix;
  // CUDA device of this rank; -1 picks rank % device count (one process per GPU on a host).
  int device = -1;
  // Limit for creating the communicators and for each Send/Recv.
  double timeout_s = 60;
  // The clock those limits are kept on (the waits poll and re-read it). Not owned; null:
  // RealClock::Default().
  const Clock* clock = nullptr;
};

// The tag on which a collective group's member 0 sends the group's ncclUniqueId to the others
// (below the trainer's control tags, far above the engine's).
inline constexpr uint32_t kNcclGroupIdTag = 0xFFFFFC00u;

class NcclTransport final : public Transport {
 public:
  static absl::StatusOr<std::unique_ptr<Transport>> Create(const NcclOptions& options);

  ~NcclTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }
  absl::Status Send(int dst, uint32_t tag, const void* data, size_t bytes) override;
  absl::Status Recv(int src, uint32_t tag, void* data, size_t bytes) override;
  // A group of `ranks` with its own NCCL communicator (see the top comment).
  absl::StatusOr<std::unique_ptr<Collective>> NewCollective(const std::vector<int>& ranks,
                                                            const std::string& name) override;

 private:
  struct Link;   // One direction's communicator, stream, buffer and stash; in the .cc.
  class Group;   // A collective group's communicator; in the .cc.

  NcclTransport(int rank, int size, int device, absl::Duration timeout, const Clock* clock);

  const int rank_;
  const int size_;
  const int device_;
  const absl::Duration timeout_;
  const Clock* const clock_;  // never null
  // send_[p]: this rank -> p; recv_[p]: p -> this rank; null at this rank's own index.
  std::vector<std::unique_ptr<Link>> send_;
  std::vector<std::unique_ptr<Link>> recv_;
};

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_NCCL_TRANSPORT_H_
