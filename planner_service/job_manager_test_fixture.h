// The shared part of JobManager's tests (job_manager_lifecycle_test, job_manager_replan_test,
// job_manager_vocab_test): a small real job, its predicted stage times and a report of them,
// the Watch recorder and the JobManagerTest fixture.
//
// Everything is real except the clock: a SQLite Store on a file under TEST_TMPDIR, a
// TuningPool, and the tuner on a small real model (Llama-3 8B, 8 micro-batches, 4 H100s; it
// tunes in well under a second). Plans are awaited through Watch callbacks recorded under a
// mutex (absl::Mutex::Await): no sleeps. Waits carry a generous timeout only so that a broken
// manager fails the test instead of hanging it.
#ifndef OCTOPIPE_PLANNER_SERVICE_JOB_MANAGER_TEST_FIXTURE_H_
#define OCTOPIPE_PLANNER_SERVICE_JOB_MANAGER_TEST_FIXTURE_H_

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "core/cluster.h"
#include "core/fake_clock.h"
#include "gtest/gtest.h"
#include "planner_service/job_convert.h"
#include "planner_service/job_manager.h"
#include "planner_service/sqlite_store.h"
#include "planner_service/tuning_pool.h"
#include "proto/planner.pb.h"
#include "simulator/problem.h"

namespace octopipe::planner {

inline constexpr absl::Duration kTimeout = absl::Seconds(60);

// Llama-3 8B, 8 micro-batches, on `devices` devices of `cluster` (0: all). The tuner converges
// in a fraction of a second; the budget is only a ceiling, kept well above that so that a loaded
// machine does not cut the search short (the tuner is deterministic when it is not cut short).
// Without the vocabulary split unless `vocab_parallel` says otherwise (AUTO, ON): the
// re-plan tests (job_manager_replan_test) pin the adoption of plans that keep the head on its
// stage.
proto::CreateJobRequest SmallJob(const std::string& name, const Cluster& cluster,
                                 int devices = 4,
                                 proto::VocabParallelChoice vocab_parallel =
                                     proto::VOCAB_PARALLEL_OFF);

// The h100-1node preset: one node of H100s.
Cluster OneNode();

// node0 and node1, two H100s each.
Cluster TwoNodes();

// node0 .. node3, one H100 each.
Cluster FourOneGpuNodes();

// Makes `request` an agent job: the reference model agents train (a tiny scan / attention /
// MoE / head pattern) for `iterations` iterations.
void SetAgentTraining(proto::CreateJobRequest* request, int64_t iterations);

// The chosen one of a node-loss re-plan's options (null, with a test failure, unless exactly
// one is). It is the quickest (least total_s), or a survivors' option that the quicker new
// layout did not beat by `min_gain` (the re-plan margin; the default JobManagerOptions'), and
// then the new layout's summary says so.
const proto::NodeLossOption* ExpectChosenOption(
    const proto::PlanResult& result, double min_gain = JobManagerOptions{}.replan.min_gain);

// Per-stage predicted seconds of a plan version under calibration `factors`, computed as the
// manager does (so a report of exactly these times has no deviation).
absl::StatusOr<PipelineProblem> Predicted(const proto::CreateJobRequest& job,
                                          const proto::PlanVersion& v,
                                          const std::vector<double>& factors);

// A report of F, B and W per stage: the predicted seconds times `slow` on every stage of
// `slow_stage`'s device (a slow GPU; the tuner's plans often hold several stages per device,
// and one of them slow alone may not be worth a new plan) and times `others` on every other
// stage (-1: none slow); with the head split, every device's S and T pass (stage = device)
// times `vocab` (< 0: `others`).
proto::ReportStageTimesRequest Report(const std::string& job_id, int64_t version,
                                      const PipelineProblem& p, int slow_stage, double slow,
                                      double others, double vocab = -1);

// What Watch delivered, per job; filled from the planning threads (and from inside Watch).
class Recorder {
 public:
  void OnVersion(const proto::PlanVersion& v) {
    absl::MutexLock lock(&mu_);
    versions_[v.job_id()].push_back(v);
  }
  void OnEnd(const std::string& job_id) {
    absl::MutexLock lock(&mu_);
    ended_[job_id] = true;
  }
  // Waits until `job_id` has received `n` versions; returns the n-th, or nothing on timeout.
  absl::StatusOr<proto::PlanVersion> WaitForVersion(const std::string& job_id, size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, &job_id, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return versions_[job_id].size() >= n;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&enough), kTimeout)) {
      return absl::DeadlineExceededError(
          absl::StrCat(job_id, ": version #", n, " never arrived"));
    }
    return versions_[job_id][n - 1];
  }
  std::vector<proto::PlanVersion> versions(const std::string& job_id) {
    absl::MutexLock lock(&mu_);
    return versions_[job_id];
  }
  bool ended(const std::string& job_id) {
    absl::MutexLock lock(&mu_);
    return ended_[job_id];
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::vector<proto::PlanVersion>> versions_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, bool> ended_ ABSL_GUARDED_BY(mu_);
};

class JobManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name(), ".db");
    std::remove(path_.c_str());
    Open();
  }

  // The pool must stop (running what is queued) before the manager its tasks point at goes.
  void TearDown() override {
    if (!release_.HasBeenNotified()) release_.Notify();
    Close();
  }

  // One tuning thread, so a task submitted after others runs after them (see Drain).
  void Open(int max_queued = 16, JobManagerOptions options = {}) {
    absl::StatusOr<std::unique_ptr<Store>> store = SqliteStore::Open(path_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    pool_ = std::make_unique<TuningPool>(/*threads=*/1, max_queued);
    manager_ = std::make_unique<JobManager>(store_.get(), pool_.get(), &clock_, options);
  }

  void Close() {
    if (pool_) pool_->Shutdown();
    manager_.reset();
    pool_.reset();
    store_.reset();
  }

  // The manager's calls with their answers in the wire form the service gives them
  // (job_convert.h), so the assertions below pin what a client sees.
  absl::StatusOr<proto::Job> Create(const proto::CreateJobRequest& request) {
    absl::StatusOr<JobRecord> job = manager_->Create(NewJobFromProto(request));
    if (!job.ok()) return job.status();
    return JobToProto(*job);
  }
  absl::StatusOr<proto::GetJobResponse> Get(const std::string& job_id) {
    absl::StatusOr<JobSnapshot> got = manager_->Get(job_id);
    if (!got.ok()) return got.status();
    return GetJobResponseOf(got->job, got->current ? &*got->current : nullptr);
  }
  std::vector<proto::Job> List() {
    std::vector<proto::Job> out;
    for (const JobRecord& job : manager_->List()) out.push_back(JobToProto(job));
    return out;
  }
  absl::StatusOr<proto::ListJobsResponse> ListPage(int page_size, const std::string& token) {
    return ListJobsPage(manager_->List(), page_size, token);
  }
  absl::StatusOr<std::vector<proto::Job>> StoredJobs() {
    absl::StatusOr<std::vector<JobRecord>> jobs = store_->LoadJobs();
    if (!jobs.ok()) return jobs.status();
    std::vector<proto::Job> out;
    for (const JobRecord& job : *jobs) out.push_back(JobToProto(job));
    return out;
  }

  // Subscribes the recorder to the job from `after_version`.
  absl::StatusOr<int64_t> Watch(const std::string& job_id, int64_t after_version = 0) {
    return manager_->Watch(
        job_id, after_version, [this](const proto::PlanVersion& v) { recorder_.OnVersion(v); },
        [this, job_id] { recorder_.OnEnd(job_id); });
  }

  // Creates the job, watches it and waits for its first plan version.
  struct WatchedJob {
    std::string id;
    proto::PlanVersion v1;
  };
  absl::StatusOr<WatchedJob> CreateAndWatch(const proto::CreateJobRequest& request) {
    absl::StatusOr<proto::Job> job = Create(request);
    if (!job.ok()) return job.status();
    if (absl::StatusOr<int64_t> w = Watch(job->id()); !w.ok()) return w.status();
    absl::StatusOr<proto::PlanVersion> v1 = recorder_.WaitForVersion(job->id(), 1);
    if (!v1.ok()) return v1.status();
    return WatchedJob{job->id(), *std::move(v1)};
  }

  // Waits until every task queued so far on the (single-threaded) pool has run.
  void Drain() {
    // Shared: if the wait times out, the task may still notify later.
    auto done = std::make_shared<absl::Notification>();
    pool_->Submit([done] { done->Notify(); });
    ASSERT_TRUE(done->WaitForNotificationWithTimeout(kTimeout));
  }

  // Occupies the pool's one worker until release_ is notified.
  void BlockWorker() {
    auto started = std::make_shared<absl::Notification>();
    pool_->Submit([this, started] {
      started->Notify();
      release_.WaitForNotification();
    });
    ASSERT_TRUE(started->WaitForNotificationWithTimeout(kTimeout));
  }

  std::vector<double> Factors(const std::string& job_id) {
    absl::StatusOr<std::vector<double>> f = store_->LoadCalibration(job_id);
    EXPECT_TRUE(f.ok()) << f.status();
    return f.ok() ? *f : std::vector<double>();
  }

  std::string path_;
  FakeClock clock_{1000};
  Recorder recorder_;  // outlives the pool: tasks may call into it until Close
  absl::Notification release_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<TuningPool> pool_;
  std::unique_ptr<JobManager> manager_;
};

}  // namespace octopipe::planner

#endif  // OCTOPIPE_PLANNER_SERVICE_JOB_MANAGER_TEST_FIXTURE_H_
