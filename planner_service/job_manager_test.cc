// Pins JobManager without a server: job lifecycle, validation, the bounded planning queue,
// re-planning on measured stage times (with the policy's cool-down on a FakeClock), node loss
// and return, and recovery from the store.
//
// Everything is real except the clock: a SQLite Store on a file under TEST_TMPDIR, a
// TuningPool, and the tuner on a small real model (Llama-3 8B, 8 micro-batches, 4 H100s; it
// tunes in well under a second). Plans are awaited through Watch callbacks recorded under a
// mutex (absl::Mutex::Await): no sleeps. Waits carry a generous timeout only so that a broken
// manager fails the test instead of hanging it.
#include "planner_service/job_manager.h"

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
#include "core/cluster_presets.h"
#include "core/convert.h"
#include "core/cost_model.h"
#include "core/model_zoo.h"
#include "core/synthetic_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "core/fake_clock.h"
#include "planner_service/agent_jobs.h"
#include "planner_service/job_convert.h"
#include "planner_service/store.h"
#include "planner_service/tuning_pool.h"
#include "simulator/problem_builder.h"

namespace octopipe::planner {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr absl::Duration kTimeout = absl::Seconds(60);

// Llama-3 8B, 8 micro-batches, on `devices` devices of `cluster` (0: all). The tuner converges
// in a fraction of a second; the budget is only a ceiling, kept well above that so that a loaded
// machine does not cut the search short (the tuner is deterministic when it is not cut short).
// Without the vocabulary split unless `vocab_parallel` says otherwise ("auto", "on"): the
// re-plan tests below pin the adoption of plans that keep the head on its stage.
proto::CreateJobRequest SmallJob(const std::string& name, const Cluster& cluster,
                                 int devices = 4, const std::string& vocab_parallel = "off") {
  TrainingOptions t;
  t.num_microbatches = 8;
  proto::CreateJobRequest r;
  r.set_name(name);
  *r.mutable_model() = ModelToProto(*ZooModel("llama3-8b", t));
  *r.mutable_cluster() = ClusterToProto(cluster);
  r.mutable_options()->set_num_devices(devices);
  r.mutable_options()->set_time_budget_s(5);
  r.mutable_options()->set_vocab_parallel(vocab_parallel);
  return r;
}

Cluster OneNode() { return *ClusterPreset("h100-1node"); }

// node0 and node1, two H100s each.
Cluster TwoNodes() {
  Cluster c = *ClusterPreset("h100-4nodes");
  c.nodes.resize(2);
  for (Node& n : c.nodes) n.num_devices = 2;
  return c;
}

// Per-stage predicted seconds of a plan version under calibration `factors`, computed as the
// manager does (so a report of exactly these times has no deviation).
absl::StatusOr<PipelineProblem> Predicted(const proto::CreateJobRequest& job,
                                          const proto::PlanVersion& v,
                                          const std::vector<double>& factors) {
  absl::StatusOr<ModelGraph> model = ModelFromProto(job.model());
  if (!model.ok()) return model.status();
  absl::StatusOr<Cluster> cluster = ClusterFromProto(job.cluster());
  if (!cluster.ok()) return cluster.status();
  absl::StatusOr<Plan> plan = PlanFromProto(v.result().plan());
  if (!plan.ok()) return plan.status();
  absl::StatusOr<ProblemBuilder> builder = ProblemBuilder::Create(
      *model, *cluster, CostModel(), plan->num_devices, factors, plan->vocab_parallel);
  if (!builder.ok()) return builder.status();
  return builder->Build(*plan);
}

// A report of F, B and W per stage: the predicted seconds times `slow` on `slow_stage` and
// times `others` on every other stage; with the head split, every device's S and T pass
// (stage = device) times `vocab` (< 0: `others`).
proto::ReportStageTimesRequest Report(const std::string& job_id, int64_t version,
                                      const PipelineProblem& p, int slow_stage, double slow,
                                      double others, double vocab = -1) {
  proto::ReportStageTimesRequest r;
  r.set_job_id(job_id);
  r.set_plan_version(version);
  r.set_node_id("node0");
  for (int s = 0; s < p.num_stages; ++s) {
    const double f = s == slow_stage ? slow : others;
    for (auto [kind, secs] : {std::pair{"F", p.forward_s[s]}, std::pair{"B", p.backward_input_s[s]},
                              std::pair{"W", p.weight_grad_s[s]}}) {
      if (secs <= 0) continue;
      proto::StageTime* t = r.add_times();
      t->set_stage(s);
      t->set_op_kind(kind);
      t->set_seconds(secs * f);
      t->set_samples(8);
    }
  }
  for (int d = 0; p.vocab_parallel && d < p.num_devices; ++d) {
    for (auto [kind, secs] : {std::pair{proto::OP_KIND_S, p.vocab_s_s[d]},
                              std::pair{proto::OP_KIND_T, p.vocab_t_s[d]}}) {
      proto::StageTime* t = r.add_times();
      t->set_stage(d);
      t->set_kind(kind);
      t->set_seconds(secs * (vocab < 0 ? others : vocab));
      t->set_samples(8);
    }
  }
  return r;
}

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
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path_);
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

