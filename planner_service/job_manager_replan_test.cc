// JobManager re-planning on agents' reports: measured stage times and per-layer times
// calibrate the job and trigger a measured version past the policy's threshold, the policy's
// cool-down on a FakeClock, and a lost node's re-plan on the rest and its return.
// The fixture and its helpers: job_manager_test_fixture.h.
#include "planner_service/job_manager_test_fixture.h"

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/convert.h"
#include "core/cost_model.h"
#include "core/model_graph.h"
#include "core/model_zoo.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "calibration/layer_calibration.h"
#include "simulator/problem_builder.h"

namespace octopipe::planner {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST_F(JobManagerTest, SlowStageTriggersAMeasuredVersionSmallDeviationDoesNot) {
  const proto::CreateJobRequest req = SmallJob("replan", TwoNodes());
  absl::StatusOr<WatchedJob> watched = CreateAndWatch(req);
  ASSERT_TRUE(watched.ok()) << watched.status();
  const std::string id = watched->id;
  const proto::PlanVersion* v1 = &watched->v1;
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

  // Stage 0's device 30% slower than predicted under that calibration, past the cool-down
  // that starts at the job's first plan: a re-plan.
  clock_.Advance(30);
  p = Predicted(req, *v1, after_small);
  ASSERT_TRUE(p.ok()) << p.status();
  absl::StatusOr<proto::ReportStageTimesResponse> slow =
      manager_->ReportStageTimes(Report(id, 1, *p, 0, 1.3, 1.0));
  ASSERT_TRUE(slow.ok()) << slow.status();
  EXPECT_TRUE(slow->replanned()) << slow->decision();
  EXPECT_THAT(slow->decision(), HasSubstr("30.0% (stage "));  // one of the slow device's
  // Exactly the layers on stage 0's device were scaled by 1.3.
  const std::vector<double> factors = Factors(id);
  std::vector<bool> on_slow_device(factors.size(), false);
  for (const auto& st : v1->result().plan().stages()) {
    if (st.device() != v1->result().plan().stages(0).device()) continue;
    for (int l = st.first_layer(); l <= st.last_layer(); ++l) on_slow_device[l] = true;
  }
  for (int l = 0; l < static_cast<int>(factors.size()); ++l) {
    EXPECT_NEAR(factors[l], 1.02 * (on_slow_device[l] ? 1.3 : 1.0), 1e-9) << "layer " << l;
  }

  absl::StatusOr<proto::PlanVersion> v2 = recorder_.WaitForVersion(id, 2);
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(v2->version(), 2);
  EXPECT_EQ(v2->reason_kind(), proto::PLAN_REASON_MEASURED);
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
  t->set_seconds(1);
  t->set_samples(1);
  absl::Status s = manager_->ReportStageTimes(bad).status();  // no kind
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("times[0].kind: required"));
  t->set_kind(static_cast<proto::OpKind>(77));
  s = manager_->ReportStageTimes(bad).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("times[0].kind: unknown value 77"));
  t->set_kind(proto::OP_KIND_F);
  t->set_stage(v2->result().plan().stages_size());
  s = manager_->ReportStageTimes(bad).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("times[0].stage"));
}

// Per-layer reports calibrate each layer by its own ratio (not smeared over its stage).
TEST_F(JobManagerTest, PerLayerReportsCalibrateEachLayerByItself) {
  const proto::CreateJobRequest req = SmallJob("per-layer", TwoNodes());
  absl::StatusOr<WatchedJob> watched = CreateAndWatch(req);
  ASSERT_TRUE(watched.ok()) << watched.status();
  const std::string id = watched->id;
  const proto::PlanVersion* v1 = &watched->v1;
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
  report.add_layer_times()->set_kind(static_cast<proto::OpKind>(88));
  EXPECT_THAT(std::string(manager_->ReportStageTimes(report).status().message()),
              HasSubstr("layer_times["));
}

