// Time, behind one small interface (STYLE.md 7), so every deadline and budget — the service's
// failure detector and re-plan policy, the tuner's time budget, the transports' connect and
// wait timeouts — can be tested on a fake clock (core/fake_clock.h, testonly) without sleeps.
//
// Clock::NowSeconds is monotonic time in seconds from an arbitrary origin: use it for
// intervals, budgets and deadlines only, never as a timestamp. Timestamps stored in records
// (job creation, plan versions, agent registration) come from UnixMillis(), the wall clock.
//
// A Clock only reads time; code that must block until a deadline (a condition variable, a
// socket timeout) still blocks in real time and re-checks the Clock when it wakes.
//
// Thread safety: implementations must be safe to call from any thread. RealClock is
// stateless; FakeClock locks.
#ifndef OCTOPIPE_CORE_CLOCK_H_
#define OCTOPIPE_CORE_CLOCK_H_

#include <cstdint>

namespace octopipe {

class Clock {
 public:
  virtual ~Clock();
  // Seconds on a monotonic clock; never decreases between calls.
  virtual double NowSeconds() const = 0;
};

// std::chrono::steady_clock.
class RealClock : public Clock {
 public:
  double NowSeconds() const override;
  // One shared instance, for callers given no clock (never destroyed; safe from any thread).
  static const Clock& Default();
};

// `clock` when given, otherwise RealClock::Default(): how an options struct's optional clock
// (a null pointer meaning "the real one") is read.
inline const Clock& ClockOrReal(const Clock* clock) {
  return clock != nullptr ? *clock : RealClock::Default();
}

// Milliseconds since the Unix epoch on the system (wall) clock; for timestamps in records.
int64_t UnixMillis();

}  // namespace octopipe

#endif  // OCTOPIPE_CORE_CLOCK_H_
