// GlooTransport: the Transport over TCP with Gloo — the CPU path between processes and hosts.
//
// Rendezvous goes through a gloo::rendezvous::FileStore in a directory every rank can see; the
// result is a full mesh of TCP connections. Send/Recv use Gloo unbound buffers with the tag as
// the slot, so (src, dst, tag) streams are FIFO and independent of each other.
//
// Semantics worth knowing:
//  * StartSend / StartRecv (has_async) are the same messages started without a thread: the
//    executor posts every receive of an iteration up front and sends from its computing thread.
//  * Send is a rendezvous: it returns once the receiver has posted the matching Recv and the
//    data is written to the socket (Gloo moves data only into a posted receive buffer). Two
//    ranks that both Send to each other before receiving therefore deadlock — the executor's
//    one-thread-per-direction design avoids that.
//  * A Send or Recv that waits longer than `timeout_s` returns kDeadlineExceeded; a peer whose
//    connection closes or breaks (it died) returns kUnavailable. Both name the peer rank.
//    After either, the link to that peer is closed for good (Gloo's rule: after an I/O error
//    or timeout the pair is in an unknown state) and every later call to it is kUnavailable.
//  * Links to the other peers are unaffected, because each peer gets its own Gloo context.
//
// Concurrency design: one 2-rank gloo::rendezvous::Context per peer, all sharing one TCP
// device (one event-loop thread). A single full-mesh context would be thread-safe too — the
// tcp Pair serializes posting with its own mutex and completions arrive through each
// UnboundBuffer's own condition variable — but a wait that times out calls
// tcp::Context::signalException, which closes *every* pair of the context; one slow peer would
// then take down the links to all others. Per-peer contexts confine a failure to its peer.
// Consequently Send to different peers, Recv from different peers, and Send and Recv with the
// same peer may all run concurrently from different threads; several threads using the same
// (peer, tag) stream at once get an unspecified order between them.
//
// Process-wide side effect: Create() sets SIGPIPE to SIG_IGN if it is SIG_DFL — Gloo writes
// with writev(2), and a write to a dead peer would otherwise kill the process instead of
// turning into kUnavailable.
#ifndef OCTOPIPE_EXECUTOR_GLOO_TRANSPORT_H_
#define OCTOPIPE_EXECUTOR_GLOO_TRANSPORT_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/clock.h"
#include "executor/transport.h"

namespace gloo::transport {
class Device;
}  // namespace gloo::transport
namespace gloo::rendezvous {
class Store;
}  // namespace gloo::rendezvous

namespace octopipe::executor {

struct GlooOptions {
  int rank = 0;
  int size = 1;
  // Directory of the gloo::rendezvous::FileStore, shared by all ranks (created if missing).
  std::string store_dir;
  // "HOST:PORT" of a TcpStoreServer (executor/tcp_store.h): rendezvous over TCP instead of
  // store_dir, for hosts without a shared file system. Takes precedence over store_dir.
  std::string store_address;
  // Per-run namespace inside store_dir. Must be fresh for every run: a rank that finds the
  // addresses of a previous run under the same prefix connects to dead ports and times out.
  std::string prefix;
  // Address this rank listens on; other ranks must be able to reach it.
  std::string hostname = "127.0.0.1";
  // Limit for connecting and for each Send/Recv. Too short turns a slow peer into a failure;
  // too long delays noticing a hung (not dead) peer.
  double timeout_s = 60;
  // The clock of the deadlines this transport keeps itself (connecting to store_address);
  // null: the real monotonic clock. Gloo's own waits (rendezvous, Send/Recv) run in real time.
  std::shared_ptr<const Clock> clock;
};

class GlooTransport final : public Transport {
 public:
  // Connects to every other rank; blocks until all have called Create with the same
  // store_dir/prefix/size or until timeout_s. kInvalidArgument for bad options, kUnavailable or
  // kDeadlineExceeded when a peer cannot be reached.
  static absl::StatusOr<std::unique_ptr<Transport>> Create(const GlooOptions& options);

  ~GlooTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "gloo"; }
  absl::Status Send(int dst, uint32_t tag, const void* data, size_t bytes) override;
  absl::Status Recv(int src, uint32_t tag, void* data, size_t bytes) override;
  // Native: a started receive is an unbound buffer posted to the link (Gloo's event loop reads
  // into it), a started send is written from the calling thread once the receiver has posted
  // its buffer, or queued in the link until then. Wait waits at most timeout_s.
  bool has_async() const override { return true; }
  absl::StatusOr<std::unique_ptr<PendingMessage>> StartSend(int dst, uint32_t tag,
                                                            const void* data,
                                                            size_t bytes) override;
  absl::StatusOr<std::unique_ptr<PendingMessage>> StartRecv(int src, uint32_t tag, void* data,
                                                            size_t bytes) override;
  // A Gloo context of its own over the group's ranks (rendezvous under PREFIX/group/NAME in the
  // transport's store, on the same TCP device): gloo::allreduce (ring) and gloo::alltoallv.
  // A collective's failure closes only its own context.
  absl::StatusOr<std::unique_ptr<Collective>> NewCollective(const std::vector<int>& ranks,
                                                            const std::string& name) override;

 private:
  GlooTransport(int rank, int size, std::chrono::milliseconds timeout);

  struct Peer;  // The link to one peer: its Gloo context and first error; in the .cc.

  class Pending;  // a started message; in the .cc
  // Starts a send or receive on the link to `peer`; Pending::Wait finishes it.
  absl::StatusOr<std::unique_ptr<PendingMessage>> Start(int peer, uint32_t tag, size_t bytes,
                                                        bool is_send, void* data);
  // "gloo rank R Send to rank P (tag T, N bytes)".
  std::string Describe(bool is_send, int peer, uint32_t tag, size_t bytes) const;
  // Records the link's first error (Gloo closes a link after any failure) and returns `status`.
  absl::Status Failed(Peer* link, absl::Status status);

  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  std::shared_ptr<gloo::transport::Device> device_;
  // The rendezvous store and prefix (collective groups meet there too); null with size 1.
  std::unique_ptr<gloo::rendezvous::Store> store_;
  std::string prefix_;
  std::string store_name_;  // for errors
  // peers_[p]: the link to rank p; null at this rank's own index. Filled only in Create.
  std::vector<std::unique_ptr<Peer>> peers_;
};

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_GLOO_TRANSPORT_H_
