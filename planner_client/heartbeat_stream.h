// One agent's HeartbeatStream (proto/planner.proto): a long-lived stream to one planner replica
// on which each heartbeat is one message. The planner answers nothing while the node is fine;
// it ends the stream after writing {drained: true}, or with the error a unary Heartbeat would
// have returned (NOT_FOUND, UNAVAILABLE naming the leader, PERMISSION_DENIED). Used by the
// worker agent (worker_agent/grpc_planner_link.cc, which falls back to unary Heartbeat calls
// to find the leader and reopens a stream there) and by bench:control_plane.
//
// Thread-safe: Beat() from any thread, the reactor's callbacks on gRPC's.
#ifndef OCTOPIPE_PLANNER_CLIENT_HEARTBEAT_STREAM_H_
#define OCTOPIPE_PLANNER_CLIENT_HEARTBEAT_STREAM_H_

#include <cstdint>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/planner.grpc.pb.h"

namespace octopipe::client {

class HeartbeatStream final
    : public grpc::ClientBidiReactor<proto::HeartbeatRequest, proto::HeartbeatResponse> {
 public:
  // Opens the stream for `node` on `stub`; `ctx` carries the caller's credentials (no
  // deadline: the stream lives as long as the agent).
  HeartbeatStream(proto::Planner::Stub* stub, std::unique_ptr<grpc::ClientContext> ctx,
                  std::string node);
  // Cancels the stream if it is still open and waits until gRPC is done with it.
  ~HeartbeatStream() override;
  HeartbeatStream(const HeartbeatStream&) = delete;
  HeartbeatStream& operator=(const HeartbeatStream&) = delete;

  // Sends one heartbeat. False, sending nothing, while the previous one is still being written
  // (a stalled connection: the planner misses this beat) or once the stream is ending.
  bool Beat();
  // Whether the stream ended; then drained() and status() are final.
  bool ended() const;
  // Waits up to `timeout` for the stream to end; whether it has.
  bool AwaitEnd(absl::Duration timeout) const;
  // The planner said the node is drained (the stream then ends OK).
  bool drained() const;
  // How the stream ended (OK until it has).
  grpc::Status status() const;
  // Heartbeats that were sent but not written (the stream broke under them).
  int64_t failed_writes() const;
  // Cancels the stream (the agent is leaving) and waits until it ended; its status
  // (CANCELLED unless the planner ended it first).
  grpc::Status Close();

  void OnWriteDone(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& s) override;

 private:
  std::unique_ptr<grpc::ClientContext> ctx_;
  proto::HeartbeatRequest request_;
  proto::HeartbeatResponse response_;
  mutable absl::Mutex mu_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool ending_ ABSL_GUARDED_BY(mu_) = false;  // the read ended: no more writes
  bool done_ ABSL_GUARDED_BY(mu_) = false;    // OnDone ran
  bool drained_ ABSL_GUARDED_BY(mu_) = false;
  int64_t failed_writes_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace octopipe::client

#endif  // OCTOPIPE_PLANNER_CLIENT_HEARTBEAT_STREAM_H_
