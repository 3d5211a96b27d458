#include "executor/gloo_transport.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>

#include <cstring>
#include <exception>
#include <stdexcept>
#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/status_macros.h"
#include "executor/tcp_store.h"
#include "executor/thread_priority.h"
#include "executor/inproc_collective.h"
#include "gloo/allreduce.h"
#include "gloo/alltoallv.h"
#include "gloo/common/error.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"
#include "gloo/types.h"

namespace octopipe::executor {

struct GlooTransport::Peer {
  int local_peer = -1;  // The peer's rank inside `context` (0 or 1).
  std::shared_ptr<gloo::rendezvous::Context> context;

  // The first error on this link. Gloo closes a pair after any I/O error or timeout, so every
  // later call fails too; reporting the original cause is more useful than Gloo's echo of it.
  absl::Mutex mu;
  absl::Status first_error ABSL_GUARDED_BY(mu);
};

namespace {

// Gloo signals every failure with an exception; the only way to tell a timeout (the peer may
// be alive but slow: kDeadlineExceeded) from a broken link (kUnavailable) is its message.
// "Application timeout caused pair closure" is what *other* calls on a pair closed by a
// timeout see: for them the link is simply gone.
absl::StatusCode CodeForGlooError(const std::exception& e) {
  const char* what = e.what();
  if (absl::StrContains(what, "Timed out waiting") || absl::StrContains(what, "Wait timeout") ||
      absl::StrContains(what, "Connect timeout")) {
    return absl::StatusCode::kDeadlineExceeded;
  }
  if (dynamic_cast<const gloo::IoException*>(&e) != nullptr) {
    return absl::StatusCode::kUnavailable;
  }
  // gloo::EnforceNotMet and friends: an invariant of Gloo failed — typically a stale store
  // entry ("File already exists") or a Send/Recv size mismatch.
  return absl::StatusCode::kInternal;
}

absl::Status CheckOptions(const GlooOptions& o) {
  if (o.size < 1) return absl::InvalidArgumentError(absl::StrCat("gloo: size ", o.size, " < 1"));
  if (o.rank < 0 || o.rank >= o.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo: rank ", o.rank, " is not in [0, size ", o.size, ")"));
  }
  if (!(o.timeout_s > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("gloo: timeout_s ", o.timeout_s, " <= 0"));
  }
  if (o.size > 1 && o.store_dir.empty() && o.store_address.empty()) {
    return absl::InvalidArgumentError(
        "gloo: store_dir and store_address are empty; ranks need a shared directory or a TCP "
        "store");
  }
  if (o.size > 1 && o.prefix.empty()) {
    return absl::InvalidArgumentError("gloo: prefix is empty; give every run its own namespace");
  }
  if (o.hostname.empty()) return absl::InvalidArgumentError("gloo: hostname is empty");
  return absl::OkStatus();
}

// See the header: a write to a closed socket must become an error, not a fatal signal.
void IgnoreSigpipeIfDefault() {
  struct sigaction current;
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    struct sigaction ignore;
    std::memset(&ignore, 0, sizeof(ignore));
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, nullptr);
  }
}

}  // namespace

GlooTransport::GlooTransport(int rank, int size, std::chrono::milliseconds timeout)
    : rank_(rank), size_(size), timeout_(timeout) {}

GlooTransport::~GlooTransport() = default;

