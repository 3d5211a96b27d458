#include "executor/nccl_transport.h"

#include "executor/blob_rendezvous.h"
#include "executor/inproc_collective.h"

#ifdef OCTOPIPE_NO_CUDA
#include "absl/strings/str_cat.h"

// Built without a CUDA installation (see tools/cuda.bzl): the transport exists and says why
// it cannot run.
namespace octopipe::executor {

absl::StatusOr<int> CudaDeviceCount() {
  return absl::FailedPreconditionError(
      "NCCL transport needs a GPU: cudaGetDeviceCount is not available, this build has no CUDA "
      "(no /usr/local/cuda with NCCL when it was built)");
}

bool GpuAvailable() { return false; }

absl::StatusOr<std::unique_ptr<Transport>> NcclTransport::Create(const NcclOptions& options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(absl::StrCat("rank must be in [0, size), got rank ",
                                                   options.rank, " of size ", options.size));
  }
  return CudaDeviceCount().status();
}

}  // namespace octopipe::executor
#else

#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <system_error>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/status_macros.h"

namespace octopipe::executor {
namespace {

// The header in front of every payload; NCCL itself has no tags.
struct Header {
  uint32_t magic;
  uint32_t tag;
  uint64_t bytes;
};
static_assert(sizeof(Header) == 16, "Header is sent as 16 raw bytes");

// A deadline on the transport's clock (NcclOptions::clock). Every wait below polls, so it
// re-reads the clock on each pass.
struct Deadline {
  const Clock* clock;
  double at_s;
  bool Passed() const { return clock->NowSeconds() > at_s; }
};

Deadline DeadlineAfter(const Clock* clock, absl::Duration timeout) {
  return Deadline{clock, clock->NowSeconds() + absl::ToDoubleSeconds(timeout)};
}
constexpr uint32_t kHeaderMagic = 0x5054434f;  // "OCTP"

// Completion is polled (a non-blocking communicator cannot be waited on otherwise); 20 us is
// far below the latency of one NCCL round trip and keeps one core from spinning flat out.
constexpr absl::Duration kPollInterval = absl::Microseconds(20);
constexpr size_t kInitialBufferBytes = 1 << 20;
constexpr char kIdFileMagic[8] = {'O', 'C', 'T', 'N', 'C', 'C', 'L', '1'};

std::string CudaErrorText(cudaError_t e) {
  return absl::StrCat(static_cast<int>(e), " (", cudaGetErrorName(e), ": ", cudaGetErrorString(e),
                      ")");
}

std::string NcclErrorText(ncclResult_t r, ncclComm_t comm) {
  std::string text = absl::StrCat(static_cast<int>(r), " (", ncclGetErrorString(r), ")");
  const char* last = comm != nullptr ? ncclGetLastError(comm) : nullptr;
  if (last != nullptr && *last != '\0') absl::StrAppend(&text, ": ", last);
  return text;
}

absl::Status CheckOptions(const NcclOptions& o) {
  if (o.size < 1) return absl::InvalidArgumentError(absl::StrCat("nccl: size ", o.size, " < 1"));
  if (o.rank < 0 || o.rank >= o.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl: rank ", o.rank, " is not in [0, size ", o.size, ")"));
  }
  if (!(o.timeout_s > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("nccl: timeout_s ", o.timeout_s, " <= 0"));
  }
  if (o.size > 1 && o.store_dir.empty() && o.store_address.empty()) {
    return absl::InvalidArgumentError(
        "nccl: store_dir and store_address are empty; ranks need a shared directory or a TCP "
        "store");
  }
  if (o.size > 1 && o.prefix.empty()) {
    return absl::InvalidArgumentError("nccl: prefix is empty; give every run its own namespace");
  }
  return absl::OkStatus();
}

// Rank 0 publishes ids[src * size + dst] for every ordered pair (diagonal unused) as one blob
// (executor/blob_rendezvous.h: the TCP store when there is one, else a file in store_dir); the
// other ranks wait for it. Returns the ids.
absl::StatusOr<std::vector<ncclUniqueId>> ExchangeIds(const NcclOptions& o, Deadline deadline) {
  const size_t n = static_cast<size_t>(o.size) * o.size;
  const size_t blob_bytes = sizeof(kIdFileMagic) + sizeof(int32_t) + n * sizeof(ncclUniqueId);
  std::vector<ncclUniqueId> ids(n);
  BlobRendezvous r;
  r.store_address = o.store_address;
  r.store_dir = o.store_dir;
  r.key = absl::StrCat(o.prefix, ".nccl_ids");
  r.timeout_s = std::max(0.0, deadline.at_s - deadline.clock->NowSeconds());
  r.clock = deadline.clock;
  const std::string where = o.store_address.empty()
                                ? absl::StrCat("'", o.store_dir, "/", r.key, "'")
                                : absl::StrCat("'", r.key, "' in the store at ", o.store_address);
  if (o.rank == 0) {
    for (int s = 0; s < o.size; ++s) {
      for (int d = 0; d < o.size; ++d) {
        if (s == d) continue;
        if (ncclResult_t res = ncclGetUniqueId(&ids[s * o.size + d]); res != ncclSuccess) {
          return absl::UnavailableError(
              absl::StrCat("nccl: ncclGetUniqueId failed: ", NcclErrorText(res, nullptr)));
        }
      }
    }
    std::string blob(blob_bytes, '\0');
    const int32_t size = o.size;
    std::memcpy(blob.data(), kIdFileMagic, sizeof(kIdFileMagic));
    std::memcpy(blob.data() + sizeof(kIdFileMagic), &size, sizeof(size));
    std::memcpy(blob.data() + sizeof(kIdFileMagic) + sizeof(size), ids.data(),
                n * sizeof(ncclUniqueId));
    if (absl::Status s = PublishBlob(r, blob); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("nccl: ", s.message()));
    }
    return ids;
  }
  absl::StatusOr<std::string> bytes = AwaitBlob(r, o.rank);
  if (!bytes.ok()) {
    return absl::Status(bytes.status().code(),
                        absl::StrCat("nccl rank ", o.rank, ": rank 0's ids (", where,
                                     "): ", bytes.status().message()));
  }
  int32_t size = -1;
  if (bytes->size() == blob_bytes) std::memcpy(&size, bytes->data() + sizeof(kIdFileMagic), 4);
  if (bytes->size() != blob_bytes || std::memcmp(bytes->data(), kIdFileMagic, 8) != 0 ||
      size != o.size) {
    return absl::FailedPreconditionError(
        absl::StrCat("nccl rank ", o.rank, ": ", where, " is not an id blob for ", o.size,
                     " ranks"));
  }
  std::memcpy(ids.data(), bytes->data() + sizeof(kIdFileMagic) + 4, n * sizeof(ncclUniqueId));
  return ids;
}

}  // namespace

