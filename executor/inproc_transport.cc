#include "executor/inproc_transport.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "executor/inproc_collective.h"

namespace octopipe::executor {

struct InProcHub::State {
  // One (src, dst, tag) stream. `pushed` and `popped` count messages over the stream's life,
  // so a synchronous sender can wait for "its" message (index pushed-at-send) to be taken.
  struct Queue {
    std::deque<std::vector<char>> messages;
    uint64_t pushed = 0;
    uint64_t popped = 0;
  };
  using Key = std::tuple<int, int, uint32_t>;  // (src, dst, tag)

  State(int size, InProcOptions options)
      : size(size),
        options(options),
        timeout(absl::Seconds(options.timeout_s)),
        aborted(size, false),
        recv_cv(size),
        send_cv(size) {}

  const int size;
  const InProcOptions options;
  const absl::Duration timeout;

  absl::Mutex mu;
  std::map<Key, Queue> queues ABSL_GUARDED_BY(mu);
  std::vector<bool> aborted ABSL_GUARDED_BY(mu);
  // recv_cv[r]: a message for r arrived, or some rank was aborted.
  // send_cv[r]: a message sent by r was taken, or some rank was aborted.
  std::vector<absl::CondVar> recv_cv;
  std::vector<absl::CondVar> send_cv;
  // Collective groups by name (NewCollective): made by the first member to ask.
  std::map<std::string, std::pair<std::vector<int>, std::shared_ptr<InProcGroup>>> groups
      ABSL_GUARDED_BY(mu);
};

namespace {

using State = InProcHub::State;

// Checks that `peer` is a rank other than `self`; `what` is "Send to" / "Recv from".
absl::Status CheckPeer(const char* what, int peer, int self, int size) {
  if (peer < 0 || peer >= size || peer == self) {
    return absl::InvalidArgumentError(absl::StrCat("inproc ", what, " rank ", peer,
                                                   ": peer must be in [0, ", size,
                                                   ") and differ from this rank ", self));
  }
  return absl::OkStatus();
}

// The error for a call by `self` involving `peer` when either is dead, or OK.
absl::Status AbortedStatus(const State& s, const char* what, int self, int peer)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
  if (s.aborted[peer]) {
    return absl::UnavailableError(
        absl::StrCat("inproc ", what, " rank ", peer, ": rank ", peer, " was aborted"));
  }
  if (s.aborted[self]) {
    return absl::UnavailableError(
        absl::StrCat("inproc ", what, " rank ", peer, ": this rank ", self, " was aborted"));
  }
  return absl::OkStatus();
}

class InProcTransport final : public Transport {
 public:
  InProcTransport(std::shared_ptr<State> state, int rank) : state_(std::move(state)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return state_->size; }
  std::string name() const override { return "inproc"; }

  absl::Status Send(int dst, uint32_t tag, const void* data, size_t bytes) override {
    if (absl::Status s = CheckPeer("Send to", dst, rank_, state_->size); !s.ok()) return s;
    State& s = *state_;
    const absl::Time deadline = absl::Now() + s.timeout;
    absl::MutexLock lock(&s.mu);
    if (absl::Status st = AbortedStatus(s, "Send to", rank_, dst); !st.ok()) return st;
    State::Queue& q = s.queues[State::Key(rank_, dst, tag)];
    const char* p = static_cast<const char*>(data);
    q.messages.emplace_back(p, p + bytes);
    const uint64_t index = q.pushed++;
    s.recv_cv[dst].SignalAll();
    if (!s.options.synchronous_send) return absl::OkStatus();
    // Wait until the receiver has taken message `index`. std::map references stay valid.
    while (q.popped <= index) {
      if (absl::Status st = AbortedStatus(s, "Send to", rank_, dst); !st.ok()) return st;
      if (s.send_cv[rank_].WaitWithDeadline(&s.mu, deadline) && q.popped <= index) {
        return absl::DeadlineExceededError(
            absl::StrCat("inproc Send to rank ", dst, " (tag ", tag, ", ", bytes, " bytes): rank ",
                         dst, " did not receive it within ", absl::FormatDuration(s.timeout)));
      }
    }
    return absl::OkStatus();
  }

