// JobManager without a server: job lifecycle (create, watch, list, get, delete), events,
// validation and the server's limits, the bounded planning queue, and recovery from the store
// (a second manager over the same store; an intent stored by an older planner).
// The fixture and its helpers: job_manager_test_fixture.h.
#include "planner_service/job_manager_test_fixture.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/convert.h"
#include "core/synthetic_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace octopipe::planner {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST_F(JobManagerTest, CreateReturnsPlanningThenVersionOneArrivesThroughWatch) {
  absl::StatusOr<proto::Job> job = Create(SmallJob("first", OneNode()));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_FALSE(job->id().empty());
  EXPECT_EQ(job->name(), "first");
  EXPECT_EQ(job->state(), proto::JOB_STATE_PLANNING);
  EXPECT_EQ(job->current_version(), 0);
  // The request left the objective out: the job says which it is.
  EXPECT_EQ(job->options().objective_kind(), proto::PLAN_OBJECTIVE_SYNCHRONOUS);
  EXPECT_EQ(manager_->num_jobs(), 1);
  ASSERT_TRUE(Watch(job->id()).ok());

  absl::StatusOr<proto::PlanVersion> v = recorder_.WaitForVersion(job->id(), 1);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->job_id(), job->id());
  EXPECT_EQ(v->version(), 1);
  EXPECT_EQ(v->reason_kind(), proto::PLAN_REASON_INITIAL);
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

// A job the agents train is planned as a whole layout over every device unless num_devices asks
// for one pipeline: the stored options say so, the version carries the LayoutPlan, and there is
// one device slot per rank (the cluster's devices in order).
TEST_F(JobManagerTest, AgentJobsArePlannedAsLayoutsWithASlotPerRank) {
  proto::CreateJobRequest request = SmallJob("agents", TwoNodes(), /*devices=*/0);
  SetAgentTraining(&request, 10);
  absl::StatusOr<proto::Job> job = Create(request);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(job->options().choose_layout());
  ASSERT_TRUE(Watch(job->id()).ok());
  absl::StatusOr<proto::PlanVersion> v = recorder_.WaitForVersion(job->id(), 1);
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_TRUE(v->result().has_layout_plan());
  const proto::LayoutPlan& layout = v->result().layout_plan();
  EXPECT_GT(layout.num_ranks(), 0);
  EXPECT_EQ(v->device_slots_size(), layout.num_ranks());
  EXPECT_GT(layout.predicted().iteration_time_s(), 0);
  for (int r = 0; r < v->device_slots_size(); ++r) {  // node0, node1: two devices each
    EXPECT_EQ(v->device_slots(r).node_id(), r < 2 ? "node0" : "node1") << r;
    EXPECT_EQ(v->device_slots(r).local_device(), r % 2) << r;
  }

  // num_devices fixes a single pipeline: no layout search.
  proto::CreateJobRequest one = request;
  one.set_name("one-pipeline");
  one.mutable_options()->set_num_devices(2);
  absl::StatusOr<proto::Job> fixed = Create(one);
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_FALSE(fixed->options().choose_layout());
  ASSERT_TRUE(Watch(fixed->id()).ok());
  absl::StatusOr<proto::PlanVersion> f = recorder_.WaitForVersion(fixed->id(), 1);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_FALSE(f->result().has_layout_plan());
  EXPECT_EQ(f->device_slots_size(), 2);
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
  JobEvent valid;
  valid.kind = "started";
  EXPECT_EQ(manager_->AddEvent("job-404", valid).code(), absl::StatusCode::kNotFound);

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
  cases.push_back({"options.objective_kind", small});
  cases.back().request.mutable_options()->set_objective_kind(
      static_cast<proto::PlanObjective>(9));
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

TEST_F(JobManagerTest, SecondManagerOverTheSameStoreRecoversJobsVersionsAndCalibration) {
  const proto::CreateJobRequest req = SmallJob("durable", TwoNodes());
  absl::StatusOr<WatchedJob> watched = CreateAndWatch(req);
  ASSERT_TRUE(watched.ok()) << watched.status();
  const std::string id = watched->id;
  const proto::PlanVersion* v1 = &watched->v1;
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
  EXPECT_EQ(orphan_v1->reason_kind(), proto::PLAN_REASON_INITIAL);

  // New ids do not collide with recovered ones.
  absl::StatusOr<proto::Job> next = Create(SmallJob("next", OneNode()));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_NE(next->id(), id);
  EXPECT_NE(next->id(), "job-7");
}

// A job stored with a re-plan intent acknowledged but not carried out (the planner stopped
// first): a restarted planner resumes it and clears the intent.
TEST_F(JobManagerTest, StoredIntentResumesAfterARestart) {
  const proto::CreateJobRequest req = SmallJob("older", TwoNodes());
  proto::Job old;
  old.set_id("job-3");
  old.set_name("older");
  *old.mutable_model() = req.model();
  *old.mutable_cluster() = req.cluster();
  *old.mutable_options() = req.options();
  old.set_state(proto::JOB_STATE_PLANNING);
  old.set_pending_reason(proto::PLAN_REASON_NODE_JOIN);
  ASSERT_TRUE(store_->PutJobMessage(old).ok());

  Close();
  Open();
  ASSERT_TRUE(manager_->Recover().ok());
  ASSERT_TRUE(Watch("job-3").ok());
  absl::StatusOr<proto::PlanVersion> v1 = recorder_.WaitForVersion("job-3", 1);
  ASSERT_TRUE(v1.ok()) << v1.status();
  EXPECT_EQ(v1->reason_kind(), proto::PLAN_REASON_NODE_JOIN);
  absl::StatusOr<proto::GetJobResponse> got = Get("job-3");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->job().pending_reason(), proto::PLAN_REASON_UNSPECIFIED);  // done
}

}  // namespace
}  // namespace octopipe::planner
