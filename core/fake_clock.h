// A Clock that moves only when a test moves it, so timeouts, deadlines and budgets are tested
// without sleeps. Starts at `start_s` (default 0) and stays there until Advance/Set. (A clock
// that advances with every reading, so that a polling loop runs out of its budget after a fixed
// number of readings, is ReadCountingClock in core/clock.h.)
//
// Thread-safe: Advance/Set may race with NowSeconds from other threads. Set may move time
// backwards (a real Clock never does); tests that do so are testing the caller's tolerance of
// that, on purpose.
#ifndef OCTOPIPE_CORE_FAKE_CLOCK_H_
#define OCTOPIPE_CORE_FAKE_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/clock.h"

namespace octopipe {

class FakeClock : public Clock {
 public:
  explicit FakeClock(double start_s = 0) : now_s_(start_s) {}

  double NowSeconds() const override {
    absl::MutexLock lock(&mu_);
    return now_s_;
  }
  void Advance(double s) {
    absl::MutexLock lock(&mu_);
    now_s_ += s;
  }
  void Set(double s) {
    absl::MutexLock lock(&mu_);
    now_s_ = s;
  }

 private:
  mutable absl::Mutex mu_;
  double now_s_ ABSL_GUARDED_BY(mu_);
};

}  // namespace octopipe

#endif  // OCTOPIPE_CORE_FAKE_CLOCK_H_
