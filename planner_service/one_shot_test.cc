// OneShotPlanner without gRPC: answers from the cache, identical calls sharing one tuning task,
// a full queue, a call still queued at its deadline, and a cancelled leading call — each
// answered exactly once, on a real TuningPool with an injected clock.
#include "planner_service/one_shot.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "core/cluster_presets.h"
#include "core/convert.h"
#include "core/fake_clock.h"
#include "core/synthetic_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace octopipe::planner {
namespace {

using ::testing::HasSubstr;

// A small request: 8 synthetic layers on 2 devices, a 0.5 s budget (the tuner converges far
// sooner on this size).
proto::PlanRequest SmallRequest(uint64_t seed = 1) {
  proto::PlanRequest r;
  *r.mutable_model() = ModelToProto(*ParseSyntheticModel("layers=8,f=0.01,b=0.01,w=0.01"));
  *r.mutable_cluster() = ClusterToProto(*ClusterPreset("h100-1node"));
  r.mutable_options()->set_num_devices(2);
  r.mutable_options()->set_num_microbatches(4);
  r.mutable_options()->set_time_budget_s(0.5);
  r.mutable_options()->set_seed(seed);
  return r;
}

PlanningInput InputOf(const proto::PlanRequest& r) {
  absl::StatusOr<PlanningInput> in =
      PrepareInput(r.model(), r.cluster(), r.options(), {}, PlanningLimits());
  EXPECT_TRUE(in.ok()) << in.status();
  return *in;
}

// Collects answers; Wait blocks until `n` have come.
class Answers {
 public:
  std::function<void(OneShotAnswer)> Sink() {
    return [this](OneShotAnswer a) {
      absl::MutexLock lock(&mu_);
      got_.push_back(std::move(a));
    };
  }
  std::vector<OneShotAnswer> Wait(size_t n) {
    absl::MutexLock lock(&mu_);
    std::pair<std::vector<OneShotAnswer>*, size_t> want(&got_, n);
    mu_.Await(absl::Condition(
        +[](std::pair<std::vector<OneShotAnswer>*, size_t>* w) {
          return w->first->size() >= w->second;
        },
        &want));
    return got_;
  }
  size_t size() {
    absl::MutexLock lock(&mu_);
    return got_.size();
  }

 private:
  absl::Mutex mu_;
  std::vector<OneShotAnswer> got_ ABSL_GUARDED_BY(mu_);
};

struct Fixture {
  explicit Fixture(int max_queued = 8)
      : pool(1, max_queued),
        planner(&pool, &clock, OneShotOptions{AdmissionOptions(), 16, 1 << 20, false},
                OneShotHooks{[this](bool hit) { (hit ? hits : misses)++; },
                             [this](const proto::PlanResult&) { tuned++; }, nullptr}) {}
  // Occupies the pool's one worker until Release(): calls queue behind it.
  void Block() {
    ASSERT_TRUE(pool.TrySubmit([this] { release.WaitForNotification(); },
                               TuningPool::Lane::kJobs));
  }
  void Release() { release.Notify(); }
  void Call(const proto::PlanRequest& r, Answers* into, std::function<bool()> cancelled = {}) {
    planner.Plan(KeyOf(r), InputOf(r), clock.NowSeconds(),
                 std::numeric_limits<double>::infinity(), std::move(cancelled), into->Sink());
  }