absl::StatusOr<std::unique_ptr<Transport>> GlooTransport::Create(const GlooOptions& options) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  IgnoreSigpipeIfDefault();
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(options.timeout_s * 1e3));
  std::unique_ptr<GlooTransport> t(new GlooTransport(options.rank, options.size, timeout));
  t->peers_.resize(options.size);
  if (options.size == 1) return std::unique_ptr<Transport>(std::move(t));

  std::error_code ec;
  if (options.store_address.empty()) std::filesystem::create_directories(options.store_dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("gloo: cannot create store_dir '", options.store_dir, "': ", ec.message()));
  }
  std::unique_ptr<gloo::rendezvous::Store> store;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    {
      // The device's event-loop thread inherits the communication threads' priority.
      ScopedCommunicationPriority raised;
      t->device_ = gloo::transport::tcp::CreateDevice(attr);
    }
    if (options.store_address.empty()) {
      store = std::make_unique<gloo::rendezvous::FileStore>(options.store_dir);
    } else {
      store = std::make_unique<TcpStore>(options.store_address, timeout, options.clock);
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("gloo rank ", options.rank, ": cannot listen on hostname '", options.hostname,
                     "' or open store_dir '", options.store_dir, "': ", e.what()));
  }

  // Connect the links in one global order — pairs (i, j), i < j, lexicographically — so the
  // blocking rendezvous cannot deadlock: the earliest unconnected pair always has both of its
  // ranks waiting on it.
  for (int i = 0; i < options.size; ++i) {
    for (int j = i + 1; j < options.size; ++j) {
      if (options.rank != i && options.rank != j) continue;
      const int peer = options.rank == i ? j : i;
      auto link = std::make_unique<Peer>();
      link->local_peer = options.rank == i ? 1 : 0;
      link->context =
          std::make_shared<gloo::rendezvous::Context>(options.rank == i ? 0 : 1, /*size=*/2);
      link->context->setTimeout(timeout);
      try {
        gloo::rendezvous::PrefixStore pair_store(absl::StrCat(options.prefix, "/pair-", i, "-", j),
                                                 *store);
        link->context->connectFullMesh(pair_store, t->device_);
      } catch (const std::exception& e) {
        return absl::Status(
            CodeForGlooError(e),
            absl::StrCat("gloo rank ", options.rank, ": connecting to rank ", peer, " (prefix '",
                         options.prefix, "' in '",
                         options.store_address.empty() ? options.store_dir : options.store_address,
                         "') failed: ", e.what()));
      }
      t->peers_[peer] = std::move(link);
    }
  }
  t->store_ = std::move(store);
  t->prefix_ = options.prefix;
  t->store_name_ = options.store_address.empty() ? options.store_dir : options.store_address;
  return std::unique_ptr<Transport>(std::move(t));
}

namespace {

// A collective group on a Gloo context of its own.
// Sets TCP_NODELAY on every TCP socket this process holds. Gloo's pairs leave Nagle's algorithm
// on; where both members of a pair send at once (an all-reduce's exchange: payload and Gloo's
// small control messages in both directions), Nagle's wait for an ACK meets the peer's delayed
// ACK and each exchange stalls ~40 ms. Gloo gives no access to its sockets, so they are found
// among the process's descriptors; every TCP socket of a rank (Gloo pairs, the rendezvous store
// client) wants no delay.
void DisableNagleOnTcpSockets() {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    int fd = -1;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &fd)) continue;
    int type = 0;
    socklen_t len = sizeof(type);
    if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) continue;
    sockaddr_storage addr{};
    socklen_t addr_len = sizeof(addr);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &addr_len) != 0) continue;
    if (addr.ss_family != AF_INET && addr.ss_family != AF_INET6) continue;
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
}