// Reports outside physical ranges are refused whole, naming the field, and change nothing; a
// report within them but absurd moves no factor beyond [kMinFactor, kMaxFactor]; every valid
// report after either is accepted (one bad report must not wedge a job). Factors an older
// binary stored out of range are clamped when the job is loaded, and its reports accepted.
TEST_F(JobManagerTest, ReportsOutsidePhysicalRangesAreRefusedAndCannotPoisonCalibration) {
  const proto::CreateJobRequest req = SmallJob("hostile", TwoNodes());
  absl::StatusOr<WatchedJob> watched = CreateAndWatch(req);
  ASSERT_TRUE(watched.ok()) << watched.status();
  const std::string id = watched->id;
  absl::StatusOr<PipelineProblem> p = Predicted(req, watched->v1, Factors(id));
  ASSERT_TRUE(p.ok()) << p.status();
  const proto::ReportStageTimesRequest valid = Report(id, 1, *p, -1, 1.0, 1.0);
  ASSERT_GT(valid.times_size(), 0);
  const std::vector<double> before = Factors(id);

  struct Bad {
    const char* what;
    std::function<void(proto::ReportStageTimesRequest*)> edit;
    const char* field;
  };
  const Bad bad[] = {
      {"denormal", [](auto* r) { r->mutable_times(0)->set_seconds(5e-324); }, "times[0].seconds"},
      {"too long", [](auto* r) { r->mutable_times(0)->set_seconds(1e300); }, "times[0].seconds"},
      {"negative", [](auto* r) { r->mutable_times(0)->set_seconds(-1); }, "times[0].seconds"},
      {"nan", [](auto* r) { r->mutable_times(0)->set_seconds(std::nan("")); }, "times[0].seconds"},
      {"samples", [](auto* r) { r->mutable_times(0)->set_samples(0); }, "times[0].samples"},
      {"layer time",
       [](auto* r) {
         proto::LayerOpTime* t = r->add_layer_times();
         t->set_layer(0);
         t->set_kind(proto::OP_KIND_F);
         t->set_seconds(1e-300);
         t->set_samples(1);
       },
       "layer_times[0].seconds"},
      {"busy > iteration",
       [](auto* r) {
         proto::DeviceBusyTime* d = r->add_device_times();
         d->set_device(0);
         d->set_busy_seconds(2);
         d->set_iteration_seconds(1);
         d->set_iterations(5);
       },
       "device_times[0].busy_seconds"},
      {"iteration", [](auto* r) {
         proto::DeviceBusyTime* d = r->add_device_times();
         d->set_device(0);
         d->set_busy_seconds(0);
         d->set_iteration_seconds(1e-13);
         d->set_iterations(5);
       },
       "device_times[0].iteration_seconds"},
  };
  for (const Bad& b : bad) {
    proto::ReportStageTimesRequest r = valid;
    b.edit(&r);
    absl::StatusOr<proto::ReportStageTimesResponse> got = manager_->ReportStageTimes(r);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << b.what;
    EXPECT_THAT(std::string(got.status().message()), HasSubstr(b.field)) << b.what;
    EXPECT_EQ(Factors(id), before) << b.what << ": a refused report changed the calibration";
  }

  // In range but absurd: every op 1 ns. Factors stop at kMinFactor.
  proto::ReportStageTimesRequest absurd = valid;
  for (proto::StageTime& t : *absurd.mutable_times()) t.set_seconds(1e-9);
  absl::StatusOr<proto::ReportStageTimesResponse> a = manager_->ReportStageTimes(absurd);
  ASSERT_TRUE(a.ok()) << a.status();
  for (double f : Factors(id)) {
    EXPECT_GE(f, kMinFactor);
    EXPECT_LE(f, kMaxFactor);
  }
  ASSERT_TRUE(manager_->ReportStageTimes(valid).ok()) << "a valid report after an absurd one";

  // Stored out of range by an older binary: clamped at load, reports accepted.
  std::vector<double> poisoned(Factors(id).size(), 1e-300);
  ASSERT_TRUE(store_->PutCalibration(id, poisoned).ok());
  Close();
  Open();
  ASSERT_TRUE(manager_->Recover().ok());
  for (double f : Factors(id)) EXPECT_EQ(f, kMinFactor);
  absl::StatusOr<PipelineProblem> q = Predicted(req, watched->v1, Factors(id));
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_TRUE(manager_->ReportStageTimes(Report(id, 1, *q, -1, 1.0, 1.0)).ok());
}