TEST_F(JobManagerTest, CreateReturnsPlanningThenVersionOneArrivesThroughWatch) {
  absl::StatusOr<proto::Job> job = Create(SmallJob("first", OneNode()));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_FALSE(job->id().empty());
  EXPECT_EQ(job->name(), "first");
  EXPECT_EQ(job->state(), proto::JOB_STATE_PLANNING);
  EXPECT_EQ(job->current_version(), 0);
  // The request left the objective out: the job says which it is, in both forms.
  EXPECT_EQ(job->options().objective_kind(), proto::PLAN_OBJECTIVE_SYNCHRONOUS);
  EXPECT_EQ(job->options().objective(), "synchronous");
  EXPECT_EQ(manager_->num_jobs(), 1);
  ASSERT_TRUE(Watch(job->id()).ok());

  absl::StatusOr<proto::PlanVersion> v = recorder_.WaitForVersion(job->id(), 1);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->job_id(), job->id());
  EXPECT_EQ(v->version(), 1);
  EXPECT_EQ(v->reason_kind(), proto::PLAN_REASON_INITIAL);
  EXPECT_EQ(v->reason(), "initial");  // the deprecated text form, still filled
  EXPECT_TRUE(v->result().feasible()) << v->result().infeasible_reason();
  EXPECT_EQ(v->result().plan().num_devices(), 4);
  EXPECT_GT(v->result().plan().predicted().iteration_time_s(), 0);

  absl::StatusOr<proto::GetJobResponse> got = Get(job->id());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->job().state(), proto::JOB_STATE_READY);
  EXPECT_EQ(got->job().current_version(), 1);
  EXPECT_EQ(got->current().SerializeAsString(), v->SerializeAsString());

  // A later watcher gets the current version at once (inside Watch); one that has seen it
  // gets nothing until a new version is made.
  Recorder late;
  absl::StatusOr<int64_t> late_sub = manager_->Watch(
      job->id(), 0, [&late](const proto::PlanVersion& x) { late.OnVersion(x); }, nullptr);
  ASSERT_TRUE(late_sub.ok());
  manager_->Unwatch(*late_sub);  // `late` goes out of scope before the manager
  EXPECT_EQ(late.versions(job->id()).size(), 1u);
  absl::StatusOr<int64_t> seen = Watch(job->id(), /*after_version=*/1);
  ASSERT_TRUE(seen.ok());
  manager_->Unwatch(*seen);
  EXPECT_EQ(recorder_.versions(job->id()).size(), 1u);

  // Persisted before it was announced.
  absl::StatusOr<std::vector<proto::PlanVersion>> stored = store_->LoadPlanVersions(job->id());
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_EQ(stored->size(), 1u);
  EXPECT_EQ((*stored)[0].SerializeAsString(), v->SerializeAsString());
}

// ListJobsPage over List(): summaries (no layers, num_layers set), oldest first, pages joined by tokens that
// survive a delete in between; malformed tokens and sizes are INVALID_ARGUMENT.
TEST_F(JobManagerTest, ListPagesSummariesWithTokens) {
  std::vector<std::string> ids;
  for (const char* name : {"a", "b", "c"}) {
    absl::StatusOr<proto::Job> j = Create(SmallJob(name, OneNode()));
    ASSERT_TRUE(j.ok()) << j.status();
    ids.push_back(j->id());
  }
  absl::StatusOr<proto::ListJobsResponse> page = ListPage(2, "");
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->jobs_size(), 2);
  EXPECT_EQ(page->jobs(0).id(), ids[0]);
  EXPECT_EQ(page->jobs(1).id(), ids[1]);
  EXPECT_EQ(page->jobs(0).model().layers_size(), 0);
  EXPECT_GT(page->jobs(0).num_layers(), 0);
  EXPECT_FALSE(page->jobs(0).model().name().empty());
  ASSERT_FALSE(page->next_page_token().empty());
  ASSERT_TRUE(manager_->Delete(ids[1]).ok());  // the last job of the page goes away
  absl::StatusOr<proto::ListJobsResponse> rest = ListPage(2, page->next_page_token());
  ASSERT_TRUE(rest.ok()) << rest.status();
  ASSERT_EQ(rest->jobs_size(), 1);
  EXPECT_EQ(rest->jobs(0).id(), ids[2]);
  EXPECT_TRUE(rest->next_page_token().empty());
  EXPECT_EQ(ListPage(0, "garbage").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ListPage(5000, "").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ListPage(-1, "").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(JobManagerTest, GetListAndDelete) {
  absl::StatusOr<proto::Job> a = Create(SmallJob("a", OneNode()));
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<proto::Job> b = Create(SmallJob("b", OneNode()));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE(a->id(), b->id());

  std::vector<proto::Job> list = List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].id(), a->id());
  EXPECT_EQ(list[0].name(), "a");
  EXPECT_EQ(list[1].id(), b->id());

  ASSERT_TRUE(Watch(a->id()).ok());
  ASSERT_TRUE(recorder_.WaitForVersion(a->id(), 1).ok());
  absl::StatusOr<proto::GetJobResponse> got = Get(a->id());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->job().name(), "a");

  // Deleting ends the job's watches and removes it everywhere, the store included.
  ASSERT_TRUE(manager_->Delete(a->id()).ok());
  EXPECT_TRUE(recorder_.ended(a->id()));
  EXPECT_FALSE(recorder_.ended(b->id()));
  for (const absl::Status& s :
       {Get(a->id()).status(), manager_->Delete(a->id()),
        Watch(a->id()).status()}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("'" + a->id() + "'"));
  }
  proto::ReportStageTimesRequest report;
  report.set_job_id(a->id());
  report.set_plan_version(1);
  EXPECT_EQ(manager_->ReportStageTimes(report).status().code(), absl::StatusCode::kNotFound);

  list = List();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].id(), b->id());
  EXPECT_EQ(manager_->num_jobs(), 1);
  absl::StatusOr<std::vector<proto::Job>> stored = StoredJobs();
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_EQ(stored->size(), 1u);
  EXPECT_EQ((*stored)[0].id(), b->id());
  absl::StatusOr<std::vector<proto::PlanVersion>> versions = store_->LoadPlanVersions(a->id());
  ASSERT_TRUE(versions.ok());
  EXPECT_THAT(*versions, IsEmpty());

  absl::Status unknown = Get("job-404").status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(unknown.message()), HasSubstr("job-404"));
}

