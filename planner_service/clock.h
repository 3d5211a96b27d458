// Time as the planner service sees it, behind a small interface so the failure detector and
// the re-plan policy can be tested on a fake clock without sleeps (STYLE.md 7).
//
// Clock::NowSeconds is monotonic time in seconds from an arbitrary origin: use it for
// intervals and timeouts only, never as a timestamp. Timestamps stored in records (job
// creation, plan versions, agent registration) come from UnixMillis(), the wall clock.
//
// Thread safety: implementations must be safe to call from any thread. RealClock is
// stateless; FakeClock (planner_service/fake_clock.h, testonly) locks.
#ifndef OCTOPIPE_PLANNER_SERVICE_CLOCK_H_
#define OCTOPIPE_PLANNER_SERVICE_CLOCK_H_

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
};

// Milliseconds since the Unix epoch on the system (wall) clock; for timestamps in records.
int64_t UnixMillis();

}  // namespace octopipe

#endif  // OCTOPIPE_PLANNER_SERVICE_CLOCK_H_
