#include "executor/async_messages.h"

#include <deque>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "executor/core_rotation.h"
#include "executor/thread_priority.h"

namespace octopipe::executor {
namespace {

// One queued call and its outcome, shared by the worker and the PendingMessage.
struct Call {
  uint32_t tag = 0;
  void* data = nullptr;
  size_t bytes = 0;

  absl::Mutex mu;
  bool started ABSL_GUARDED_BY(mu) = false;
  bool done ABSL_GUARDED_BY(mu) = false;
  bool abandoned ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);
};

class ThreadedMessage final : public PendingMessage {
 public:
  explicit ThreadedMessage(std::shared_ptr<Call> call) : call_(std::move(call)) {}
  // A call not yet started is skipped; one running is waited for (it ends within the
  // transport's timeout), so the buffer is never touched after this returns.
  ~ThreadedMessage() override {
    absl::MutexLock lock(&call_->mu);
    if (!call_->started) {
      call_->abandoned = true;
      return;
    }
    call_->mu.Await(absl::Condition(&call_->done));
  }
  absl::Status Wait() override {
    absl::MutexLock lock(&call_->mu);
    call_->mu.Await(absl::Condition(&call_->done));
    return call_->status;
  }

 private:
  std::shared_ptr<Call> call_;
};

}  // namespace

// Runs one peer's calls in one direction, in the order they were queued.
class AsyncMessages::Worker {
 public:
  Worker(Transport* transport, int peer, bool send)
      : transport_(transport), peer_(peer), send_(send), thread_([this] { Run(); }) {}
  ~Worker() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    thread_.join();
  }

  void Push(std::shared_ptr<Call> call) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(call));
  }

 private:
  void Run() {
    RaiseCommunicationThread();
    CoreRotation::ReleaseCallingThread();  // not the computing thread's one core
    absl::Status first_error;
    while (true) {
      std::shared_ptr<Call> call;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](Worker* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) {
              return w->stopping_ || !w->queue_.empty();
            },
            this));
        if (queue_.empty()) return;  // stopping, and nothing left
        call = std::move(queue_.front());
        queue_.pop_front();
      }
      {
        absl::MutexLock lock(&call->mu);
        if (call->abandoned) continue;
        call->started = true;
      }
      absl::Status s;
      if (!first_error.ok()) {
        s = absl::Status(first_error.code(),
                         absl::StrCat("not ", send_ ? "sent to" : "received from", " rank ", peer_,
                                      " (tag ", call->tag, "): an earlier message failed: ",
                                      first_error.message()));
      } else if (send_) {
        s = transport_->Send(peer_, call->tag, call->data, call->bytes);
      } else {
        s = transport_->Recv(peer_, call->tag, call->data, call->bytes);
      }
      if (!s.ok() && first_error.ok()) first_error = s;
      absl::MutexLock lock(&call->mu);
      call->status = std::move(s);
      call->done = true;
    }
  }

  Transport* const transport_;
  const int peer_;
  const bool send_;
  absl::Mutex mu_;
  std::deque<std::shared_ptr<Call>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts after the members it reads
};

AsyncMessages::AsyncMessages(Transport* transport)
    : transport_(transport), native_(transport->has_async()) {
  if (!native_) {
    senders_.resize(transport->size());
    receivers_.resize(transport->size());
  }
}

AsyncMessages::~AsyncMessages() = default;

int AsyncMessages::threads() const {
  int n = 0;
  for (const auto& w : senders_) n += w != nullptr;
  for (const auto& w : receivers_) n += w != nullptr;
  return n;
}

absl::StatusOr<AsyncMessages::Worker*> AsyncMessages::WorkerFor(int peer, bool send) {
  if (peer < 0 || peer >= transport_->size() || peer == transport_->rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat(send ? "send to" : "receive from", " rank ", peer, ": peer must be in [0, ",
                     transport_->size(), ") and differ from this rank ", transport_->rank()));
  }
  std::unique_ptr<Worker>& w = (send ? senders_ : receivers_)[peer];
  if (w == nullptr) w = std::make_unique<Worker>(transport_, peer, send);
  return w.get();
}

absl::StatusOr<std::unique_ptr<PendingMessage>> AsyncMessages::Queue(int peer, bool send,
                                                                     uint32_t tag, void* data,
                                                                     size_t bytes) {
  absl::StatusOr<Worker*> w = WorkerFor(peer, send);
  if (!w.ok()) return w.status();
  auto call = std::make_shared<Call>();
  call->tag = tag;
  call->data = data;
  call->bytes = bytes;
  (*w)->Push(call);
  return std::unique_ptr<PendingMessage>(new ThreadedMessage(std::move(call)));
}

absl::StatusOr<std::unique_ptr<PendingMessage>> AsyncMessages::StartSend(int dst, uint32_t tag,
                                                                         const void* data,
                                                                         size_t bytes) {
  if (native_) return transport_->StartSend(dst, tag, data, bytes);
  // A send only reads the buffer.
  return Queue(dst, /*send=*/true, tag, const_cast<void*>(data), bytes);
}

absl::StatusOr<std::unique_ptr<PendingMessage>> AsyncMessages::StartRecv(int src, uint32_t tag,
                                                                         void* data,
                                                                         size_t bytes) {
  if (native_) return transport_->StartRecv(src, tag, data, bytes);
  return Queue(src, /*send=*/false, tag, data, bytes);
}

}  // namespace octopipe::executor