// Agents' events: time-stamped, persisted, the newest 200 kept (oldest first), and streamed to
// the watchers that asked for them, in order.
TEST_F(JobManagerTest, EventsAreStampedPersistedCappedAndStreamed) {
  absl::StatusOr<proto::Job> job = Create(SmallJob("events", OneNode()));
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string id = job->id();
  std::vector<JobEvent> streamed;  // appended under the manager's lock, read after Unwatch
  absl::StatusOr<int64_t> sub = manager_->Watch(
      id, 0, [](const proto::PlanVersion&) {}, nullptr,
      [&streamed](const JobEvent& e) { streamed.push_back(e); });
  ASSERT_TRUE(sub.ok()) << sub.status();
  for (int i = 0; i < 205; ++i) {
    JobEvent e;
    e.kind = "resumed";
    e.node_id = "node0";
    e.iteration = i;
    ASSERT_TRUE(manager_->AddEvent(id, e).ok());
  }
  manager_->Unwatch(*sub);
  ASSERT_EQ(streamed.size(), 205u);
  EXPECT_EQ(streamed.back().iteration, 204);
  EXPECT_GT(streamed.back().unix_ms, 0);
  EXPECT_EQ(manager_->AddEvent("job-404", JobEvent()).code(), absl::StatusCode::kNotFound);

  absl::StatusOr<JobSnapshot> got = manager_->Get(id);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->job.events.size(), 200u);
  EXPECT_EQ(got->job.events.front().iteration, 5);
  EXPECT_EQ(got->job.events.back().iteration, 204);
  absl::StatusOr<std::vector<proto::Job>> stored = StoredJobs();
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_EQ(stored->size(), 1u);
  ASSERT_EQ((*stored)[0].events_size(), 200);
  EXPECT_EQ((*stored)[0].events(0).iteration(), 5);
  EXPECT_EQ((*stored)[0].events(0).kind(), "resumed");
}

TEST_F(JobManagerTest, InvalidRequestsNameTheFieldAndCreateNothing) {
  // A small synthetic model keeps the model itself valid, so the field error is what is left.
  proto::CreateJobRequest small = SmallJob("x", OneNode());
  *small.mutable_model() = ModelToProto(*ParseSyntheticModel("layers=8,f=0.01,b=0.01,w=0.01"));
  ASSERT_TRUE(PrepareInput(small.model(), small.cluster(), small.options(), {},
                           PlanningLimits())
                  .ok());

  struct Case {
    std::string field;
    proto::CreateJobRequest request;
  };
  std::vector<Case> cases;
  cases.push_back({"model.layers[0].kind", small});
  cases.back().request.mutable_model()->mutable_layers(0)->set_kind("transformer");
  cases.push_back({"options.objective", small});
  cases.back().request.mutable_options()->set_objective("fastest");
  cases.push_back({"options.num_devices", small});
  cases.back().request.mutable_options()->set_num_devices(-1);
  cases.push_back({"options.num_microbatches", small});
  cases.back().request.mutable_options()->set_num_microbatches(-2);
  cases.push_back({"options.time_budget_s", small});
  cases.back().request.mutable_options()->set_time_budget_s(-1);
  cases.push_back({"cluster.nodes[0].hardware", small});
  cases.back().request.mutable_cluster()->mutable_nodes(0)->set_hardware("B200");
  for (const Case& c : cases) {
    absl::StatusOr<proto::Job> job = Create(c.request);
    ASSERT_FALSE(job.ok()) << c.field;
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument) << job.status();
    EXPECT_THAT(std::string(job.status().message()), HasSubstr(c.field));
  }
  EXPECT_EQ(manager_->num_jobs(), 0);
  EXPECT_THAT(List(), IsEmpty());
  absl::StatusOr<std::vector<proto::Job>> stored = StoredJobs();
  ASSERT_TRUE(stored.ok());
  EXPECT_THAT(*stored, IsEmpty());
}

TEST_F(JobManagerTest, RequestsOverTheServerLimitsAreResourceExhausted) {
  Close();
  JobManagerOptions options;
  options.limits.max_layers = 4;
  options.limits.max_time_budget_s = 1;
  Open(/*max_queued=*/16, options);
  proto::CreateJobRequest small = SmallJob("x", OneNode());
  *small.mutable_model() = ModelToProto(*ParseSyntheticModel("layers=4,f=0.01,b=0.01,w=0.01"));
  small.mutable_options()->set_time_budget_s(1);

  proto::CreateJobRequest too_many = small;
  *too_many.mutable_model() =
      ModelToProto(*ParseSyntheticModel("layers=5,f=0.01,b=0.01,w=0.01"));
  absl::Status s = Create(too_many).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("model.layers"));

  proto::CreateJobRequest too_long = small;
  too_long.mutable_options()->set_time_budget_s(2);
  s = Create(too_long).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("options.time_budget_s"));
  EXPECT_EQ(manager_->num_jobs(), 0);
}