absl::StatusOr<int> CudaDeviceCount() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // Clear the sticky error so later CUDA calls report their own.
    return absl::FailedPreconditionError(
        absl::StrCat("NCCL transport needs a GPU: cudaGetDeviceCount returned ", CudaErrorText(e)));
  }
  if (count <= 0) {
    return absl::FailedPreconditionError(
        "NCCL transport needs a GPU: cudaGetDeviceCount found 0 devices");
  }
  return count;
}

bool GpuAvailable() { return CudaDeviceCount().ok(); }

// One direction (sender -> receiver) between this rank and `peer`. All fields but the
// constants are guarded by `mu`; every helper below is called with it held.
struct NcclTransport::Link {
  int peer = -1;          // Global rank at the other end.
  int peer_in_comm = -1;  // The peer's rank in `comm` (the sender is 0, the receiver 1).
  absl::Mutex mu;
  ncclComm_t comm = nullptr;  // Null once aborted.
  cudaStream_t stream = nullptr;
  char* buffer = nullptr;  // Device staging buffer; header and payload both start at 0.
  size_t capacity = 0;
  absl::Status broken;  // Set once; later calls fail with it.
  // Receiving side only: messages that arrived ahead of a Recv for their tag.
  std::map<uint32_t, std::deque<std::vector<char>>> stash;