// A job agents train: its phase goes pending -> running -> completed with the agents' events,
// and its progress follows their reports (checked: iterations within the job's, a finite loss).
TEST_F(JobManagerTest, AgentJobPhaseAndProgressFollowEventsAndReports) {
  proto::CreateJobRequest req = SmallJob("lifecycle", TwoNodes());
  SetAgentTraining(&req, 40);
  req.mutable_options()->set_num_devices(4);  // one pipeline: the Report helper's problem
  absl::StatusOr<WatchedJob> watched = CreateAndWatch(req);
  ASSERT_TRUE(watched.ok()) << watched.status();
  const std::string id = watched->id;
  auto phase = [&] {
    absl::StatusOr<proto::GetJobResponse> got = Get(id);
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? got->job().phase() : proto::JOB_PHASE_UNSPECIFIED;
  };
  EXPECT_EQ(phase(), proto::JOB_PHASE_PENDING);
  ASSERT_TRUE(manager_->AddEvent(id, {0, "started", "node0", 1, 0, ""}).ok());
  EXPECT_EQ(phase(), proto::JOB_PHASE_RUNNING);

  absl::StatusOr<PipelineProblem> p = Predicted(req, watched->v1, Factors(id));
  ASSERT_TRUE(p.ok()) << p.status();
  proto::ReportStageTimesRequest report = Report(id, 1, *p, -1, 1.0, 1.0);
  proto::JobProgress* progress = report.mutable_progress();
  progress->set_iteration(12);
  progress->set_has_loss(true);
  progress->set_loss(2.25);
  progress->set_tokens_per_s(5000);
  ASSERT_TRUE(manager_->ReportStageTimes(report).ok());
  absl::StatusOr<proto::GetJobResponse> got = Get(id);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->job().progress().iteration(), 12);
  EXPECT_EQ(got->job().progress().total_iterations(), 40);
  EXPECT_TRUE(got->job().progress().has_loss());
  EXPECT_EQ(got->job().progress().loss(), 2.25);
  EXPECT_EQ(got->job().progress().tokens_per_s(), 5000);
  // `report` with its progress at `iteration`, with a loss unless `loss` < 0.
  auto report_at = [&](int64_t iteration, double loss, double tokens_per_s) {
    proto::ReportStageTimesRequest r = report;
    proto::JobProgress* q = r.mutable_progress();
    q->set_iteration(iteration);
    q->set_has_loss(loss >= 0);
    q->set_loss(loss >= 0 ? loss : 0);
    q->set_tokens_per_s(tokens_per_s);
    return manager_->ReportStageTimes(r).status();
  };
  auto progress_now = [&] {
    absl::StatusOr<proto::GetJobResponse> g = Get(id);
    EXPECT_TRUE(g.ok()) << g.status();
    return g.ok() ? g->job().progress() : proto::JobProgress();
  };
  // Another node's report of an older iteration, arriving late, leaves the newer loss.
  ASSERT_TRUE(report_at(10, 3.5, 4000).ok());
  proto::JobProgress now = progress_now();
  EXPECT_EQ(now.iteration(), 12);
  EXPECT_EQ(now.loss(), 2.25);
  EXPECT_EQ(now.tokens_per_s(), 5000);
  // A node without the last stage reports iteration 14 without a loss; the loss node's late
  // report of 13 still brings a newer loss (its throughput is older: kept).
  ASSERT_TRUE(report_at(14, -1, 5100).ok());
  ASSERT_TRUE(report_at(13, 2.0, 4900).ok());
  now = progress_now();
  EXPECT_EQ(now.iteration(), 14);
  EXPECT_EQ(now.loss(), 2.0);
  EXPECT_EQ(now.tokens_per_s(), 5100);
  EXPECT_EQ(now.loss_iteration(), 13);
  // Resumed from a checkpoint of iteration 10: progress follows the ranks from there, and
  // their next loss (iteration 11) is taken.
  ASSERT_TRUE(manager_->AddEvent(id, {0, "resumed", "node0", 1, 10, ""}).ok());
  now = progress_now();
  EXPECT_EQ(now.iteration(), 10);
  EXPECT_EQ(now.loss(), 2.0);  // shown until a newer one
  // A late start of an older version changes nothing.
  ASSERT_TRUE(manager_->AddEvent(id, {0, "started", "node0", 0, 0, ""}).ok());
  EXPECT_EQ(progress_now().iteration(), 10);
  ASSERT_TRUE(report_at(11, 2.5, 5000).ok());
  now = progress_now();
  EXPECT_EQ(now.iteration(), 11);
  EXPECT_EQ(now.loss(), 2.5);
  // Back to the figures the rest of this test expects.
  ASSERT_TRUE(manager_->ReportStageTimes(report).ok());

  for (auto [edit, field] :
       {std::pair<std::function<void(proto::JobProgress*)>, const char*>{
            [](proto::JobProgress* q) { q->set_iteration(41); }, "progress.iteration"},
        {[](proto::JobProgress* q) { q->set_loss(std::nan("")); }, "progress.loss"},
        {[](proto::JobProgress* q) { q->set_tokens_per_s(-1); }, "progress.tokens_per_s"}}) {
    proto::ReportStageTimesRequest bad = report;
    edit(bad.mutable_progress());
    absl::StatusOr<proto::ReportStageTimesResponse> r = manager_->ReportStageTimes(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(field));
  }

  ASSERT_TRUE(manager_->AddEvent(id, {0, "completed", "node0", 1, 40, ""}).ok());
  got = Get(id);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->job().phase(), proto::JOB_PHASE_COMPLETED);
  EXPECT_EQ(got->job().progress().iteration(), 40);
  // Kept across a restart (stored with the job).
  Close();
  Open();
  ASSERT_TRUE(manager_->Recover().ok());
  got = Get(id);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->job().phase(), proto::JOB_PHASE_COMPLETED);
  EXPECT_EQ(got->job().progress().loss(), 2.25);
  EXPECT_EQ(got->job().progress().loss_iteration(), 12);  // stored with it
}