class GlooCollective final : public Collective {
 public:
  GlooCollective(std::shared_ptr<gloo::rendezvous::Context> context, std::string name,
                 std::chrono::milliseconds timeout)
      : context_(std::move(context)), name_(std::move(name)), timeout_(timeout) {}

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }
  const std::string& name() const override { return name_; }

  absl::Status AllReduceSum(float* data, size_t count) override {
    if (count == 0) return absl::OkStatus();
    if (size() <= kDirectMaxMembers) {
      return Run("all-reduce", [&] { DirectAllReduce(data, count); });
    }
    return Run("all-reduce", [&] {
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(data, count);
      opts.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      opts.setTag(next_tag_++);
      opts.setTimeout(timeout_);
      ScopedCommunicationPriority raised;  // it posts to pairs throughout (see DirectAllReduce)
      gloo::allreduce(opts);
    });
  }

  absl::Status AllToAllV(const float* send, const std::vector<size_t>& send_counts, float* recv,
                         const std::vector<size_t>& recv_counts) override {
    if (send_counts.size() != static_cast<size_t>(size()) ||
        recv_counts.size() != static_cast<size_t>(size())) {
      return absl::InvalidArgumentError(absl::StrCat("gloo collective ", name_,
                                                     ": all-to-all counts for ",
                                                     send_counts.size(), " / ", recv_counts.size(),
                                                     " members, the group has ", size()));
    }
    // Gloo refuses null buffers: give empty sides a float to point at.
    float dummy_in = 0, dummy_out = 0;
    return Run("all-to-all", [&] {
      gloo::AlltoallvOptions opts(context_);
      opts.setInput(const_cast<float*>(send != nullptr ? send : &dummy_in),
                    std::vector<int64_t>(send_counts.begin(), send_counts.end()));
      opts.setOutput(recv != nullptr ? recv : &dummy_out,
                     std::vector<int64_t>(recv_counts.begin(), recv_counts.end()));
      opts.setTag(next_tag_++);
      opts.setTimeout(timeout_);
      ScopedCommunicationPriority raised;  // as gloo::allreduce above
      gloo::alltoallv(opts);
    });
  }

 private:
  // Groups up to this size all-reduce by direct exchange (below); larger ones by gloo::allreduce
  // (a ring: less traffic per member).
  static constexpr int kDirectMaxMembers = 4;
  static constexpr uint8_t kDirectSlotPrefix = 0x7f;

  // Every member sends its values to every other and adds all members' values in member order,
  // so every member gets the same bits (data-parallel replicas stay identical). Through two
  // unbound buffers kept for the group's life (grown when needed): gloo::allreduce creates and
  // tears down unbound buffers on every call, and on a busy host with few cores their teardown
  // (a spin until Gloo's event loop lets go of them) made each small all-reduce take tens of
  // milliseconds (bench/gloo_bandwidth allreduce_us).
  void DirectAllReduce(float* data, size_t count) {
    const int n = size(), me = rank();
    if (count > capacity_) {
      send_.assign(count, 0.0f);
      recv_.assign(count * n, 0.0f);
      send_buf_ = context_->createUnboundBuffer(send_.data(), count * sizeof(float));
      recv_buf_ = context_->createUnboundBuffer(recv_.data(), count * n * sizeof(float));
      capacity_ = count;
    }
    const size_t bytes = count * sizeof(float);
    std::memcpy(send_.data(), data, bytes);
    const uint64_t slot = gloo::Slot::build(kDirectSlotPrefix, next_tag_++);
    {
      // Posting takes each peer's pair lock, which Gloo's event loop (at the communication
      // priority) only try-locks, polling again: a holder at normal priority preempted by the
      // loop on its core is starved until the kernel's real-time throttling lets it run —
      // measured as sporadic ~0.9 s all-reduces. As in GlooTransport's messages, post at the
      // loop's priority (the waits and the sum below stay at normal priority).
      ScopedCommunicationPriority raised;
      for (int m = 0; m < n; ++m) {
        if (m != me) recv_buf_->recv(m, slot, m * capacity_ * sizeof(float), bytes);
      }
      for (int m = 0; m < n; ++m) {
        if (m != me) send_buf_->send(m, slot, 0, bytes);
      }
    }
    for (int i = 0; i < n - 1; ++i) {
      if (!recv_buf_->waitRecv(timeout_)) throw std::runtime_error("receive aborted");
    }
    for (int i = 0; i < n - 1; ++i) {
      if (!send_buf_->waitSend(timeout_)) throw std::runtime_error("send aborted");
    }
    for (size_t i = 0; i < count; ++i) {
      float sum = 0;
      for (int m = 0; m < n; ++m) {
        sum = m == 0 ? Value(m, me, i) : sum + Value(m, me, i);
      }
      data[i] = sum;
    }
  }
  float Value(int member, int me, size_t i) const {
    return member == me ? send_[i] : recv_[member * capacity_ + i];
  }

  template <typename Fn>
  absl::Status Run(const char* what, Fn fn) {
    if (!failed_.ok()) return failed_;
    try {
      fn();
      return absl::OkStatus();
    } catch (const std::exception& e) {
      failed_ = absl::Status(CodeForGlooError(e), absl::StrCat("gloo collective ", name_,
                                                                " (member ", rank(), " of ",
                                                                size(), "): ", what, ": ",
                                                                e.what()));
      return failed_;
    }
  }

  std::shared_ptr<gloo::rendezvous::Context> context_;
  const std::string name_;
  const std::chrono::milliseconds timeout_;
  uint32_t next_tag_ = 1;
  absl::Status failed_;  // Gloo's context is unusable after an error
  // DirectAllReduce's buffers: this member's values, and every member's at member * capacity_.
  size_t capacity_ = 0;
  std::vector<float> send_, recv_;
  std::unique_ptr<gloo::transport::UnboundBuffer> send_buf_, recv_buf_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Collective>> GlooTransport::NewCollective(
    const std::vector<int>& ranks, const std::string& name) {
  int index = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= size_) {
      return absl::InvalidArgumentError(absl::StrCat("gloo collective ", name, ": rank ",
                                                     ranks[i], " is outside [0, ", size_, ")"));
    }
    if (ranks[i] == rank_) index = static_cast<int>(i);
  }
  if (index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo collective ", name, ": this rank ", rank_, " is not a member"));
  }
  if (ranks.size() == 1) return SoloCollective(name);
  auto context = std::make_shared<gloo::rendezvous::Context>(index, static_cast<int>(ranks.size()));
  context->setTimeout(timeout_);
  try {
    gloo::rendezvous::PrefixStore group_store(absl::StrCat(prefix_, "/group/", name), *store_);
    context->connectFullMesh(group_store, device_);
  } catch (const std::exception& e) {
    return absl::Status(CodeForGlooError(e),
                        absl::StrCat("gloo rank ", rank_, ": creating collective group ", name,
                                     " (prefix '", prefix_, "' in '", store_name_,
                                     "') failed: ", e.what()));
  }
  DisableNagleOnTcpSockets();
  return std::unique_ptr<Collective>(
      std::make_unique<GlooCollective>(std::move(context), name, timeout_));
}