  ~Link() {
    if (comm != nullptr) ncclCommAbort(comm);
    if (buffer != nullptr) cudaFree(buffer);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  // Records `status`, aborts the communicator (the only way to cancel in-flight NCCL work and
  // free the peer's matching operation from waiting forever) and returns `status`.
  absl::Status Break(absl::Status status) {
    if (comm != nullptr) {
      ncclCommAbort(comm);
      comm = nullptr;
    }
    if (broken.ok()) broken = status;
    return status;
  }

  // Non-blocking NCCL: after a call returns ncclInProgress, wait until the communicator is
  // idle again before the next call.
  absl::Status WaitComm(Deadline deadline, const std::string& what) {
    for (;;) {
      ncclResult_t state = ncclInProgress;
      if (ncclResult_t r = ncclCommGetAsyncError(comm, &state); r != ncclSuccess) state = r;
      if (state == ncclSuccess) return absl::OkStatus();
      if (state != ncclInProgress) {
        return Break(absl::UnavailableError(
            absl::StrCat(what, ": NCCL error ", NcclErrorText(state, comm))));
      }
      if (deadline.Passed()) {
        return Break(absl::DeadlineExceededError(
            absl::StrCat(what, ": NCCL did not finish in time; the link is aborted")));
      }
      absl::SleepFor(kPollInterval);
    }
  }

  absl::Status CheckNccl(ncclResult_t r, Deadline deadline, const std::string& what) {
    if (r == ncclSuccess) return absl::OkStatus();
    if (r == ncclInProgress) return WaitComm(deadline, what);
    return Break(absl::UnavailableError(absl::StrCat(what, ": ", NcclErrorText(r, comm))));
  }

  absl::Status CheckCuda(cudaError_t e, const std::string& what) {
    if (e == cudaSuccess) return absl::OkStatus();
    cudaGetLastError();
    return Break(absl::UnavailableError(absl::StrCat(what, ": CUDA error ", CudaErrorText(e))));
  }

  // Waits for everything queued on the stream, watching NCCL for asynchronous errors.
  absl::Status WaitStream(Deadline deadline, const std::string& what) {
    for (;;) {
      const cudaError_t e = cudaStreamQuery(stream);
      if (e == cudaSuccess) return absl::OkStatus();
      if (e != cudaErrorNotReady) return CheckCuda(e, what);
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(comm, &state) == ncclSuccess && state != ncclSuccess &&
          state != ncclInProgress) {
        return Break(absl::UnavailableError(
            absl::StrCat(what, ": NCCL error ", NcclErrorText(state, comm))));
      }
      if (deadline.Passed()) {
        return Break(absl::DeadlineExceededError(absl::StrCat(
            what, ": rank ", peer, " did not complete the transfer in time; the link is aborted")));
      }
      absl::SleepFor(kPollInterval);
    }
  }

  // Grows the staging buffer to at least `bytes`. The stream is idle between calls.
  absl::Status Reserve(size_t bytes, const std::string& what) {
    if (bytes <= capacity) return absl::OkStatus();
    const size_t want = std::max({bytes, 2 * capacity, kInitialBufferBytes});
    if (buffer != nullptr) cudaFree(buffer);
    buffer = nullptr;
    capacity = 0;
    if (cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&buffer), want); e != cudaSuccess) {
      cudaGetLastError();
      buffer = nullptr;
      return absl::ResourceExhaustedError(
          absl::StrCat(what, ": cudaMalloc(", want, ") failed: ", CudaErrorText(e)));
    }
    capacity = want;
    return absl::OkStatus();
  }

  // Copies `bytes` between host and the staging buffer and waits for it.
  absl::Status Copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                    Deadline deadline, const std::string& what) {
    if (bytes == 0) return absl::OkStatus();
    RETURN_IF_ERROR(CheckCuda(cudaMemcpyAsync(dst, src, bytes, kind, stream), what));
    return WaitStream(deadline, what);
  }

  // Hands the oldest stashed message of `tag` to a Recv of `bytes`, if there is one.
  // Returns true if a message was consumed (or rejected for its size into *status).
  bool TakeStashed(uint32_t tag, void* data, size_t bytes, const std::string& what,
                   absl::Status* status) {
    auto it = stash.find(tag);
    if (it == stash.end() || it->second.empty()) return false;
    std::vector<char>& front = it->second.front();
    if (front.size() != bytes) {
      *status = absl::InvalidArgumentError(
          absl::StrCat(what, ": the next message of this tag has ", front.size(), " bytes"));
      return true;
    }
    if (bytes > 0) std::memcpy(data, front.data(), bytes);
    it->second.pop_front();
    *status = absl::OkStatus();
    return true;
  }
};