// Events are bounded before they are stored: kind, node id and message sizes are checked
// (INVALID_ARGUMENT naming the field, nothing stored), and a job keeps at most 256 KB of events,
// dropping the oldest; a 10 KB job id comes back cut in the NOT_FOUND error.
TEST_F(JobManagerTest, EventsAreBoundedInSizeAndIdsAreNotEchoedInFull) {
  absl::StatusOr<WatchedJob> watched = CreateAndWatch(SmallJob("events", TwoNodes()));
  ASSERT_TRUE(watched.ok()) << watched.status();
  const std::string id = watched->id;
  const std::pair<JobEvent, const char*> bad[] = {
      {{0, "", "node0", 1, 0, ""}, "event.kind"},
      {{0, "Rank Failed", "node0", 1, 0, ""}, "event.kind"},
      {{0, std::string(65, 'a'), "node0", 1, 0, ""}, "event.kind"},
      {{0, "started", std::string(257, 'n'), 1, 0, ""}, "event.node_id"},
      {{0, "started", "node0", 1, 0, std::string(9000, 'm')}, "event.message"},
      {{0, "started", "node0", 1, -5, ""}, "event.iteration"},
  };
  for (const auto& [event, field] : bad) {
    absl::Status s = manager_->AddEvent(id, event);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_THAT(std::string(s.message()), HasSubstr(field));
    EXPECT_LT(s.message().size(), 300u);
  }
  absl::StatusOr<proto::GetJobResponse> got = Get(id);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->job().events_size(), 0);

  // 100 events of 8 KB: only the newest ~32 fit in 256 KB; the newest is kept.
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(manager_->AddEvent(id, {0, "stopped", "node0", 1, i, std::string(8000, 'x')}).ok());
  }
  got = Get(id);
  ASSERT_TRUE(got.ok());
  int64_t bytes = 0;
  for (const proto::JobEvent& e : got->job().events()) {
    bytes += e.kind().size() + e.node_id().size() + e.message().size();
  }
  EXPECT_LE(bytes, 256 << 10);
  EXPECT_GE(got->job().events_size(), 30);
  EXPECT_LT(got->job().events_size(), 40);
  EXPECT_EQ(got->job().events(got->job().events_size() - 1).iteration(), 99);

  const absl::Status missing = manager_->AddEvent(std::string(10000, 'j'), {0, "started", "n", 1, 0, ""});
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_LT(missing.message().size(), 200u) << missing.message().size();
  EXPECT_THAT(std::string(missing.message()), HasSubstr("(10000 bytes)"));
}

TEST_F(JobManagerTest, CooldownAllowsOneMeasuredReplanUntilTheClockMoves) {
  // Default policy: 30 s between measured-time re-plans of a job, counted from its first plan.
  const proto::CreateJobRequest req = SmallJob("cooldown", TwoNodes());
  absl::StatusOr<WatchedJob> watched = CreateAndWatch(req);
  ASSERT_TRUE(watched.ok()) << watched.status();
  const std::string id = watched->id;
  const proto::PlanVersion* v1 = &watched->v1;

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
  EXPECT_EQ(v2->reason_kind(), proto::PLAN_REASON_MEASURED);

  // 10 s later, still 30% off (now the new plan's last stage's device): cooling down.
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
  EXPECT_EQ(v3->reason_kind(), proto::PLAN_REASON_MEASURED);
}

