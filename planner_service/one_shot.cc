#include "planner_service/one_shot.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace octopipe::planner {
namespace {

absl::Status DeadlinePassedInQueue(double budget_s) {
  return absl::DeadlineExceededError(absl::StrFormat(
      "the call's deadline (its time budget of %.3f s or its gRPC deadline) passed while it "
      "waited in the queue; retry later or allow more time",
      budget_s));
}

absl::Status ShuttingDown() {
  return absl::UnavailableError("the planner is shutting down; retry on another replica");
}

void Call(const std::function<void()>& hook) {
  if (hook) hook();
}

}  // namespace

OneShotPlanner::OneShotPlanner(TuningPool* pool, const Clock* clock, OneShotOptions options,
                               OneShotHooks hooks)
    : pool_(pool),
      clock_(clock),
      options_(std::move(options)),
      hooks_(std::move(hooks)),
      cache_(options_.cache_entries, options_.cache_bytes),
      expiry_(clock, options_.expiry_thread) {}

LoadSnapshot OneShotPlanner::Load() const {
  LoadSnapshot load;
  load.queued = pool_->queued(TuningPool::Lane::kJobs) + pool_->queued(TuningPool::Lane::kOneShot);
  load.tasks_ahead = load.queued + pool_->running();
  load.workers = pool_->threads();
  load.typical_task_s = task_time_.Get();
  return load;
}

void OneShotPlanner::Plan(const PlanCacheKey& key, PlanningInput input, double arrival_s,
                          double client_remaining_s, std::function<bool()> cancelled,
                          Done done) {
  const double deadline = CallDeadline(arrival_s, input.tuner.time_budget_s, client_remaining_s,
                                       options_.admission);
  // What this call can use at most: its budget, or less when the client's deadline is nearer.
  input.tuner.time_budget_s = std::min(input.tuner.time_budget_s, deadline - arrival_s);
  const double budget = input.tuner.time_budget_s;
  const LoadSnapshot load = Load();
  // A cached answer serves when it was tuned with (95% of) the budget this call would get.
  const double would_get = StartBudget(arrival_s, deadline, budget, load, options_.admission);
  if (std::optional<proto::PlanResult> hit = cache_.Lookup(key, 0.95 * would_get)) {
    if (hooks_.on_cache_lookup) hooks_.on_cache_lookup(true);
    OneShotAnswer answer;
    answer.result = std::move(*hit);
    answer.from_cache = true;
    done(std::move(answer));
    return;
  }
  if (hooks_.on_cache_lookup) hooks_.on_cache_lookup(false);
  if (JoinInFlight(key, done)) return;
  if (absl::Status admitted = Admit(arrival_s, deadline, budget, load, options_.admission);
      !admitted.ok()) {
    Refuse(key, admitted, done);
    return;
  }
  auto shared = std::make_shared<PlanningInput>(std::move(input));
  TuningPool* pool = pool_;
  std::function<bool()> should_stop = [cancelled = std::move(cancelled), pool] {
    return (cancelled && cancelled()) || pool->stopping();
  };
  // Still queued at its deadline: answered then, and the task is skipped when a worker gets to
  // it (admission's wait estimate can be wrong; the deadline must hold anyway).
  std::shared_ptr<QueueExpiry::Ticket> ticket = expiry_.Add(deadline, [this, key, budget, done] {
    Refuse(key, DeadlinePassedInQueue(budget), done);
  });
  const bool queued = pool_->TrySubmit(
      [this, shared, key, deadline, should_stop, ticket, done] {
        Call(hooks_.on_queue_change);  // a slot is free again
        if (!QueueExpiry::Claim(*ticket)) return;  // answered at its deadline already
        Run(*shared, key, deadline, should_stop, done);
      },
      TuningPool::Lane::kOneShot);
  Call(hooks_.on_queue_change);
  if (!queued) {
    QueueExpiry::Claim(*ticket);  // answered here, not at the deadline
    Refuse(key,
           pool_->stopping() ? ShuttingDown()
                             : absl::ResourceExhaustedError(absl::StrCat(
                                   "one-shot Plan queue is full (", pool_->max_queued(),
                                   " calls waiting); retry later")),
           done);
  }
}

bool OneShotPlanner::JoinInFlight(const PlanCacheKey& key, const Done& done) {
  absl::MutexLock lock(&mu_);
  auto it = in_flight_.find(key);
  if (it == in_flight_.end()) {
    in_flight_.emplace(key, std::vector<Done>());
    return false;
  }
  it->second.push_back(done);
  return true;
}

void OneShotPlanner::FinishJoined(const PlanCacheKey& key, const absl::Status& status,
                                  const proto::PlanResult* result, double tuning_budget_s) {
  std::vector<Done> joined;
  {
    absl::MutexLock lock(&mu_);
    auto it = in_flight_.find(key);
    if (it == in_flight_.end()) return;
    joined = std::move(it->second);
    in_flight_.erase(it);
  }
  for (const Done& d : joined) {
    OneShotAnswer answer;
    answer.status = status;
    if (status.ok() && result != nullptr) {
      answer.result = *result;
      answer.from_cache = true;
      answer.tuning_budget_s = tuning_budget_s;
    }
    d(std::move(answer));
  }
}

void OneShotPlanner::Refuse(const PlanCacheKey& key, const absl::Status& status,
                            const Done& done) {
  FinishJoined(key, status, nullptr, 0);
  OneShotAnswer answer;
  answer.status = status;
  done(std::move(answer));
}

void OneShotPlanner::Run(const PlanningInput& input, const PlanCacheKey& key, double deadline_s,
                         const std::function<bool()>& should_stop, const Done& done) {
  const double start = clock_->NowSeconds();
  const double budget = input.tuner.time_budget_s;
  const double tuning_budget = StartBudget(start, deadline_s, budget, Load(), options_.admission);
  absl::StatusOr<proto::PlanResult> r;
  if (tuning_budget <= 0) {
    r = DeadlinePassedInQueue(budget);
  } else {
    PlanningInput degraded = input;
    degraded.tuner.time_budget_s = tuning_budget;
    r = RunPlanning(degraded, {}, should_stop);
    task_time_.Add(clock_->NowSeconds() - start);
  }
  OneShotAnswer answer;
  if (r.ok()) {
    cache_.Put(key, *r, tuning_budget);
    FinishJoined(key, absl::OkStatus(), &*r, tuning_budget);
    if (hooks_.on_tuned) hooks_.on_tuned(*r);
    answer.result = std::move(*r);
    answer.tuning_budget_s = tuning_budget;
  } else {
    answer.status = r.status();
    if (answer.status.code() == absl::StatusCode::kCancelled && pool_->stopping()) {
      answer.status = ShuttingDown();
    } else if (answer.status.code() == absl::StatusCode::kCancelled) {
      // The leading client went away; the others that joined have not: they retry.
      FinishJoined(key,
                   absl::UnavailableError("an identical call this one joined was cancelled; retry"),
                   nullptr, 0);
    }
    FinishJoined(key, answer.status, nullptr, 0);
  }
  done(std::move(answer));
}

}  // namespace octopipe::planner