NcclTransport::NcclTransport(int rank, int size, int device, absl::Duration timeout,
                             const Clock* clock)
    : rank_(rank), size_(size), device_(device), timeout_(timeout), clock_(clock) {}

absl::StatusOr<std::unique_ptr<Transport>> NcclTransport::Create(const NcclOptions& options) {
  RETURN_IF_ERROR(CheckOptions(options));
  ASSIGN_OR_RETURN(const int device_count, CudaDeviceCount());
  const int device = options.device >= 0 ? options.device : options.rank % device_count;
  if (device >= device_count) {
    return absl::InvalidArgumentError(absl::StrCat("nccl: device ", device, " but this host has ",
                                                   device_count, " CUDA devices"));
  }
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("nccl: cudaSetDevice(", device, ") failed: ", CudaErrorText(e)));
  }
  const absl::Duration timeout = absl::Seconds(options.timeout_s);
  std::unique_ptr<NcclTransport> t(new NcclTransport(options.rank, options.size, device, timeout,
                                                     &ClockOrReal(options.clock)));
  const Deadline deadline = DeadlineAfter(t->clock_, timeout);
  t->send_.resize(options.size);
  t->recv_.resize(options.size);
  if (options.size == 1) return std::unique_ptr<Transport>(std::move(t));

  ASSIGN_OR_RETURN(std::vector<ncclUniqueId> ids, ExchangeIds(options, deadline));
  // One global order over the directions, so the blocking part of communicator creation
  // (both ends must join) cannot deadlock.
  for (int s = 0; s < options.size; ++s) {
    for (int d = 0; d < options.size; ++d) {
      if (s == d || (options.rank != s && options.rank != d)) continue;
      const bool sending = options.rank == s;
      auto link = std::make_unique<Link>();
      link->peer = sending ? d : s;
      link->peer_in_comm = sending ? 1 : 0;
      const std::string what = absl::StrCat("nccl rank ", options.rank, ": creating the link ", s,
                                            " -> ", d, " on device ", device);
      absl::MutexLock lock(&link->mu);
      if (cudaError_t e = cudaStreamCreateWithFlags(&link->stream, cudaStreamNonBlocking);
          e != cudaSuccess) {
        cudaGetLastError();
        link->stream = nullptr;
        return absl::UnavailableError(absl::StrCat(what, ": ", CudaErrorText(e)));
      }
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      const ncclResult_t r = ncclCommInitRankConfig(&link->comm, 2, ids[s * options.size + d],
                                                    sending ? 0 : 1, &config);
      if (r != ncclSuccess && r != ncclInProgress) {
        std::string text = NcclErrorText(r, link->comm);
        if (link->comm != nullptr) ncclCommAbort(link->comm);
        link->comm = nullptr;
        return absl::UnavailableError(absl::StrCat(what, ": ncclCommInitRankConfig: ", text));
      }
      RETURN_IF_ERROR(link->WaitComm(deadline, what));
      RETURN_IF_ERROR(link->Reserve(kInitialBufferBytes, what));
      const int peer = link->peer;
      (sending ? t->send_ : t->recv_)[peer] = std::move(link);
    }
  }
  return std::unique_ptr<Transport>(std::move(t));
}

NcclTransport::~NcclTransport() {
  cudaSetDevice(device_);
  // Finalize every healthy communicator first and only then wait, so that peers finalizing in
  // another order never wait on each other; whatever does not finish in time is aborted.
  std::vector<Link*> links;
  for (auto* side : {&send_, &recv_}) {
    for (std::unique_ptr<Link>& l : *side) {
      if (l != nullptr) links.push_back(l.get());
    }
  }
  const Deadline deadline = DeadlineAfter(clock_, timeout_);
  for (Link* l : links) {
    absl::MutexLock lock(&l->mu);
    if (l->comm != nullptr && ncclCommFinalize(l->comm) != ncclSuccess) {
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(l->comm, &state);
      if (state != ncclInProgress) l->Break(absl::CancelledError("finalize failed")).IgnoreError();
    }
  }
  for (Link* l : links) {
    absl::MutexLock lock(&l->mu);
    if (l->comm == nullptr) continue;
    if (l->WaitComm(deadline, "finalize").ok()) {
      ncclCommDestroy(l->comm);
      l->comm = nullptr;
    }
    // Otherwise WaitComm aborted it. ~Link frees the buffer and the stream.
  }
}