// An agent job with PP2 x DP2 fixed on two nodes of two devices: its replicas are kept within
// nodes (each replica's device slots on one node: a lost node leaves a whole replica); after
// node1 is lost the two devices left cannot hold DP2 x PP2, so the fixed DP degree gives way
// (PP2 on node0); when node1 returns, the fixed layout is back.
TEST_F(JobManagerTest, AgentJobKeepsReplicasWithinNodesAndRelaxesFixedDegreesAfterLoss) {
  Cluster cluster = TwoNodes();  // links between the nodes as fast as within them: both
  cluster.inter_node_link = cluster.nodes[0].intra_node_link;  // rank orders predict alike
  proto::CreateJobRequest request = SmallJob("dp2", cluster, /*devices=*/0);
  request.mutable_options()->set_layout_pp(2);
  request.mutable_options()->set_layout_dp(2);
  SetAgentTraining(&request, 10);
  absl::StatusOr<WatchedJob> watched = CreateAndWatch(request);
  ASSERT_TRUE(watched.ok()) << watched.status();
  const std::string id = watched->id;
  const proto::LayoutPlan& l1 = watched->v1.result().layout_plan();
  EXPECT_EQ(l1.layout().pp(), 2);
  EXPECT_EQ(l1.layout().dp(), 2);
  EXPECT_EQ(l1.layout().rank_order(), "tp-pp-dp");  // replica r on ranks 2r, 2r + 1
  for (const proto::LayoutPipelinePlan& p : l1.pipelines()) {
    for (const proto::PipelineReplica& r : p.replicas()) {
      std::set<std::string> nodes;
      for (int rank : r.device_ranks()) nodes.insert(watched->v1.device_slots(rank).node_id());
      EXPECT_EQ(nodes.size(), 1u) << "replica " << r.dp_rank();
    }
  }

  EXPECT_THAT(manager_->NodeLost("node1", ReplanReason::kNodeFailure), ElementsAre(id));
  absl::StatusOr<proto::PlanVersion> v2 = recorder_.WaitForVersion(id, 2);
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(v2->reason_kind(), proto::PLAN_REASON_NODE_FAILURE);
  ASSERT_TRUE(v2->result().has_layout_plan());
  EXPECT_EQ(v2->result().layout_plan().layout().pp(), 2);
  EXPECT_EQ(v2->result().layout_plan().layout().dp(), 1);
  EXPECT_EQ(v2->device_slots_size(), 2);
  for (const proto::DeviceSlot& slot : v2->device_slots()) EXPECT_EQ(slot.node_id(), "node0");
  // The options it weighed: a new layout over node0 and dropping the lost replica (replica 0
  // whole on node0; none broken with a device left, so no re-partition), by the time to finish
  // the job's 10 iterations with the switch; the published one is the quickest.
  std::set<std::string> kinds;
  for (const proto::NodeLossOption& o : v2->result().node_loss_options()) {
    kinds.insert(o.kind());
    EXPECT_EQ(o.remaining_iterations(), 10) << o.kind();
    EXPECT_GT(o.iteration_time_s(), 0) << o.kind();
    EXPECT_GE(o.switch_s(), 0) << o.kind();
    EXPECT_NEAR(o.total_s(), o.switch_s() + 10 * o.iteration_time_s(), 1e-9 * o.total_s());
  }
  EXPECT_EQ(kinds, (std::set<std::string>{"new layout", "drop replicas"}));
  // The quickest, unless a new layout quicker by less than the re-plan margin.
  const proto::NodeLossOption* chosen = ExpectChosenOption(v2->result());
  ASSERT_NE(chosen, nullptr);
  if (chosen->kind() != "new layout") {
    EXPECT_EQ(v2->result().origin().rfind(chosen->kind(), 0), 0u) << v2->result().origin();
  }

  EXPECT_THAT(manager_->NodeJoined("node1"), ElementsAre(id));
  absl::StatusOr<proto::PlanVersion> v3 = recorder_.WaitForVersion(id, 3);
  ASSERT_TRUE(v3.ok()) << v3.status();
  EXPECT_EQ(v3->result().layout_plan().layout().dp(), 2);
  EXPECT_EQ(v3->device_slots_size(), 4);
}

