// JobManager's vocabulary-parallel jobs: the vocab_parallel option (on, auto, off), the split
// head's S and T passes (reported with stage = device) calibrating the head, and the agents'
// one-shard-per-device limit.
// The fixture and its helpers: job_manager_test_fixture.h.
#include "planner_service/job_manager_test_fixture.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/convert.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner_service/agent_jobs.h"

namespace octopipe::planner {
namespace {

using ::testing::HasSubstr;

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
  const proto::CreateJobRequest req = SmallJob("vocab", TwoNodes(), 4, proto::VOCAB_PARALLEL_ON);
  absl::StatusOr<WatchedJob> watched = CreateAndWatch(req);
  ASSERT_TRUE(watched.ok()) << watched.status();
  const std::string id = watched->id;
  const proto::PlanVersion* v1 = &watched->v1;
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
  absl::StatusOr<proto::Job> a = Create(SmallJob("auto", TwoNodes(), 4, proto::VOCAB_PARALLEL_AUTO));
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<proto::Job> off = Create(SmallJob("off", TwoNodes(), 4, proto::VOCAB_PARALLEL_OFF));
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
  auto agent_job = [](proto::VocabParallelChoice vocab_parallel) {
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
  absl::StatusOr<proto::Job> on = Create(agent_job(proto::VOCAB_PARALLEL_ON));
  ASSERT_FALSE(on.ok());
  EXPECT_EQ(on.status().code(), absl::StatusCode::kInvalidArgument) << on.status();
  EXPECT_THAT(std::string(on.status().message()),
              HasSubstr("options.vocab_parallel: on, but agents split the head into one "
                        "vocabulary shard per device and the model's vocabulary (3) is smaller "
                        "than its 4 devices"));
  EXPECT_TRUE(List().empty());

  absl::StatusOr<proto::Job> a = Create(agent_job(proto::VOCAB_PARALLEL_AUTO));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(Watch(a->id()).ok());
  absl::StatusOr<proto::PlanVersion> v1 = recorder_.WaitForVersion(a->id(), 1);
  ASSERT_TRUE(v1.ok()) << v1.status();
  EXPECT_FALSE(v1->result().vocab_parallel_tried());
  EXPECT_FALSE(v1->result().vocab_parallel());
}

}  // namespace
}  // namespace octopipe::planner