absl::Status NcclTransport::Send(int dst, uint32_t tag, const void* data, size_t bytes) {
  if (dst < 0 || dst >= size_ || dst == rank_) {
    return absl::InvalidArgumentError(absl::StrCat("nccl Send to rank ", dst,
                                                   ": peer must be in [0, ", size_,
                                                   ") and differ from this rank ", rank_));
  }
  Link& l = *send_[dst];
  const std::string what = absl::StrCat("nccl rank ", rank_, " Send to rank ", dst, " (tag ", tag,
                                        ", ", bytes, " bytes)");
  const Deadline deadline = DeadlineAfter(clock_, timeout_);
  absl::MutexLock lock(&l.mu);
  if (!l.broken.ok()) {
    return absl::UnavailableError(
        absl::StrCat(what, ": the link to rank ", dst,
                     " is closed after an earlier error: ", l.broken.message()));
  }
  RETURN_IF_ERROR(l.CheckCuda(cudaSetDevice(device_), what));
  RETURN_IF_ERROR(l.Reserve(std::max(sizeof(Header), bytes), what));
  const Header header{kHeaderMagic, tag, bytes};
  RETURN_IF_ERROR(
      l.Copy(l.buffer, &header, sizeof(header), cudaMemcpyHostToDevice, deadline, what));
  RETURN_IF_ERROR(
      l.CheckNccl(ncclSend(l.buffer, sizeof(header), ncclUint8, l.peer_in_comm, l.comm, l.stream),
                  deadline, what));
  // The header must be on the wire before the buffer is reused for the payload.
  RETURN_IF_ERROR(l.WaitStream(deadline, what));
  if (bytes == 0) return absl::OkStatus();
  RETURN_IF_ERROR(l.Copy(l.buffer, data, bytes, cudaMemcpyHostToDevice, deadline, what));
  RETURN_IF_ERROR(l.CheckNccl(
      ncclSend(l.buffer, bytes, ncclUint8, l.peer_in_comm, l.comm, l.stream), deadline, what));
  return l.WaitStream(deadline, what);
}

absl::Status NcclTransport::Recv(int src, uint32_t tag, void* data, size_t bytes) {
  if (src < 0 || src >= size_ || src == rank_) {
    return absl::InvalidArgumentError(absl::StrCat("nccl Recv from rank ", src,
                                                   ": peer must be in [0, ", size_,
                                                   ") and differ from this rank ", rank_));
  }
  Link& l = *recv_[src];
  const std::string what = absl::StrCat("nccl rank ", rank_, " Recv from rank ", src, " (tag ", tag,
                                        ", ", bytes, " bytes)");
  const Deadline deadline = DeadlineAfter(clock_, timeout_);
  absl::MutexLock lock(&l.mu);
  absl::Status stashed;
  if (l.TakeStashed(tag, data, bytes, what, &stashed)) return stashed;
  if (!l.broken.ok()) {
    return absl::UnavailableError(
        absl::StrCat(what, ": the link from rank ", src,
                     " is closed after an earlier error: ", l.broken.message()));
  }
  RETURN_IF_ERROR(l.CheckCuda(cudaSetDevice(device_), what));
  // Take messages in arrival order until one of `tag` arrives; others go to the stash.
  for (;;) {
    Header header{};
    RETURN_IF_ERROR(
        l.CheckNccl(ncclRecv(l.buffer, sizeof(header), ncclUint8, l.peer_in_comm, l.comm, l.stream),
                    deadline, what));
    RETURN_IF_ERROR(l.WaitStream(deadline, what));
    RETURN_IF_ERROR(
        l.Copy(&header, l.buffer, sizeof(header), cudaMemcpyDeviceToHost, deadline, what));
    if (header.magic != kHeaderMagic) {
      return l.Break(absl::DataLossError(absl::StrCat(what, ": corrupt message header")));
    }
    if (absl::Status s = l.Reserve(header.bytes, what); !s.ok()) {
      return l.Break(s);  // The payload is on its way; without it the link is out of step.
    }
    if (header.bytes > 0) {
      RETURN_IF_ERROR(
          l.CheckNccl(ncclRecv(l.buffer, header.bytes, ncclUint8, l.peer_in_comm, l.comm, l.stream),
                      deadline, what));
      RETURN_IF_ERROR(l.WaitStream(deadline, what));
    }
    if (header.tag == tag && header.bytes == bytes) {
      return l.Copy(data, l.buffer, bytes, cudaMemcpyDeviceToHost, deadline, what);
    }
    std::vector<char> message(header.bytes);
    RETURN_IF_ERROR(
        l.Copy(message.data(), l.buffer, header.bytes, cudaMemcpyDeviceToHost, deadline, what));
    l.stash[header.tag].push_back(std::move(message));
    if (header.tag == tag) {
      // Same tag, wrong size: a caller bug. The message stays queued, as in the other transports.
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": the next message of this tag has ", header.bytes, " bytes"));
    }
  }
}