// When no layout of the devices left holds the job (a two-layer model over three GPUs: PP3
// needs three layers, TP goes by powers of two and DP3 does not split 8 micro-batches), the
// re-plan still offers what the survivors can do and says why the new layout is not offered.
TEST_F(JobManagerTest, ANewLayoutThatCannotBeMadeIsListedWithWhy) {
  TrainingOptions training;
  training.num_microbatches = 8;
  absl::StatusOr<ModelGraph> llama = ZooModel("llama3-8b", training);
  ASSERT_TRUE(llama.ok()) << llama.status();
  ModelGraph model = *llama;  // the embedding and the head only
  model.layers = {llama->layers.front(), llama->layers.back()};
  const Cluster cluster = FourOneGpuNodes();
  proto::CreateJobRequest request = SmallJob("two-layers", cluster, /*devices=*/0);
  *request.mutable_model() = ModelToProto(model);
  request.mutable_options()->set_layout_pp(1);
  request.mutable_options()->set_layout_dp(4);
  SetAgentTraining(&request, 10);
  absl::StatusOr<WatchedJob> watched = CreateAndWatch(request);
  ASSERT_TRUE(watched.ok()) << watched.status();
  ASSERT_EQ(watched->v1.result().layout_plan().layout().dp(), 4);

  EXPECT_THAT(manager_->NodeLost("node0", ReplanReason::kNodeFailure), ElementsAre(watched->id));
  absl::StatusOr<proto::PlanVersion> v2 = recorder_.WaitForVersion(watched->id, 2);
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_TRUE(v2->result().feasible()) << v2->result().infeasible_reason();
  const proto::NodeLossOption* missing = nullptr;
  const proto::NodeLossOption* chosen = nullptr;
  for (const proto::NodeLossOption& o : v2->result().node_loss_options()) {
    if (!o.not_offered().empty()) missing = &o;
    if (o.chosen()) chosen = &o;
  }
  ASSERT_NE(chosen, nullptr) << v2->result().DebugString();
  EXPECT_EQ(chosen->kind(), "drop replicas");
  EXPECT_EQ(v2->result().layout_plan().layout().dp(), 3);
  ASSERT_NE(missing, nullptr) << v2->result().DebugString();
  EXPECT_EQ(missing->kind(), "new layout");
  EXPECT_THAT(missing->not_offered(), HasSubstr("no PP x TP x EP x DP layout of 3 GPUs"));
  EXPECT_FALSE(missing->chosen());
  EXPECT_EQ(missing->total_s(), 0);
}

// An agent job with DP4 x EP2 fixed (a Mixtral cut to two blocks, 8 experts, on four nodes of
// one H100), `iterations` long: two EP groups, ranks {0, 1} on node0, node1 and {2, 3} on
// node2, node3, each holding every expert.
proto::CreateJobRequest MixtralEp2Job(int64_t iterations) {
  TrainingOptions training;
  training.num_microbatches = 8;  // the global batch: 2 per replica, 4 per EP rank
  absl::StatusOr<ModelGraph> mixtral = ZooModel("mixtral-8x7b", training);
  EXPECT_TRUE(mixtral.ok()) << mixtral.status();
  ModelGraph model = *mixtral;  // embedding, two blocks (attention + MoE), head
  model.layers.assign(mixtral->layers.begin(), mixtral->layers.begin() + 5);
  model.layers.push_back(mixtral->layers.back());
  proto::CreateJobRequest request = SmallJob("moe-ep2", FourOneGpuNodes(), /*devices=*/0);
  *request.mutable_model() = ModelToProto(model);
  request.mutable_options()->set_seed(11);
  // PP1 x TP1 x DP4 x EP2 fixed. After the loss PP1 x TP1 over the three GPUs left would be
  // DP3, which the global batch of 8 does not divide: every degree is relaxed and the new
  // layout searched freely (RelaxLayoutForDevicesLeft; keeping PP and TP left the search
  // nothing, and the job with it only the survivors' option).
  request.mutable_options()->set_layout_pp(1);
  request.mutable_options()->set_layout_tp(1);
  request.mutable_options()->set_layout_dp(4);
  request.mutable_options()->set_layout_ep(2);
  SetAgentTraining(&request, iterations);
  return request;
}

