// Time, behind one small interface (docs/contributing.md, "Tests"), so every deadline, interval
// and budget that drives a decision can be tested on a fake clock (core/fake_clock.h, testonly)
// without sleeps.
//
// Clock::NowSeconds is monotonic time in seconds from an arbitrary origin: use it for
// intervals, budgets and deadlines only, never as a timestamp. Timestamps stored in records
// (job creation, plan versions, job events, agent registration) come from UnixMillis(), the wall
// clock.
//
// A Clock only reads time; code that must block until a deadline (a condition variable, a
// socket timeout) still blocks in real time and re-checks the Clock when it wakes.
//
// Who reads time through a Clock (each is given a `const Clock*`; where it is an option, null
// means RealClock::Default()):
//   planner    the failure detector (AgentRegistry) and the re-plan cooldown (JobManager), the
//              one-shot Plan RPC's time queued and tuning (ServiceOptions::clock), a follower's
//              etcd queries for the leader's address (LeadershipOptions::clock);
//   tuner      the time budget (TunerOptions::clock; `plan --budget_clock=reads` gives it a
//              ReadCountingClock, below);
//   agent      heartbeat interval, back-off, job polls, the wait for peers' checkpoint layers
//              after a clean stop, and the plan-switch time it reports (AgentOptions::clock);
//   executor   the TCP store's connect deadline (GlooOptions::clock, a shared_ptr) and the
//              NCCL transport's creation / Send / Recv deadlines, which poll (NcclOptions::clock).
// What stays on std::chrono / absl time on purpose:
//   - measurements that decide nothing, only reported: the engine's per-op and per-iteration
//     times (executor/engine.cc: they must also be std::chrono::steady_clock itself, because the
//     ranks' op times are aligned across processes by its epoch, IterationStats::start_steady_s,
//     which a per-process Clock origin would break, and a virtual call per op read adds cost to
//     the hot loop for nothing), checkpoint seconds (executor/trainer.cc), the agent's own
//     bookkeeping per iteration (worker_agent/rank_main.cc), RPC latencies (rpc_log.cc), and
//     `octopipe profile`'s and the benchmarks' timings;
//   - waits that block in real time inside a library: Gloo's own send/receive and rendezvous
//     timeouts (GlooTransport), the in-process transport's condition-variable deadlines
//     (InProcTransport, the threads' test fake: nothing polls there to re-read a clock), the TCP
//     store server's wait, socket timeouts;
//   - gRPC deadlines (the agent's and the CLI's calls, the server's shutdown, the service reading
//     a call's remaining time): gRPC keeps them on the system clock itself.
//
// Thread safety: implementations must be safe to call from any thread. RealClock is
// stateless; FakeClock locks.
#ifndef OCTOPIPE_CORE_CLOCK_H_
#define OCTOPIPE_CORE_CLOCK_H_

#include <atomic>
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

// A clock that advances `seconds_per_read` each time it is read: a budget on it is counted in
// reads, not in time, so a single-threaded search that reads it at fixed points of its work
// stops at the same point on every machine and under any load (`plan --budget_clock=reads`).
// Thread-safe (an atomic counter).
class ReadCountingClock : public Clock {
 public:
  explicit ReadCountingClock(double seconds_per_read) : seconds_per_read_(seconds_per_read) {}
  double NowSeconds() const override {
    return static_cast<double>(reads_.fetch_add(1, std::memory_order_relaxed)) * seconds_per_read_;
  }

 private:
  const double seconds_per_read_;
  mutable std::atomic<int64_t> reads_{0};
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