// A collective group: one communicator over its members, with the Link machinery (stream,
// staging buffer, polled waits, abort on failure) for the group's calls.
class NcclTransport::Group final : public Collective {
 public:
  Group(int index, int size, std::string name, int device, absl::Duration timeout,
        const Clock* clock)
      : index_(index), size_(size), name_(std::move(name)), device_(device), timeout_(timeout),
        clock_(clock) {}

  // Joins the communicator of `id` as member `index_`.
  absl::Status Init(const ncclUniqueId& id) {
    const std::string what = absl::StrCat("nccl group ", name_, " member ", index_, ": creating");
    absl::MutexLock lock(&link_.mu);
    RETURN_IF_ERROR(link_.CheckCuda(cudaSetDevice(device_), what));
    if (cudaError_t e = cudaStreamCreateWithFlags(&link_.stream, cudaStreamNonBlocking);
        e != cudaSuccess) {
      cudaGetLastError();
      link_.stream = nullptr;
      return absl::UnavailableError(absl::StrCat(what, ": ", CudaErrorText(e)));
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t r = ncclCommInitRankConfig(&link_.comm, size_, id, index_, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      std::string text = NcclErrorText(r, link_.comm);
      if (link_.comm != nullptr) ncclCommAbort(link_.comm);
      link_.comm = nullptr;
      return absl::UnavailableError(absl::StrCat(what, ": ncclCommInitRankConfig: ", text));
    }
    return link_.WaitComm(DeadlineAfter(clock_, timeout_), what);
  }

  int rank() const override { return index_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }

  absl::Status AllReduceSum(float* data, size_t count) override {
    const std::string what = absl::StrCat("nccl group ", name_, " AllReduceSum of ", count);
    const Deadline deadline = DeadlineAfter(clock_, timeout_);
    absl::MutexLock lock(&link_.mu);
    RETURN_IF_ERROR(Usable(what));
    const size_t bytes = count * sizeof(float);
    RETURN_IF_ERROR(link_.Reserve(std::max<size_t>(bytes, 1), what));
    RETURN_IF_ERROR(link_.Copy(link_.buffer, data, bytes, cudaMemcpyHostToDevice, deadline, what));
    RETURN_IF_ERROR(link_.CheckNccl(ncclAllReduce(link_.buffer, link_.buffer, count, ncclFloat,
                                                  ncclSum, link_.comm, link_.stream),
                                    deadline, what));
    RETURN_IF_ERROR(link_.WaitStream(deadline, what));
    return link_.Copy(data, link_.buffer, bytes, cudaMemcpyDeviceToHost, deadline, what);
  }

  absl::Status AllToAllV(const float* send, const std::vector<size_t>& send_counts, float* recv,
                         const std::vector<size_t>& recv_counts) override {
    const std::string what = absl::StrCat("nccl group ", name_, " AllToAllV");
    if (static_cast<int>(send_counts.size()) != size_ ||
        static_cast<int>(recv_counts.size()) != size_) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": counts for ", send_counts.size(),
                                                     " and ", recv_counts.size(),
                                                     " members, the group has ", size_));
    }
    size_t sent = 0, received = 0;
    for (int p = 0; p < size_; ++p) {
      sent += send_counts[p];
      received += recv_counts[p];
    }
    const Deadline deadline = DeadlineAfter(clock_, timeout_);
    absl::MutexLock lock(&link_.mu);
    RETURN_IF_ERROR(Usable(what));
    RETURN_IF_ERROR(link_.Reserve(std::max<size_t>((sent + received) * sizeof(float), 1), what));
    float* dsend = reinterpret_cast<float*>(link_.buffer);
    float* drecv = dsend + sent;
    RETURN_IF_ERROR(
        link_.Copy(dsend, send, sent * sizeof(float), cudaMemcpyHostToDevice, deadline, what));
    RETURN_IF_ERROR(link_.CheckNccl(ncclGroupStart(), deadline, what));
    size_t soff = 0, roff = 0;
    ncclResult_t r = ncclSuccess;
    for (int p = 0; p < size_ && (r == ncclSuccess || r == ncclInProgress); ++p) {
      if (send_counts[p] > 0) {
        r = ncclSend(dsend + soff, send_counts[p], ncclFloat, p, link_.comm, link_.stream);
      }
      if (recv_counts[p] > 0 && (r == ncclSuccess || r == ncclInProgress)) {
        r = ncclRecv(drecv + roff, recv_counts[p], ncclFloat, p, link_.comm, link_.stream);
      }
      soff += send_counts[p];
      roff += recv_counts[p];
    }
    const ncclResult_t end = ncclGroupEnd();  // always closes the group
    RETURN_IF_ERROR(link_.CheckNccl(r, deadline, what));
    RETURN_IF_ERROR(link_.CheckNccl(end, deadline, what));
    RETURN_IF_ERROR(link_.WaitStream(deadline, what));
    return link_.Copy(recv, drecv, received * sizeof(float), cudaMemcpyDeviceToHost, deadline,
                      what);
  }

 private:
  absl::Status Usable(const std::string& what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(link_.mu) {
    if (!link_.broken.ok()) {
      return absl::UnavailableError(absl::StrCat(
          what, ": the group is closed after an earlier error: ", link_.broken.message()));
    }
    return link_.CheckCuda(cudaSetDevice(device_), what);
  }

  const int index_;
  const int size_;
  const std::string name_;
  const int device_;
  const absl::Duration timeout_;
  const Clock* const clock_;
  Link link_;  // peer unused: a group has no single peer
};