  absl::Status Recv(int src, uint32_t tag, void* data, size_t bytes) override {
    if (absl::Status s = CheckPeer("Recv from", src, rank_, state_->size); !s.ok()) return s;
    State& s = *state_;
    const absl::Time deadline = absl::Now() + s.timeout;
    absl::MutexLock lock(&s.mu);
    State::Queue& q = s.queues[State::Key(src, rank_, tag)];
    for (;;) {
      // A dead peer fails the Recv even if it had queued messages: its stream is gone.
      if (absl::Status st = AbortedStatus(s, "Recv from", rank_, src); !st.ok()) return st;
      if (!q.messages.empty()) break;
      if (s.recv_cv[rank_].WaitWithDeadline(&s.mu, deadline) && q.messages.empty()) {
        if (absl::Status st = AbortedStatus(s, "Recv from", rank_, src); !st.ok()) return st;
        return absl::DeadlineExceededError(
            absl::StrCat("inproc Recv from rank ", src, " (tag ", tag, ", ", bytes,
                         " bytes): nothing arrived within ", absl::FormatDuration(s.timeout)));
      }
    }
    std::vector<char>& front = q.messages.front();
    if (front.size() != bytes) {
      // Left queued: a size mismatch is a caller bug, and failing must not consume data.
      return absl::InvalidArgumentError(
          absl::StrCat("inproc Recv from rank ", src, " tag ", tag, ": expected ", bytes,
                       " bytes but the next message has ", front.size(), " bytes"));
    }
    if (bytes > 0) std::memcpy(data, front.data(), bytes);
    q.messages.pop_front();
    ++q.popped;
    s.send_cv[src].SignalAll();
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<Collective>> NewCollective(const std::vector<int>& ranks,
                                                            const std::string& name) override {
    State& s = *state_;
    int index = -1;
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i] < 0 || ranks[i] >= s.size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "inproc collective ", name, ": rank ", ranks[i], " is outside [0, ", s.size, ")"));
      }
      if (ranks[i] == rank_) index = static_cast<int>(i);
    }
    if (index < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("inproc collective ", name, ": this rank ", rank_, " is not a member"));
    }
    absl::MutexLock lock(&s.mu);
    auto& entry = s.groups[name];
    if (entry.second == nullptr) {
      entry.first = ranks;
      entry.second = std::make_shared<InProcGroup>(static_cast<int>(ranks.size()), name,
                                                   absl::ToDoubleSeconds(s.timeout));
    } else if (entry.first != ranks) {
      return absl::InvalidArgumentError(absl::StrCat(
          "inproc collective ", name, ": rank ", rank_, " names other members than the rank "
          "that made the group"));
    }
    return entry.second->Member(index);
  }

 private:
  const std::shared_ptr<State> state_;
  const int rank_;
};

}  // namespace

InProcHub::InProcHub(int size, InProcOptions options)
    : state_(std::make_shared<State>(size, options)) {}

InProcHub::~InProcHub() = default;

int InProcHub::size() const { return state_->size; }

std::unique_ptr<Transport> InProcHub::Endpoint(int rank) {
  if (rank < 0 || rank >= state_->size) {
    std::fprintf(stderr, "InProcHub::Endpoint(%d): rank must be in [0, %d)\n", rank, state_->size);
    std::abort();
  }
  return std::make_unique<InProcTransport>(state_, rank);
}

void InProcHub::Abort(int rank) {
  State& s = *state_;
  absl::MutexLock lock(&s.mu);
  if (rank < 0 || rank >= s.size || s.aborted[rank]) return;
  s.aborted[rank] = true;
  for (int r = 0; r < s.size; ++r) {
    s.recv_cv[r].SignalAll();
    s.send_cv[r].SignalAll();
  }
  // Its collective groups fail too, as a real group does when a member's process is gone.
  for (auto& [name, group] : s.groups) {
    if (std::find(group.first.begin(), group.first.end(), rank) != group.first.end()) {
      group.second->Abort();
    }
  }
}

}  // namespace octopipe::executor
