#include "executor/inproc_collective.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace octopipe::executor {

struct InProcGroup::State {
  State(int size, std::string name, double timeout_s)
      : size(size), name(std::move(name)), timeout(absl::Seconds(timeout_s)), calls(size) {}

  // What one member brought to the call in progress.
  struct Call {
    bool here = false;
    float* data = nullptr;  // all-reduce: in and out
    size_t count = 0;
    const float* send = nullptr;  // all-to-all
    float* recv = nullptr;
    std::vector<size_t> send_counts, recv_counts;
  };

  const int size;
  const std::string name;
  const absl::Duration timeout;

  absl::Mutex mu;
  std::vector<Call> calls ABSL_GUARDED_BY(mu);
  int arrived ABSL_GUARDED_BY(mu) = 0;
  uint64_t generation ABSL_GUARDED_BY(mu) = 0;  // calls completed
  absl::Status failure ABSL_GUARDED_BY(mu);     // set by the last arriver when the call is bad
  bool aborted ABSL_GUARDED_BY(mu) = false;
  absl::CondVar done;
};

namespace {

using State = InProcGroup::State;

// The work of one call, done by its last member: kInvalidArgument when the members disagree.
absl::Status Complete(State& s, bool all_to_all) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu) {
  const int n = s.size;
  if (!all_to_all) {
    const size_t count = s.calls[0].count;
    for (int i = 1; i < n; ++i) {
      if (s.calls[i].count != count) {
        return absl::InvalidArgumentError(
            absl::StrCat("inproc collective ", s.name, ": all-reduce of ", count,
                         " floats on member 0 but ", s.calls[i].count, " on member ", i));
      }
    }
    std::vector<float> sum(s.calls[0].data, s.calls[0].data + count);
    for (int i = 1; i < n; ++i) {
      const float* d = s.calls[i].data;
      for (size_t k = 0; k < count; ++k) sum[k] += d[k];
    }
    for (int i = 0; i < n; ++i) std::memcpy(s.calls[i].data, sum.data(), count * sizeof(float));
    return absl::OkStatus();
  }
  for (int i = 0; i < n; ++i) {
    if (s.calls[i].send_counts.size() != static_cast<size_t>(n) ||
        s.calls[i].recv_counts.size() != static_cast<size_t>(n)) {
      return absl::InvalidArgumentError(absl::StrCat("inproc collective ", s.name, ": member ", i,
                                                     " gave counts for other than ", n,
                                                     " members"));
    }
    for (int j = 0; j < n; ++j) {
      if (s.calls[i].send_counts[j] != s.calls[j].recv_counts[i]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "inproc collective ", s.name, ": member ", i, " sends ", s.calls[i].send_counts[j],
            " floats to member ", j, ", which expects ", s.calls[j].recv_counts[i]));
      }
    }
  }
  for (int i = 0; i < n; ++i) {  // i sends
    size_t from = 0;
    for (int j = 0; j < n; ++j) {
      size_t to = 0;
      for (int k = 0; k < i; ++k) to += s.calls[j].recv_counts[k];
      std::memcpy(s.calls[j].recv + to, s.calls[i].send + from,
                  s.calls[i].send_counts[j] * sizeof(float));
      from += s.calls[i].send_counts[j];
    }
  }
  return absl::OkStatus();
}

class Member final : public Collective {
 public:
  Member(std::shared_ptr<State> state, int index) : state_(std::move(state)), index_(index) {}

  int rank() const override { return index_; }
  int size() const override { return state_->size; }
  const std::string& name() const override { return state_->name; }

  absl::Status AllReduceSum(float* data, size_t count) override {
    State::Call call;
    call.data = data;
    call.count = count;
    return Rendezvous(std::move(call), /*all_to_all=*/false);
  }

  absl::Status AllToAllV(const float* send, const std::vector<size_t>& send_counts, float* recv,
                         const std::vector<size_t>& recv_counts) override {
    State::Call call;
    call.send = send;
    call.recv = recv;
    call.send_counts = send_counts;
    call.recv_counts = recv_counts;
    return Rendezvous(std::move(call), /*all_to_all=*/true);
  }

 private:
  absl::Status Rendezvous(State::Call call, bool all_to_all) {
    State& s = *state_;
    absl::MutexLock lock(&s.mu);
    if (s.aborted) {
      return absl::UnavailableError(
          absl::StrCat("inproc collective ", s.name, ": the group was aborted"));
    }
    call.here = true;
    s.calls[index_] = std::move(call);
    const uint64_t generation = s.generation;
    if (++s.arrived == s.size) {
      s.failure = Complete(s, all_to_all);
      for (State::Call& c : s.calls) c = State::Call();
      s.arrived = 0;
      ++s.generation;
      s.done.SignalAll();
      return s.failure;
    }
    const absl::Time deadline = absl::Now() + s.timeout;
    while (s.generation == generation && !s.aborted) {
      if (s.done.WaitWithDeadline(&s.mu, deadline)) break;
    }
    if (s.generation != generation) return s.failure;
    std::vector<int> missing;
    for (int i = 0; i < s.size; ++i) {
      if (!s.calls[i].here) missing.push_back(i);
    }
    // Withdraw, so that the group's state stays consistent for the error paths.
    s.calls[index_] = State::Call();
    --s.arrived;
    if (s.aborted) {
      return absl::UnavailableError(
          absl::StrCat("inproc collective ", s.name, ": the group was aborted"));
    }
    return absl::DeadlineExceededError(absl::StrCat(
        "inproc collective ", s.name, ": member ", index_, " waited ",
        absl::FormatDuration(s.timeout), " for members ", absl::StrJoin(missing, ", ")));
  }

  const std::shared_ptr<State> state_;
  const int index_;
};

}  // namespace

InProcGroup::InProcGroup(int size, std::string name, double timeout_s)
    : state_(std::make_shared<State>(size, std::move(name), timeout_s)) {}

InProcGroup::~InProcGroup() = default;

int InProcGroup::size() const { return state_->size; }

std::unique_ptr<Collective> InProcGroup::Member(int index) {
  if (index < 0 || index >= state_->size) {
    std::fprintf(stderr, "InProcGroup::Member(%d): index must be in [0, %d)\n", index,
                 state_->size);
    std::abort();
  }
  return std::make_unique<class Member>(state_, index);
}

void InProcGroup::Abort() {
  absl::MutexLock lock(&state_->mu);
  state_->aborted = true;
  state_->done.SignalAll();
}

std::unique_ptr<Collective> SoloCollective(const std::string& name) {
  InProcGroup group(1, name);
  return group.Member(0);
}

}  // namespace octopipe::executor