TEST_F(JobManagerTest, FullQueueRefusesCreateAndCreatesNothing) {
  Close();
  Open(/*max_queued=*/1);
  BlockWorker();

  absl::StatusOr<proto::Job> a = Create(SmallJob("a", OneNode()));
  ASSERT_TRUE(a.ok()) << a.status();  // the one queue slot
  // No plan yet: a report has nothing to compare with.
  proto::ReportStageTimesRequest early;
  early.set_job_id(a->id());
  early.set_plan_version(1);
  absl::Status s = manager_->ReportStageTimes(early).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;

  absl::StatusOr<proto::Job> b = Create(SmallJob("b", OneNode()));
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted) << b.status();
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("queue"));
  EXPECT_EQ(manager_->num_jobs(), 1);
  std::vector<proto::Job> list = List();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].id(), a->id());
  absl::StatusOr<std::vector<proto::Job>> stored = StoredJobs();
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), 1u);
  EXPECT_EQ((*stored)[0].id(), a->id());

  // Once the worker is free the queued job is planned and there is room again.
  ASSERT_TRUE(Watch(a->id()).ok());
  release_.Notify();
  ASSERT_TRUE(recorder_.WaitForVersion(a->id(), 1).ok());
  absl::StatusOr<proto::Job> c = Create(SmallJob("c", OneNode()));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_NE(c->id(), a->id());
  ASSERT_TRUE(Watch(c->id()).ok());
  ASSERT_TRUE(recorder_.WaitForVersion(c->id(), 1).ok());
}

TEST_F(JobManagerTest, SlowStageTriggersAMeasuredVersionSmallDeviationDoesNot) {
  const proto::CreateJobRequest req = SmallJob("replan", TwoNodes());
  absl::StatusOr<proto::Job> job = Create(req);
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string id = job->id();
  ASSERT_TRUE(Watch(id).ok());
  absl::StatusOr<proto::PlanVersion> v1 = recorder_.WaitForVersion(id, 1);
  ASSERT_TRUE(v1.ok()) << v1.status();
  const int stages = v1->result().plan().stages_size();
  ASSERT_GE(stages, 2);

  // 2% slower everywhere: within tolerance, no re-plan.
  absl::StatusOr<PipelineProblem> p = Predicted(req, *v1, {});
  ASSERT_TRUE(p.ok()) << p.status();
  absl::StatusOr<proto::ReportStageTimesResponse> small =
      manager_->ReportStageTimes(Report(id, 1, *p, -1, 1.0, 1.02));
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_FALSE(small->replanned()) << small->decision();
  EXPECT_EQ(small->current_version(), 1);
  EXPECT_THAT(small->decision(), HasSubstr("2.0%"));
  // The measurement is still learnt: every layer now costs 2% more.
  const std::vector<double> after_small = Factors(id);
  ASSERT_EQ(after_small.size(), static_cast<size_t>(req.model().layers_size()));
  for (double f : after_small) EXPECT_NEAR(f, 1.02, 1e-9);

  // Stage 0 30% slower than predicted under that calibration, past the cool-down that starts
  // at the job's first plan: a re-plan.
  clock_.Advance(30);
  p = Predicted(req, *v1, after_small);
  ASSERT_TRUE(p.ok()) << p.status();
  absl::StatusOr<proto::ReportStageTimesResponse> slow =
      manager_->ReportStageTimes(Report(id, 1, *p, 0, 1.3, 1.0));
  ASSERT_TRUE(slow.ok()) << slow.status();
  EXPECT_TRUE(slow->replanned()) << slow->decision();
  EXPECT_THAT(slow->decision(), HasSubstr("30.0% (stage 0)"));
  // Exactly stage 0's layers were scaled by 1.3.
  const std::vector<double> factors = Factors(id);
  const auto& s0 = v1->result().plan().stages(0);
  for (int l = 0; l < static_cast<int>(factors.size()); ++l) {
    const bool in_stage0 = l >= s0.first_layer() && l <= s0.last_layer();
    EXPECT_NEAR(factors[l], 1.02 * (in_stage0 ? 1.3 : 1.0), 1e-9) << "layer " << l;
  }

  absl::StatusOr<proto::PlanVersion> v2 = recorder_.WaitForVersion(id, 2);
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(v2->version(), 2);
  EXPECT_EQ(v2->reason(), "measured");
  EXPECT_TRUE(v2->result().feasible());
  absl::StatusOr<proto::GetJobResponse> got = Get(id);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->job().current_version(), 2);

  // A report against the replaced version is refused, naming the field.
  absl::Status stale = manager_->ReportStageTimes(Report(id, 1, *p, 0, 1.3, 1.0)).status();
  EXPECT_EQ(stale.code(), absl::StatusCode::kFailedPrecondition) << stale;
  EXPECT_THAT(std::string(stale.message()), HasSubstr("plan_version"));

  // Malformed entries against the current version name the entry and the field.
  proto::ReportStageTimesRequest bad;
  bad.set_job_id(id);
  bad.set_plan_version(2);
  proto::StageTime* t = bad.add_times();
  t->set_stage(0);
  t->set_op_kind("Q");
  t->set_seconds(1);
  t->set_samples(1);
  absl::Status s = manager_->ReportStageTimes(bad).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("times[0].op_kind"));
  t->set_op_kind("F");
  t->set_kind(proto::OP_KIND_B);  // the typed kind and its text twin must agree
  s = manager_->ReportStageTimes(bad).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("times[0].kind OP_KIND_B and op_kind 'F'"));
  t->set_kind(proto::OP_KIND_F);
  t->set_stage(v2->result().plan().stages_size());
  s = manager_->ReportStageTimes(bad).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("times[0].stage"));
}