absl::StatusOr<std::unique_ptr<Collective>> NcclTransport::NewCollective(
    const std::vector<int>& ranks, const std::string& name) {
  int index = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= size_) {
      return absl::InvalidArgumentError(absl::StrCat("nccl group ", name, ": rank ", ranks[i],
                                                     " is outside [0, ", size_, ")"));
    }
    if (std::count(ranks.begin(), ranks.end(), ranks[i]) > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("nccl group ", name, ": rank ", ranks[i], " is listed twice"));
    }
    if (ranks[i] == rank_) index = static_cast<int>(i);
  }
  if (index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl group ", name, ": this rank ", rank_, " is not a member"));
  }
  if (ranks.size() == 1) return SoloCollective(name);
  ncclUniqueId id;
  if (index == 0) {
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
      return absl::UnavailableError(
          absl::StrCat("nccl group ", name, ": ncclGetUniqueId: ", NcclErrorText(r, nullptr)));
    }
    for (size_t i = 1; i < ranks.size(); ++i) {
      RETURN_IF_ERROR(Send(ranks[i], kNcclGroupIdTag, &id, sizeof(id)));
    }
  } else {
    RETURN_IF_ERROR(Recv(ranks[0], kNcclGroupIdTag, &id, sizeof(id)));
  }
  auto group = std::make_unique<Group>(index, static_cast<int>(ranks.size()), name, device_,
                                       timeout_, clock_);
  RETURN_IF_ERROR(group->Init(id));
  return std::unique_ptr<Collective>(std::move(group));
}

}  // namespace octopipe::executor

#endif  // OCTOPIPE_NO_CUDA
