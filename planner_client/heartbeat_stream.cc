#include "planner_client/heartbeat_stream.h"

#include <utility>

namespace octopipe::client {

// A hold keeps gRPC from finishing the reactor while Beat() may still start a write from
// another thread; it is released once the read ends (the planner ended the stream, or it was
// cancelled), and no write starts after that (`ending_`, under the same lock as StartWrite).
HeartbeatStream::HeartbeatStream(proto::Planner::Stub* stub,
                                 std::unique_ptr<grpc::ClientContext> ctx, std::string node)
    : ctx_(std::move(ctx)) {
  request_.set_node_id(std::move(node));
  stub->async()->HeartbeatStream(ctx_.get(), this);
  AddHold();
  StartRead(&response_);
  StartCall();
}

HeartbeatStream::~HeartbeatStream() { Close(); }

bool HeartbeatStream::Beat() {
  absl::MutexLock lock(&mu_);
  if (ending_ || writing_) return false;
  writing_ = true;
  StartWrite(&request_);
  return true;
}

bool HeartbeatStream::ended() const {
  absl::MutexLock lock(&mu_);
  return done_;
}

bool HeartbeatStream::AwaitEnd(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&done_), timeout);
}

bool HeartbeatStream::drained() const {
  absl::MutexLock lock(&mu_);
  return drained_;
}

grpc::Status HeartbeatStream::status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

int64_t HeartbeatStream::failed_writes() const {
  absl::MutexLock lock(&mu_);
  return failed_writes_;
}

grpc::Status HeartbeatStream::Close() {
  ctx_->TryCancel();
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&done_));
  return status_;
}

void HeartbeatStream::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  writing_ = false;
  if (!ok) ++failed_writes_;
}

void HeartbeatStream::OnReadDone(bool ok) {
  if (ok) {  // the planner's one answer: drained (the end follows)
    {
      absl::MutexLock lock(&mu_);
      drained_ = drained_ || response_.drained();
    }
    StartRead(&response_);
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    ending_ = true;
  }
  RemoveHold();
}

void HeartbeatStream::OnDone(const grpc::Status& s) {
  absl::MutexLock lock(&mu_);
  status_ = s;
  done_ = true;
}

}  // namespace octopipe::client