// Per-layer reports calibrate each layer by its own ratio (not smeared over its stage).
TEST_F(JobManagerTest, PerLayerReportsCalibrateEachLayerByItself) {
  const proto::CreateJobRequest req = SmallJob("per-layer", TwoNodes());
  absl::StatusOr<proto::Job> job = Create(req);
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string id = job->id();
  ASSERT_TRUE(Watch(id).ok());
  absl::StatusOr<proto::PlanVersion> v1 = recorder_.WaitForVersion(id, 1);
  ASSERT_TRUE(v1.ok()) << v1.status();
  absl::StatusOr<PipelineProblem> p = Predicted(req, *v1, {});
  ASSERT_TRUE(p.ok()) << p.status();
  proto::ReportStageTimesRequest report = Report(id, 1, *p, -1, 1.0, 1.0);
  absl::StatusOr<ModelGraph> model = ModelFromProto(req.model());
  absl::StatusOr<Cluster> cluster = ClusterFromProto(req.cluster());
  absl::StatusOr<Plan> plan = PlanFromProto(v1->result().plan());
  ASSERT_TRUE(model.ok() && cluster.ok() && plan.ok());
  absl::StatusOr<ProblemBuilder> builder = ProblemBuilder::Create(
      *model, *cluster, CostModel(), plan->num_devices, {}, plan->vocab_parallel);
  ASSERT_TRUE(builder.ok()) << builder.status();
  // The first layer of stage 0 measured 1.5x its prediction, every other layer as predicted.
  const int slow_layer = plan->stages[0].first_layer;
  for (const StageAssignment& st : plan->stages) {
    for (int l = st.first_layer; l <= st.last_layer; ++l) {
      const LayerCost& c = builder->layer_cost(l, st.device);
      // Typed kinds only (the stage times above carry text only, as older agents send).
      for (auto [kind, secs] : {std::pair{proto::OP_KIND_F, c.forward_s},
                                std::pair{proto::OP_KIND_B, c.backward_input_s},
                                std::pair{proto::OP_KIND_W, c.weight_grad_s}}) {
        if (secs <= 0) continue;
        proto::LayerOpTime* t = report.add_layer_times();
        t->set_layer(l);
        t->set_kind(kind);
        t->set_seconds(secs * (l == slow_layer ? 1.5 : 1.0));
        t->set_samples(8);
      }
    }
  }
  absl::StatusOr<proto::ReportStageTimesResponse> r = manager_->ReportStageTimes(report);
  ASSERT_TRUE(r.ok()) << r.status();
  const std::vector<double> factors = Factors(id);
  ASSERT_EQ(factors.size(), static_cast<size_t>(model->num_layers()));
  for (int l = 0; l < model->num_layers(); ++l) {
    EXPECT_NEAR(factors[l], l == slow_layer ? 1.5 : 1.0, 1e-9) << "layer " << l;
  }
  // A bad per-layer entry is refused naming the field.
  report.add_layer_times()->set_op_kind("X");
  EXPECT_THAT(std::string(manager_->ReportStageTimes(report).status().message()),
              HasSubstr("layer_times["));
}

// A report of one op time (1 s, 1 sample) for (stage, kind) against a job's plan version.
proto::ReportStageTimesRequest OneTimeReport(const std::string& job_id, int64_t version,
                                             int stage, proto::OpKind kind) {
  proto::ReportStageTimesRequest r;
  r.set_job_id(job_id);
  r.set_plan_version(version);
  proto::StageTime* t = r.add_times();
  t->set_stage(stage);
  t->set_kind(kind);
  t->set_seconds(1);
  t->set_samples(1);
  return r;
}