// MixtralEp2Job. After node0 is lost the re-plan offers "drop replicas" (group 0 goes,
// group 1 goes on with its EP ranks: nothing moves) besides a new layout over the three GPUs
// left (the fixed DP and EP relaxed); re-partition is never offered with EP. Whichever wins
// runs on live nodes only; when "drop replicas" does, the published layout keeps EP2 on group
// 1's GPUs, each rank with the EP rank (the experts' shard) it held.
TEST_F(JobManagerTest, ExpertParallelJobLosingANodeOffersDropReplicasKeepingEp) {
  // Two iterations left: the new layout over three GPUs (PP3, about 30% quicker an
  // iteration) must re-shard every expert (~22 GB over the inter-node link for its slowest
  // rank), which so few iterations do not repay; with 10 it wins (either is checked below).
  const proto::CreateJobRequest request = MixtralEp2Job(2);
  absl::StatusOr<WatchedJob> watched = CreateAndWatch(request);
  ASSERT_TRUE(watched.ok()) << watched.status();
  const std::string id = watched->id;
  const proto::PlanVersion& v1 = watched->v1;
  ASSERT_TRUE(v1.result().feasible()) << v1.result().infeasible_reason();
  ASSERT_TRUE(v1.result().has_layout_plan());
  const proto::LayoutPlan& l1 = v1.result().layout_plan();
  EXPECT_EQ(l1.layout().pp(), 1);
  EXPECT_EQ(l1.layout().tp(), 1);
  EXPECT_EQ(l1.layout().dp(), 4);
  EXPECT_EQ(l1.layout().ep(), 2);
  ASSERT_EQ(v1.device_slots_size(), 4);
  ASSERT_EQ(l1.ranks_size(), 4);
  // The EP rank each GPU held (rank r is dp rank r on node r: EP rank r % 2).
  std::map<std::pair<std::string, int>, int> ep_rank_of;
  for (const proto::RankRole& role : l1.ranks()) {
    const proto::DeviceSlot& slot = v1.device_slots(role.rank());
    EXPECT_EQ(slot.node_id(), absl::StrCat("node", role.rank()));
    EXPECT_EQ(role.ep_rank(), role.rank() % 2) << "rank " << role.rank();
    ep_rank_of[{slot.node_id(), slot.local_device()}] = role.ep_rank();
  }

  EXPECT_THAT(manager_->NodeLost("node0", ReplanReason::kNodeFailure), ElementsAre(id));
  absl::StatusOr<proto::PlanVersion> v2 = recorder_.WaitForVersion(id, 2);
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(v2->reason_kind(), proto::PLAN_REASON_NODE_FAILURE);
  EXPECT_TRUE(v2->result().feasible()) << v2->result().infeasible_reason();
  ASSERT_TRUE(v2->result().has_layout_plan());

  // The options: a new layout over node1 .. node3 and "drop replicas" of the broken EP group,
  // which moves nothing (each kept rank holds its shard already); one chosen, the quickest
  // (or "drop replicas" when the new layout is not the re-plan margin quicker).
  const proto::NodeLossOption* drop = nullptr;
  std::set<std::string> kinds;
  for (const proto::NodeLossOption& o : v2->result().node_loss_options()) {
    kinds.insert(o.kind());
    EXPECT_EQ(o.remaining_iterations(), 2) << o.kind();
    if (o.kind() == "drop replicas") drop = &o;
  }
  EXPECT_EQ(kinds, (std::set<std::string>{"new layout", "drop replicas"}));
  ASSERT_NE(drop, nullptr) << "no 'drop replicas' option among " << v2->result().DebugString();
  EXPECT_THAT(drop->summary(), HasSubstr("2 of 4 replicas (1 of 2 EP2 groups) go on"));
  EXPECT_EQ(drop->moved_bytes(), 0);
  EXPECT_GT(drop->iteration_time_s(), 0);
  const proto::NodeLossOption* chosen = ExpectChosenOption(v2->result());
  ASSERT_NE(chosen, nullptr);

  // Whatever won runs on live nodes only, one slot per rank.
  const proto::LayoutPlan& l2 = v2->result().layout_plan();
  EXPECT_EQ(v2->device_slots_size(), l2.num_ranks());
  for (const proto::DeviceSlot& slot : v2->device_slots()) {
    EXPECT_NE(slot.node_id(), "node0");
    EXPECT_THAT((std::set<std::string>{"node1", "node2", "node3"}),
                ::testing::Contains(slot.node_id()));
  }
  absl::StatusOr<proto::GetJobResponse> got = Get(id);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(got->job().excluded_nodes(), ElementsAre("node0"));
  EXPECT_EQ(got->job().current_version(), 2);

  if (chosen->kind() == "drop replicas") {
    EXPECT_EQ(v2->result().origin().rfind("drop replicas", 0), 0u) << v2->result().origin();
    // EP2 kept, DP a multiple of it: group 1 alone, on its own GPUs, each rank with its shard.
    EXPECT_EQ(l2.layout().ep(), 2);
    EXPECT_EQ(l2.layout().dp() % 2, 0) << l2.layout().dp();
    EXPECT_EQ(l2.layout().dp(), 2);
    EXPECT_EQ(l2.global_microbatches(), 8);
    ASSERT_EQ(v2->device_slots_size(), 2);
    EXPECT_EQ(v2->device_slots(0).node_id(), "node2");
    EXPECT_EQ(v2->device_slots(1).node_id(), "node3");
    ASSERT_EQ(l2.ranks_size(), 2);
    for (const proto::RankRole& role : l2.ranks()) {
      const proto::DeviceSlot& slot = v2->device_slots(role.rank());
      const auto held = ep_rank_of.find({slot.node_id(), slot.local_device()});
      ASSERT_NE(held, ep_rank_of.end()) << slot.node_id() << " held no rank of v1";
      EXPECT_EQ(role.ep_rank(), held->second) << "rank " << role.rank() << " on " << slot.node_id();
    }
  } else {
    // The new layout won (quicker even with its switch): "drop replicas" was still offered
    // and kept EP2 (its summary above), and lost on time alone.
    EXPECT_EQ(chosen->kind(), "new layout");
    EXPECT_LE(chosen->total_s(), drop->total_s());
  }
}