  FakeClock clock{100};
  absl::Notification release;
  std::atomic<int> hits{0}, misses{0}, tuned{0};
  TuningPool pool;
  OneShotPlanner planner;  // after the pool: destroyed first
};

TEST(OneShotPlannerTest, AnIdenticalRequestIsAnsweredFromTheCache) {
  Fixture f;
  Answers first, second;
  f.Call(SmallRequest(), &first);
  const OneShotAnswer a = first.Wait(1)[0];
  ASSERT_TRUE(a.status.ok()) << a.status;
  EXPECT_FALSE(a.from_cache);
  EXPECT_DOUBLE_EQ(a.tuning_budget_s, 0.5);
  f.Call(SmallRequest(), &second);
  const OneShotAnswer b = second.Wait(1)[0];  // answered on this thread
  ASSERT_TRUE(b.status.ok()) << b.status;
  EXPECT_TRUE(b.from_cache);
  EXPECT_EQ(b.result.SerializeAsString(), a.result.SerializeAsString());
  EXPECT_EQ(f.hits, 1);
  EXPECT_EQ(f.misses, 1);
  EXPECT_EQ(f.tuned, 1);
}

TEST(OneShotPlannerTest, IdenticalCallsInFlightShareOneTuningTask) {
  Fixture f;
  f.Block();
  Answers lead, joined, other;
  f.Call(SmallRequest(), &lead);
  f.Call(SmallRequest(), &joined);   // the same key: waits for the first
  f.Call(SmallRequest(2), &other);   // another seed: its own task
  EXPECT_EQ(lead.size() + joined.size() + other.size(), 0u);
  f.Release();
  const OneShotAnswer a = lead.Wait(1)[0], b = joined.Wait(1)[0], c = other.Wait(1)[0];
  ASSERT_TRUE(a.status.ok() && b.status.ok() && c.status.ok());
  EXPECT_FALSE(a.from_cache);
  EXPECT_TRUE(b.from_cache);
  EXPECT_EQ(b.result.SerializeAsString(), a.result.SerializeAsString());
  EXPECT_EQ(b.tuning_budget_s, a.tuning_budget_s);
  EXPECT_FALSE(c.from_cache);
  EXPECT_EQ(f.tuned, 2);
}

TEST(OneShotPlannerTest, AFullQueueIsRefusedNamingItsSize) {
  Fixture f(/*max_queued=*/1);
  f.Block();
  Answers queued, refused;
  f.Call(SmallRequest(), &queued);
  f.Call(SmallRequest(2), &refused);
  const OneShotAnswer r = refused.Wait(1)[0];
  EXPECT_EQ(r.status.code(), absl::StatusCode::kResourceExhausted) << r.status;
  EXPECT_THAT(std::string(r.status.message()),
              HasSubstr("one-shot Plan queue is full (1 calls waiting)"));
  f.Release();
  EXPECT_TRUE(queued.Wait(1)[0].status.ok());
}

TEST(OneShotPlannerTest, ACallStillQueuedAtItsDeadlineIsAnsweredThenAndNeverTuned) {
  Fixture f;
  f.Block();
  Answers late, joined;
  f.Call(SmallRequest(), &late);
  f.Call(SmallRequest(), &joined);
  EXPECT_EQ(f.planner.PollExpiry(), 0);  // not yet
  f.clock.Advance(0.6);                  // past the 0.5 s budget
  EXPECT_EQ(f.planner.PollExpiry(), 1);
  for (Answers* a : {&late, &joined}) {
    const OneShotAnswer x = a->Wait(1)[0];
    EXPECT_EQ(x.status.code(), absl::StatusCode::kDeadlineExceeded) << x.status;
    EXPECT_THAT(std::string(x.status.message()),
                HasSubstr("passed while it waited in the queue"));
  }
  f.Release();
  // The worker skips the expired task: run a fresh call after it and see nothing else tuned.
  Answers next;
  f.Call(SmallRequest(3), &next);
  EXPECT_TRUE(next.Wait(1)[0].status.ok());
  EXPECT_EQ(f.tuned, 1);
  EXPECT_EQ(late.size(), 1u);
  EXPECT_EQ(joined.size(), 1u);
}

TEST(OneShotPlannerTest, WhenTheLeadingCallIsCancelledTheJoinedOnesAreToldToRetry) {
  Fixture f;
  f.Block();
  Answers lead, joined;
  std::atomic<bool> cancelled{false};
  f.Call(SmallRequest(), &lead, [&cancelled] { return cancelled.load(); });
  f.Call(SmallRequest(), &joined);
  cancelled = true;
  f.Release();
  EXPECT_EQ(lead.Wait(1)[0].status.code(), absl::StatusCode::kCancelled);
  const OneShotAnswer j = joined.Wait(1)[0];
  EXPECT_EQ(j.status.code(), absl::StatusCode::kUnavailable) << j.status;
  EXPECT_THAT(std::string(j.status.message()),
              HasSubstr("an identical call this one joined was cancelled; retry"));
  EXPECT_EQ(f.tuned, 0);
}

}  // namespace
}  // namespace octopipe::planner