// A job's vocab_parallel option decides, as for a Plan call: "on" gives a plan that splits the
// head (every device runs S and T passes); a report with the passes' times (stage = device)
// calibrates the head's factor alone and can trigger a re-plan, which keeps the split.
TEST_F(JobManagerTest, VocabParallelJobIsPlannedSplitAndItsPassesCalibrateTheHead) {
  const proto::CreateJobRequest req = SmallJob("vocab", TwoNodes(), 4, "on");
  absl::StatusOr<proto::Job> job = Create(req);
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string id = job->id();
  ASSERT_TRUE(Watch(id).ok());
  absl::StatusOr<proto::PlanVersion> v1 = recorder_.WaitForVersion(id, 1);
  ASSERT_TRUE(v1.ok()) << v1.status();
  ASSERT_TRUE(v1->result().feasible());
  EXPECT_TRUE(v1->result().vocab_parallel());
  absl::StatusOr<Plan> plan = PlanFromProto(v1->result().plan());
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(plan->vocab_parallel);
  for (int d = 0; d < plan->num_devices; ++d) {
    int s = 0, t = 0;
    for (const Op& op : plan->schedule.ops[d]) {
      s += op.kind == OpKind::kS && op.stage == d ? 1 : 0;
      t += op.kind == OpKind::kT && op.stage == d ? 1 : 0;
    }
    EXPECT_EQ(s, plan->num_microbatches) << "device " << d;
    EXPECT_EQ(t, plan->num_microbatches) << "device " << d;
  }

  // Stages as predicted, every device's S and T 50% slower: only the head's factor moves.
  clock_.Advance(30);  // past the cool-down from the first plan
  absl::StatusOr<PipelineProblem> p = Predicted(req, *v1, {});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(p->vocab_parallel);
  const proto::ReportStageTimesRequest report = Report(id, 1, *p, -1, 1.0, 1.0, 1.5);
  ASSERT_GT(report.times_size(), 2 * plan->num_devices);
  absl::StatusOr<proto::ReportStageTimesResponse> r = manager_->ReportStageTimes(report);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->decision(), HasSubstr("largest deviation 50.0% (vocabulary passes S/T)"));
  EXPECT_TRUE(r->replanned()) << r->decision();
  const std::vector<double> factors = Factors(id);
  ASSERT_EQ(factors.size(), static_cast<size_t>(req.model().layers_size()));
  for (size_t l = 0; l < factors.size(); ++l) {
    EXPECT_NEAR(factors[l], l + 1 == factors.size() ? 1.5 : 1.0, 1e-9) << "layer " << l;
  }
  // The calibrated problem predicts the measured passes: reporting them deviates nowhere.
  Drain();  // the re-plan has run (adopted, or not when no faster plan was found)
  absl::StatusOr<proto::GetJobResponse> got = Get(id);
  ASSERT_TRUE(got.ok()) << got.status();
  const proto::PlanVersion current = got->current();
  EXPECT_TRUE(current.result().vocab_parallel()) << "a re-plan keeps the option";
  p = Predicted(req, current, factors);
  ASSERT_TRUE(p.ok()) << p.status();
  r = manager_->ReportStageTimes(Report(id, current.version(), *p, -1, 1.0, 1.0));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->decision(), HasSubstr("largest deviation 0.0% (stage"));
  EXPECT_THAT(r->decision(), HasSubstr("vocabulary passes S/T 0.0%"));

  // A vocabulary pass out of the plan's devices is refused naming the entry.
  absl::Status s = manager_->ReportStageTimes(
      OneTimeReport(id, current.version(), plan->num_devices, proto::OP_KIND_T)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("times[0].stage of a vocabulary pass"));
}

// "auto" is not forced off for jobs (the split is tried on this head-heavy model); "off" never
// splits, and S or T reported against such a plan is refused.
TEST_F(JobManagerTest, VocabParallelOptionIsTheJobsAutoTriesOffDoesNot) {
  absl::StatusOr<proto::Job> a = Create(SmallJob("auto", TwoNodes(), 4, "auto"));
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<proto::Job> off = Create(SmallJob("off", TwoNodes(), 4, "off"));
  ASSERT_TRUE(off.ok()) << off.status();
  ASSERT_TRUE(Watch(a->id()).ok());
  ASSERT_TRUE(Watch(off->id()).ok());
  absl::StatusOr<proto::PlanVersion> va = recorder_.WaitForVersion(a->id(), 1);
  ASSERT_TRUE(va.ok()) << va.status();
  EXPECT_TRUE(va->result().vocab_parallel_tried());
  absl::StatusOr<proto::PlanVersion> voff = recorder_.WaitForVersion(off->id(), 1);
  ASSERT_TRUE(voff.ok()) << voff.status();
  EXPECT_FALSE(voff->result().vocab_parallel_tried());
  EXPECT_FALSE(voff->result().vocab_parallel());

  absl::Status s =
      manager_->ReportStageTimes(OneTimeReport(off->id(), 1, 0, proto::OP_KIND_S)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("does not split the output layer"));
}

// Agents split the head into one vocabulary shard per device: for a job they train, a
// vocabulary smaller than the devices is never split ("auto") or refused at creation ("on").
TEST_F(JobManagerTest, AgentJobsSplitOnlyAVocabularyWithAnEntryPerDevice) {
  auto agent_job = [](const std::string& vocab_parallel) {
    proto::CreateJobRequest r = SmallJob("agents", TwoNodes(), 4, vocab_parallel);
    r.clear_model();
    proto::AgentTraining* t = r.mutable_training();
    t->set_reference_model(
        "ref:pattern=M*-E,hidden=16,heads=2,ffn=24,experts=4,top_k=2,moe_ffn=12,state=4,seq=8,"
        "vocab=3,microbatches=4");
    t->set_iterations(10);
    absl::StatusOr<proto::CreateJobRequest> resolved = ResolveAgentTraining(r);
    EXPECT_TRUE(resolved.ok()) << resolved.status();
    return *resolved;
  };
  absl::StatusOr<proto::Job> on = Create(agent_job("on"));
  ASSERT_FALSE(on.ok());
  EXPECT_EQ(on.status().code(), absl::StatusCode::kInvalidArgument) << on.status();
  EXPECT_THAT(std::string(on.status().message()),
              HasSubstr("options.vocab_parallel: on, but agents split the head into one "
                        "vocabulary shard per device and the model's vocabulary (3) is smaller "
                        "than its 4 devices"));
  EXPECT_TRUE(List().empty());

  absl::StatusOr<proto::Job> a = Create(agent_job("auto"));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(Watch(a->id()).ok());
  absl::StatusOr<proto::PlanVersion> v1 = recorder_.WaitForVersion(a->id(), 1);
  ASSERT_TRUE(v1.ok()) << v1.status();
  EXPECT_FALSE(v1->result().vocab_parallel_tried());
  EXPECT_FALSE(v1->result().vocab_parallel());
}