// The re-plan margin holds after a node loss too: a new layout replaces the survivors'
// replicas only when predicted min_gain quicker. The EP job with 10 iterations left, where
// the new layout (PP3 over the three GPUs left) is the quicker, under a margin of 90% that it
// cannot clear: "drop replicas" is published (EP group 1 on node2 and node3), and the new
// layout's summary says by how much it was quicker and why it was not chosen.
TEST_F(JobManagerTest, ANewLayoutMustClearTheReplanMarginOverKeepingTheSurvivors) {
  Close();
  JobManagerOptions options;
  options.replan.min_gain = 0.9;
  Open(/*max_queued=*/16, options);
  absl::StatusOr<WatchedJob> watched = CreateAndWatch(MixtralEp2Job(10));
  ASSERT_TRUE(watched.ok()) << watched.status();
  ASSERT_EQ(watched->v1.result().layout_plan().layout().ep(), 2);
  EXPECT_THAT(manager_->NodeLost("node0", ReplanReason::kNodeFailure), ElementsAre(watched->id));
  absl::StatusOr<proto::PlanVersion> v2 = recorder_.WaitForVersion(watched->id, 2);
  ASSERT_TRUE(v2.ok()) << v2.status();
  const proto::NodeLossOption* fresh = nullptr;
  const proto::NodeLossOption* drop = nullptr;
  for (const proto::NodeLossOption& o : v2->result().node_loss_options()) {
    if (o.kind() == "new layout") fresh = &o;
    if (o.kind() == "drop replicas") drop = &o;
  }
  ASSERT_NE(fresh, nullptr) << v2->result().DebugString();
  ASSERT_NE(drop, nullptr) << v2->result().DebugString();
  EXPECT_LT(fresh->total_s(), drop->total_s()) << "the new layout is the quicker here";
  EXPECT_EQ(ExpectChosenOption(v2->result(), options.replan.min_gain), drop);
  EXPECT_THAT(fresh->summary(), HasSubstr("% quicker than drop replicas, under the 90% a new "
                                          "layout must gain (--replan_min_gain)"));
  EXPECT_EQ(v2->result().origin().rfind("drop replicas", 0), 0u) << v2->result().origin();
  EXPECT_EQ(v2->result().layout_plan().layout().ep(), 2);
  ASSERT_EQ(v2->device_slots_size(), 2);
  EXPECT_EQ(v2->device_slots(0).node_id(), "node2");
  EXPECT_EQ(v2->device_slots(1).node_id(), "node3");
}

TEST_F(JobManagerTest, LostNodeReplansOnTheRestAndItsReturnRestores) {
  // All devices of both nodes.
  absl::StatusOr<WatchedJob> watched = CreateAndWatch(SmallJob("nodes", TwoNodes(), 0));
  ASSERT_TRUE(watched.ok()) << watched.status();
  const std::string id = watched->id;
  const proto::PlanVersion* v1 = &watched->v1;
  EXPECT_EQ(v1->result().plan().num_devices(), 4);

  EXPECT_THAT(manager_->NodeLost("node7", ReplanReason::kNodeFailure), IsEmpty());  // not in its cluster
  EXPECT_THAT(manager_->NodeLost("node1", ReplanReason::kNodeFailure), ElementsAre(id));
  absl::StatusOr<proto::PlanVersion> v2 = recorder_.WaitForVersion(id, 2);
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(v2->version(), 2);
  EXPECT_EQ(v2->reason_kind(), proto::PLAN_REASON_NODE_FAILURE);
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
  EXPECT_EQ(v3->reason_kind(), proto::PLAN_REASON_NODE_JOIN);
  EXPECT_EQ(v3->result().plan().num_devices(), 4);
  got = Get(id);
  ASSERT_TRUE(got.ok());
  EXPECT_THAT(got->job().excluded_nodes(), IsEmpty());
  EXPECT_THAT(manager_->NodeJoined("node1"), IsEmpty());
}

}  // namespace
}  // namespace octopipe::planner