// A started message: its unbound buffer, and how to report a failure.
class GlooTransport::Pending final : public PendingMessage {
 public:
  Pending(GlooTransport* transport, Peer* link, int peer, uint32_t tag, size_t bytes,
          bool is_send, std::unique_ptr<gloo::transport::UnboundBuffer> buf)
      : transport_(transport), link_(link), peer_(peer), tag_(tag), bytes_(bytes),
        is_send_(is_send), buf_(std::move(buf)) {}
  // Destroying the buffer is safe while Gloo still holds it: the link keeps a weak reference,
  // and the destructor waits for any read or write into it to finish.
  ~Pending() override = default;

  absl::Status Wait() override {
    try {
      const bool completed =
          is_send_ ? buf_->waitSend(transport_->timeout_) : buf_->waitRecv(transport_->timeout_);
      // We never call abortWait*, so this is unexpected; report it rather than lie.
      if (!completed) return absl::AbortedError(absl::StrCat(Describe(), ": aborted by Gloo"));
      return absl::OkStatus();
    } catch (const std::exception& e) {
      return transport_->Failed(link_, absl::Status(CodeForGlooError(e),
                                                    absl::StrCat(Describe(), ": ", e.what())));
    }
  }

  std::string Describe() const { return transport_->Describe(is_send_, peer_, tag_, bytes_); }