TEST_F(JobManagerTest, CooldownAllowsOneMeasuredReplanUntilTheClockMoves) {
  // Default policy: 30 s between measured-time re-plans of a job, counted from its first plan.
  const proto::CreateJobRequest req = SmallJob("cooldown", TwoNodes());
  absl::StatusOr<proto::Job> job = Create(req);
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string id = job->id();
  ASSERT_TRUE(Watch(id).ok());
  absl::StatusOr<proto::PlanVersion> v1 = recorder_.WaitForVersion(id, 1);
  ASSERT_TRUE(v1.ok()) << v1.status();

  absl::StatusOr<PipelineProblem> p = Predicted(req, *v1, Factors(id));
  ASSERT_TRUE(p.ok()) << p.status();
  // Right after the first plan (the fake clock started at 1000 s, not 0): cooling down.
  absl::StatusOr<proto::ReportStageTimesResponse> early =
      manager_->ReportStageTimes(Report(id, 1, *p, 0, 1.3, 1.0));
  ASSERT_TRUE(early.ok()) << early.status();
  EXPECT_FALSE(early->replanned()) << early->decision();
  clock_.Advance(29);
  p = Predicted(req, *v1, Factors(id));
  ASSERT_TRUE(p.ok()) << p.status();
  early = manager_->ReportStageTimes(Report(id, 1, *p, 0, 1.3, 1.0));
  ASSERT_TRUE(early.ok()) << early.status();
  EXPECT_FALSE(early->replanned()) << early->decision();
  clock_.Advance(1);
  p = Predicted(req, *v1, Factors(id));
  ASSERT_TRUE(p.ok()) << p.status();
  absl::StatusOr<proto::ReportStageTimesResponse> first =
      manager_->ReportStageTimes(Report(id, 1, *p, 0, 1.3, 1.0));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->replanned()) << first->decision();
  absl::StatusOr<proto::PlanVersion> v2 = recorder_.WaitForVersion(id, 2);
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(v2->reason(), "measured");

  // 10 s later, still 30% off (now on the new plan's last stage): cooling down.
  clock_.Advance(10);
  const int last = v2->result().plan().stages_size() - 1;
  p = Predicted(req, *v2, Factors(id));
  ASSERT_TRUE(p.ok()) << p.status();
  absl::StatusOr<proto::ReportStageTimesResponse> second =
      manager_->ReportStageTimes(Report(id, 2, *p, last, 1.3, 1.0));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE(second->replanned()) << second->decision();
  EXPECT_THAT(second->decision(), HasSubstr("30.0%"));
  Drain();  // nothing was queued: still one re-plan
  EXPECT_EQ(recorder_.versions(id).size(), 2u);

  // Past the cool-down the same report re-plans again.
  clock_.Advance(21);
  p = Predicted(req, *v2, Factors(id));
  ASSERT_TRUE(p.ok()) << p.status();
  absl::StatusOr<proto::ReportStageTimesResponse> third =
      manager_->ReportStageTimes(Report(id, 2, *p, last, 1.3, 1.0));
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_TRUE(third->replanned()) << third->decision();
  absl::StatusOr<proto::PlanVersion> v3 = recorder_.WaitForVersion(id, 3);
  ASSERT_TRUE(v3.ok()) << v3.status();
  EXPECT_EQ(v3->version(), 3);
  EXPECT_EQ(v3->reason(), "measured");
}

TEST_F(JobManagerTest, LostNodeReplansOnTheRestAndItsReturnRestores) {
  // All devices of both nodes.
  absl::StatusOr<proto::Job> job = Create(SmallJob("nodes", TwoNodes(), 0));
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string id = job->id();
  ASSERT_TRUE(Watch(id).ok());
  absl::StatusOr<proto::PlanVersion> v1 = recorder_.WaitForVersion(id, 1);
  ASSERT_TRUE(v1.ok()) << v1.status();
  EXPECT_EQ(v1->result().plan().num_devices(), 4);

  EXPECT_THAT(manager_->NodeLost("node7", ReplanReason::kNodeFailure), IsEmpty());  // not in its cluster
  EXPECT_THAT(manager_->NodeLost("node1", ReplanReason::kNodeFailure), ElementsAre(id));
  absl::StatusOr<proto::PlanVersion> v2 = recorder_.WaitForVersion(id, 2);
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(v2->version(), 2);
  EXPECT_EQ(v2->reason(), "node_failure");
  EXPECT_EQ(v2->result().plan().num_devices(), 2);  // node0's devices only
  absl::StatusOr<proto::GetJobResponse> got = Get(id);
  ASSERT_TRUE(got.ok());
  EXPECT_THAT(got->job().excluded_nodes(), ElementsAre("node1"));
  EXPECT_EQ(got->job().current_version(), 2);
  // Losing it again changes nothing.
  EXPECT_THAT(manager_->NodeLost("node1", ReplanReason::kNodeFailure), IsEmpty());

  EXPECT_THAT(manager_->NodeJoined("node1"), ElementsAre(id));
  absl::StatusOr<proto::PlanVersion> v3 = recorder_.WaitForVersion(id, 3);
  ASSERT_TRUE(v3.ok()) << v3.status();
  EXPECT_EQ(v3->version(), 3);
  EXPECT_EQ(v3->reason(), "node_join");
  EXPECT_EQ(v3->result().plan().num_devices(), 4);
  got = Get(id);
  ASSERT_TRUE(got.ok());
  EXPECT_THAT(got->job().excluded_nodes(), IsEmpty());
  EXPECT_THAT(manager_->NodeJoined("node1"), IsEmpty());
}

