#include "planner_service/queue_expiry.h"

#include <algorithm>
#include <utility>

#include "absl/time/time.h"

namespace octopipe::planner {

QueueExpiry::QueueExpiry(const Clock* clock, bool start_thread, double max_wait_s)
    : clock_(ClockOrReal(clock)), max_wait_s_(max_wait_s) {
  if (start_thread) thread_ = std::thread([this] { Loop(); });
}

QueueExpiry::~QueueExpiry() { Shutdown(); }

std::shared_ptr<QueueExpiry::Ticket> QueueExpiry::Add(double deadline_s,
                                                      std::function<void()> on_expire) {
  auto ticket = std::make_shared<Ticket>(std::move(on_expire));
  absl::MutexLock lock(&mu_);
  heap_.push(Entry{deadline_s, ticket});
  return ticket;
}

bool QueueExpiry::Claim(Ticket& ticket) {
  int expected = Ticket::kQueued;
  return ticket.state_.compare_exchange_strong(expected, Ticket::kClaimed);
}

int QueueExpiry::Poll() {
  std::vector<std::shared_ptr<Ticket>> due;
  {
    absl::MutexLock lock(&mu_);
    const double now = clock_.NowSeconds();
    while (!heap_.empty() && heap_.top().deadline_s <= now) {
      due.push_back(heap_.top().ticket);
      heap_.pop();
    }
  }
  int expired = 0;
  for (const std::shared_ptr<Ticket>& t : due) {
    int expected = Ticket::kQueued;
    if (!t->state_.compare_exchange_strong(expected, Ticket::kExpired)) continue;  // started
    ++expired;
    std::function<void()> f = std::move(t->on_expire_);
    if (f) f();
  }
  return expired;
}

void QueueExpiry::Loop() {
  while (true) {
    Poll();
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    double wait_s = max_wait_s_;
    if (!heap_.empty()) {
      wait_s = std::clamp(heap_.top().deadline_s - clock_.NowSeconds(), 0.0, max_wait_s_);
    }
    const bool stopping = mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Seconds(wait_s));
    if (stopping) return;
  }
}

void QueueExpiry::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

int QueueExpiry::held() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(heap_.size());
}

}  // namespace octopipe::planner