 private:
  GlooTransport* const transport_;
  Peer* const link_;
  const int peer_;
  const uint32_t tag_;
  const size_t bytes_;
  const bool is_send_;
  std::unique_ptr<gloo::transport::UnboundBuffer> buf_;
};

std::string GlooTransport::Describe(bool is_send, int peer, uint32_t tag, size_t bytes) const {
  return absl::StrCat("gloo rank ", rank_, is_send ? " Send to" : " Recv from", " rank ", peer,
                      " (tag ", tag, ", ", bytes, " bytes)");
}

absl::Status GlooTransport::Failed(Peer* link, absl::Status status) {
  absl::MutexLock lock(&link->mu);
  if (link->first_error.ok()) link->first_error = status;
  return status;
}

absl::StatusOr<std::unique_ptr<PendingMessage>> GlooTransport::Start(int peer, uint32_t tag,
                                                                    size_t bytes, bool is_send,
                                                                    void* data) {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gloo ", is_send ? "Send to" : "Recv from", " rank ", peer, ": peer must be in [0, ",
        size_, ") and differ from this rank ", rank_));
  }
  Peer& link = *peers_[peer];
  {
    absl::MutexLock lock(&link.mu);
    if (!link.first_error.ok()) {
      return absl::UnavailableError(absl::StrCat(Describe(is_send, peer, tag, bytes),
                                                 ": the link to rank ", peer,
                                                 " is closed after an earlier error: ",
                                                 link.first_error.message()));
    }
  }
  // Posting takes the link's lock, which Gloo's event loop (a communication-priority thread,
  // see Create) also needs: the loop only try-locks and polls again, so a normal-priority caller
  // preempted while holding the lock would leave the loop spinning on its core at real-time
  // priority until the kernel's throttling — measured: 6.7-20 ms of CPU per message and 2-4x
  // slower iterations when the computing thread started its own messages. At the loop's
  // priority the caller is never preempted by it while holding the lock.
  ScopedCommunicationPriority raised;
  try {
    // One buffer per message (a small allocation): its completion state is private to it,
    // which is what makes concurrent messages on one link safe. 0-byte messages are real
    // messages in Gloo too (a preamble with nbytes 0), so no special case.
    std::unique_ptr<gloo::transport::UnboundBuffer> buf =
        link.context->createUnboundBuffer(data, bytes);
    if (is_send) {
      buf->send(link.local_peer, tag);
    } else {
      buf->recv(link.local_peer, tag);
    }
    return std::make_unique<Pending>(this, &link, peer, tag, bytes, is_send, std::move(buf));
  } catch (const std::exception& e) {
    return Failed(&link, absl::Status(CodeForGlooError(e),
                                      absl::StrCat(Describe(is_send, peer, tag, bytes), ": ",
                                                   e.what())));
  }
}

absl::Status GlooTransport::Send(int dst, uint32_t tag, const void* data, size_t bytes) {
  ASSIGN_OR_RETURN(std::unique_ptr<PendingMessage> p, StartSend(dst, tag, data, bytes));
  return p->Wait();
}

absl::Status GlooTransport::Recv(int src, uint32_t tag, void* data, size_t bytes) {
  ASSIGN_OR_RETURN(std::unique_ptr<PendingMessage> p, StartRecv(src, tag, data, bytes));
  return p->Wait();
}

absl::StatusOr<std::unique_ptr<PendingMessage>> GlooTransport::StartSend(int dst, uint32_t tag,
                                                                        const void* data,
                                                                        size_t bytes) {
  // Gloo's UnboundBuffer takes a non-const pointer for both directions; a send only reads it.
  return Start(dst, tag, bytes, /*is_send=*/true, const_cast<void*>(data));
}

absl::StatusOr<std::unique_ptr<PendingMessage>> GlooTransport::StartRecv(int src, uint32_t tag,
                                                                        void* data,
                                                                        size_t bytes) {
  return Start(src, tag, bytes, /*is_send=*/false, data);
}

}  // namespace octopipe::executor