TEST_F(JobManagerTest, SecondManagerOverTheSameStoreRecoversJobsVersionsAndCalibration) {
  const proto::CreateJobRequest req = SmallJob("durable", TwoNodes());
  absl::StatusOr<proto::Job> job = Create(req);
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string id = job->id();
  ASSERT_TRUE(Watch(id).ok());
  absl::StatusOr<proto::PlanVersion> v1 = recorder_.WaitForVersion(id, 1);
  ASSERT_TRUE(v1.ok()) << v1.status();
  absl::StatusOr<PipelineProblem> p = Predicted(req, *v1, {});
  ASSERT_TRUE(p.ok()) << p.status();
  clock_.Advance(30);  // past the cool-down from the first plan
  absl::StatusOr<proto::ReportStageTimesResponse> slow =
      manager_->ReportStageTimes(Report(id, 1, *p, 0, 1.3, 1.0));
  ASSERT_TRUE(slow.ok()) << slow.status();
  ASSERT_TRUE(slow->replanned()) << slow->decision();
  absl::StatusOr<proto::PlanVersion> v2 = recorder_.WaitForVersion(id, 2);
  ASSERT_TRUE(v2.ok()) << v2.status();
  absl::StatusOr<proto::GetJobResponse> before = Get(id);
  ASSERT_TRUE(before.ok());
  const std::vector<double> factors = Factors(id);

  // A job stored but never planned (the process died before its task ran).
  proto::Job orphan;
  orphan.set_id("job-7");
  orphan.set_name("orphan");
  *orphan.mutable_model() = req.model();
  *orphan.mutable_cluster() = req.cluster();
  *orphan.mutable_options() = req.options();
  orphan.set_state(proto::JOB_STATE_PLANNING);
  orphan.set_created_unix_ms(before->job().created_unix_ms() + 1);
  ASSERT_TRUE(store_->PutJobMessage(orphan).ok());

  Close();  // the pool first, then the manager and the store
  Open();
  ASSERT_TRUE(manager_->Recover().ok());

  std::vector<proto::Job> list = List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].SerializeAsString(), before->job().SerializeAsString());
  EXPECT_EQ(list[1].id(), "job-7");
  absl::StatusOr<proto::GetJobResponse> after = Get(id);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->SerializeAsString(), before->SerializeAsString());

  // Every version newer than 1: exactly the stored version 2.
  Recorder replay;
  absl::StatusOr<int64_t> replay_sub = manager_->Watch(
      id, 1, [&replay](const proto::PlanVersion& v) { replay.OnVersion(v); }, nullptr);
  ASSERT_TRUE(replay_sub.ok());
  manager_->Unwatch(*replay_sub);
  std::vector<proto::PlanVersion> replayed = replay.versions(id);
  ASSERT_EQ(replayed.size(), 1u);
  EXPECT_EQ(replayed[0].SerializeAsString(), v2->SerializeAsString());

  // The calibration came back too: times as predicted under it show no deviation (without it
  // stage 0 of the old prediction would look 30% slow).
  p = Predicted(req, *v2, factors);
  ASSERT_TRUE(p.ok()) << p.status();
  absl::StatusOr<proto::ReportStageTimesResponse> exact =
      manager_->ReportStageTimes(Report(id, 2, *p, -1, 1.0, 1.0));
  ASSERT_TRUE(exact.ok()) << exact.status();
  EXPECT_FALSE(exact->replanned()) << exact->decision();
  EXPECT_THAT(exact->decision(), HasSubstr("largest deviation 0.0%"));

  // The unplanned job was queued again and gets its first plan.
  ASSERT_TRUE(Watch("job-7").ok());
  absl::StatusOr<proto::PlanVersion> orphan_v1 = recorder_.WaitForVersion("job-7", 1);
  ASSERT_TRUE(orphan_v1.ok()) << orphan_v1.status();
  EXPECT_EQ(orphan_v1->reason(), "initial");

  // New ids do not collide with recovered ones.
  absl::StatusOr<proto::Job> next = Create(SmallJob("next", OneNode()));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_NE(next->id(), id);
  EXPECT_NE(next->id(), "job-7");
}

// A job stored by an older planner carries its re-plan intent as text only
// (pending_replan_reason): this planner resumes it and answers with both forms.
TEST_F(JobManagerTest, IntentStoredAsTextByAnOlderPlannerResumes) {
  const proto::CreateJobRequest req = SmallJob("older", TwoNodes());
  proto::Job old;
  old.set_id("job-3");
  old.set_name("older");
  *old.mutable_model() = req.model();
  *old.mutable_cluster() = req.cluster();
  *old.mutable_options() = req.options();
  old.set_state(proto::JOB_STATE_PLANNING);
  old.set_pending_replan_reason("node_join");
  ASSERT_TRUE(store_->PutJobMessage(old).ok());

  Close();
  Open();
  ASSERT_TRUE(manager_->Recover().ok());
  ASSERT_TRUE(Watch("job-3").ok());
  absl::StatusOr<proto::PlanVersion> v1 = recorder_.WaitForVersion("job-3", 1);
  ASSERT_TRUE(v1.ok()) << v1.status();
  EXPECT_EQ(v1->reason_kind(), proto::PLAN_REASON_NODE_JOIN);
  EXPECT_EQ(v1->reason(), "node_join");
  absl::StatusOr<proto::GetJobResponse> got = Get("job-3");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->job().pending_reason(), proto::PLAN_REASON_UNSPECIFIED);  // done
  EXPECT_TRUE(got->job().pending_replan_reason().empty());
}

}  // namespace
}  // namespace octopipe::planner
