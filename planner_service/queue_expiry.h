// QueueExpiry: answers a queued call at its deadline when no worker has started it yet.
//
// Admission control (admission.h) refuses what its estimate says cannot be met, but the estimate
// can be wrong: a call admitted behind slow tasks would otherwise wait until a worker takes it
// and only then learn that its deadline passed. Each queued call gets a Ticket; whichever comes
// first wins, exactly once:
//   - the worker calls Claim(ticket) when it starts the task: true means "run it";
//   - the deadline passes first: the expiry thread runs the ticket's `on_expire` (which answers
//     the call DEADLINE_EXCEEDED), and the worker's later Claim returns false (skip the task).
//
// Time comes from the injected Clock (core/clock.h). The thread blocks in real time and
// re-checks the clock when it wakes, at most every `max_wait_s`; tests on a FakeClock construct
// it without the thread and call Poll() after advancing the clock.
//
// Thread-safe. `on_expire` runs on the expiry thread (or the Poll caller) without locks held.
#ifndef OCTOPIPE_PLANNER_SERVICE_QUEUE_EXPIRY_H_
#define OCTOPIPE_PLANNER_SERVICE_QUEUE_EXPIRY_H_

#include <atomic>
#include <functional>
#include <memory>
#include <queue>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/clock.h"

namespace octopipe::planner {

class QueueExpiry {
 public:
  class Ticket {
   public:
    explicit Ticket(std::function<void()> on_expire) : on_expire_(std::move(on_expire)) {}

   private:
    friend class QueueExpiry;
    enum State : int { kQueued = 0, kClaimed = 1, kExpired = 2 };
    std::atomic<int> state_{kQueued};
    std::function<void()> on_expire_;
  };

  // `clock` null: the real one. `start_thread` false: nothing expires until Poll() is called.
  explicit QueueExpiry(const Clock* clock, bool start_thread = true, double max_wait_s = 0.05);
  ~QueueExpiry();  // Shutdown()
  QueueExpiry(const QueueExpiry&) = delete;
  QueueExpiry& operator=(const QueueExpiry&) = delete;

  // Registers a queued call whose deadline is `deadline_s` on the clock.
  std::shared_ptr<Ticket> Add(double deadline_s, std::function<void()> on_expire);
  // The worker starting the call: true when it should run, false when it already expired.
  static bool Claim(Ticket& ticket);
  // Expires every unclaimed ticket whose deadline has passed; the number expired.
  int Poll();
  // Stops the thread; tickets not yet expired stay with their workers (Claim returns true).
  void Shutdown();

  // Tickets held: queued ones, and claimed ones whose deadline has not come yet.
  int held() const;

 private:
  struct Entry {
    double deadline_s;
    std::shared_ptr<Ticket> ticket;
    bool operator>(const Entry& o) const { return deadline_s > o.deadline_s; }
  };
  void Loop();

  const Clock& clock_;
  const double max_wait_s_;
  mutable absl::Mutex mu_;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace octopipe::planner

#endif  // OCTOPIPE_PLANNER_SERVICE_QUEUE_EXPIRY_H_
