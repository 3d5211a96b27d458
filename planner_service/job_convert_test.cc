// Pins the wire forms of job state: a job this planner stores survives proto -> JobRecord ->
// proto byte for byte (so stored jobs keep their on-disk form), a record survives the other
// way, what a planner cannot know is read safely (an intent from a newer planner, no state),
// and GetJob's answer is cut to a summary
// over the response limit.
#include "planner_service/job_convert.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "core/convert.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace octopipe::planner {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::ElementsAre;

// A job with every field this planner writes set to a value other than the default.
proto::Job FullJob() {
  proto::Job job;
  job.set_id("job-12");
  job.set_name("llama");
  job.mutable_model()->set_name("llama3-8b");
  job.mutable_model()->add_layers()->set_kind("attention");
  job.mutable_model()->mutable_training()->set_num_microbatches(8);
  job.mutable_cluster()->set_name("two-nodes");
  job.mutable_cluster()->add_nodes()->set_name("node0");
  job.mutable_cluster()->add_nodes()->set_name("node1");
  job.mutable_options()->set_num_devices(4);
  job.mutable_options()->set_objective_kind(proto::PLAN_OBJECTIVE_STEADY_STATE);
  job.set_state(proto::JOB_STATE_READY);
  job.set_current_version(3);
  job.add_excluded_nodes("node1");
  job.add_excluded_nodes("node0");
  job.set_created_unix_ms(1700000000123);
  job.set_last_error("a store write failed");
  job.set_pending_reason(proto::PLAN_REASON_MEASURED);
  proto::AgentTraining* t = job.mutable_training();
  t->set_reference_model("ref:pattern=EMMH");
  t->set_iterations(40);
  t->set_checkpoint_interval(5);
  t->set_lr(3e-4);
  t->set_data_seed(11);
  for (int i = 0; i < 2; ++i) {
    proto::JobEvent* e = job.add_events();
    e->set_unix_ms(1700000001000 + i);
    e->set_kind(i == 0 ? "started" : "rank_failed");
    e->set_node_id("node0");
    e->set_plan_version(3);
    e->set_iteration(7 + i);
    e->set_message(absl::StrCat("event ", i));
  }
  job.set_phase(proto::JOB_PHASE_RUNNING);  // derived from the events
  proto::JobProgress* p = job.mutable_progress();
  p->set_iteration(8);
  p->set_total_iterations(40);  // training.iterations
  p->set_has_loss(true);
  p->set_loss(2.5);
  p->set_tokens_per_s(1234.5);
  p->set_updated_unix_ms(1700000002000);
  p->set_loss_iteration(7);
  return job;
}

TEST(JobConvertTest, AStoredJobRoundTripsByteForByte) {
  const proto::Job stored = FullJob();
  const JobRecord r = JobFromProto(stored);
  EXPECT_EQ(r.id, "job-12");
  EXPECT_EQ(r.name, "llama");
  EXPECT_EQ(r.spec.model.name(), "llama3-8b");
  EXPECT_EQ(r.spec.cluster.nodes_size(), 2);
  EXPECT_EQ(r.spec.options.num_devices(), 4);
  EXPECT_EQ(r.state, JobState::kReady);
  EXPECT_EQ(r.current_version, 3);
  EXPECT_THAT(r.excluded_nodes, ElementsAre("node1", "node0"));  // order kept
  EXPECT_EQ(r.created_unix_ms, 1700000000123);
  EXPECT_EQ(r.last_error, "a store write failed");
  ASSERT_TRUE(r.pending_reason.has_value());
  EXPECT_EQ(*r.pending_reason, ReplanReason::kMeasured);
  ASSERT_TRUE(r.training.has_value());
  EXPECT_EQ(r.training->reference_model, "ref:pattern=EMMH");
  EXPECT_EQ(r.training->iterations, 40);
  EXPECT_EQ(r.training->checkpoint_interval, 5);
  EXPECT_EQ(r.training->lr, 3e-4);
  EXPECT_EQ(r.training->data_seed, 11u);
  ASSERT_EQ(r.events.size(), 2u);
  EXPECT_EQ(r.events[1].kind, "rank_failed");
  EXPECT_EQ(r.events[1].unix_ms, 1700000001001);
  EXPECT_EQ(r.events[1].iteration, 8);
  EXPECT_EQ(r.events[1].message, "event 1");
  EXPECT_TRUE(r.HasNode("node1"));
  EXPECT_FALSE(r.HasNode("node2"));
  EXPECT_TRUE(r.Excludes("node0"));

  const proto::Job back = JobToProto(r);
  EXPECT_TRUE(MessageDifferencer::Equals(back, stored)) << back.DebugString();
  EXPECT_EQ(back.SerializeAsString(), stored.SerializeAsString());
}

// The phase is derived: from the state, the first version and (jobs agents train) the newest
// event that says; JobPhaseName names it.
TEST(JobConvertTest, PhaseFollowsStateVersionsAndTheAgentsEvents) {
  JobRecord r;
  r.id = "job-3";
  EXPECT_EQ(JobPhaseOf(r), proto::JOB_PHASE_PLANNING);
  r.state = JobState::kReady;
  r.current_version = 1;
  EXPECT_EQ(JobPhaseOf(r), proto::JOB_PHASE_PENDING);  // planning only: nobody runs it
  r.training = AgentTraining();
  EXPECT_EQ(JobPhaseOf(r), proto::JOB_PHASE_PENDING);  // no agent started it yet
  r.events.push_back({1, "plan_refused", "node0", 1, 0, "no such device"});
  EXPECT_EQ(JobPhaseOf(r), proto::JOB_PHASE_PENDING);
  for (const char* kind : {"started", "rank_failed", "state_saved", "resumed", "stopped"}) {
    r.events.push_back({2, kind, "node0", 1, 5, ""});
    EXPECT_EQ(JobPhaseOf(r), proto::JOB_PHASE_RUNNING) << kind;
  }
  r.events.push_back({3, "completed", "node0", 1, 40, ""});
  EXPECT_EQ(JobPhaseOf(r), proto::JOB_PHASE_COMPLETED);
  EXPECT_EQ(JobToProto(r).phase(), proto::JOB_PHASE_COMPLETED);
  r.state = JobState::kInfeasible;
  EXPECT_EQ(JobPhaseOf(r), proto::JOB_PHASE_FAILED);
  r.state = JobState::kFailed;
  EXPECT_EQ(JobPhaseOf(r), proto::JOB_PHASE_FAILED);
  EXPECT_EQ(JobPhaseName(proto::JOB_PHASE_COMPLETED), "completed");
  EXPECT_EQ(JobPhaseName(proto::JOB_PHASE_PENDING), "pending");
}

// The other way: a record with nothing optional set, and every state and intent.
TEST(JobConvertTest, ARecordRoundTripsForEveryStateAndIntent) {
  for (JobState state :
       {JobState::kPlanning, JobState::kReady, JobState::kInfeasible, JobState::kFailed}) {
    for (std::optional<ReplanReason> reason :
         {std::optional<ReplanReason>(), std::optional<ReplanReason>(ReplanReason::kInitial),
          std::optional<ReplanReason>(ReplanReason::kMeasured),
          std::optional<ReplanReason>(ReplanReason::kNodeFailure),
          std::optional<ReplanReason>(ReplanReason::kDrain),
          std::optional<ReplanReason>(ReplanReason::kNodeJoin)}) {
      JobRecord r;
      r.id = "job-1";
      r.state = state;
      r.pending_reason = reason;
      const proto::Job p = JobToProto(r);
      EXPECT_FALSE(p.has_training());
      EXPECT_EQ(p.pending_reason(), reason ? ReplanReasonToProto(*reason)
                                           : proto::PLAN_REASON_UNSPECIFIED);
      const JobRecord back = JobFromProto(p);
      EXPECT_EQ(back.state, state) << JobStateName(state);
      EXPECT_EQ(back.pending_reason, reason);
      EXPECT_FALSE(back.training.has_value());
      EXPECT_EQ(JobToProto(back).SerializeAsString(), p.SerializeAsString());
    }
  }
  // Training present with every field at its default stays present.
  JobRecord r;
  r.id = "job-2";
  r.training = AgentTraining();
  const proto::Job p = JobToProto(r);
  EXPECT_TRUE(p.has_training());
  EXPECT_TRUE(JobFromProto(p).training.has_value());
}

TEST(JobConvertTest, ReadsUnsetStateAndUnknownIntents) {
  proto::Job old;
  old.set_id("job-3");
  old.set_pending_reason(proto::PLAN_REASON_DRAIN);
  JobRecord r = JobFromProto(old);
  ASSERT_TRUE(r.pending_reason.has_value());
  EXPECT_EQ(*r.pending_reason, ReplanReason::kDrain);
  EXPECT_EQ(r.state, JobState::kPlanning);  // JOB_STATE_UNSPECIFIED
  const proto::Job back = JobToProto(r);
  EXPECT_EQ(back.pending_reason(), proto::PLAN_REASON_DRAIN);
  EXPECT_EQ(back.state(), proto::JOB_STATE_PLANNING);

  // An intent this binary does not know (from a newer planner) plans anyway, as for a node
  // change.
  old.set_pending_reason(static_cast<proto::PlanReason>(42));
  r = JobFromProto(old);
  ASSERT_TRUE(r.pending_reason.has_value());
  EXPECT_EQ(*r.pending_reason, ReplanReason::kNodeJoin);
}

TEST(JobConvertTest, NewJobTakesTheRequestAsSent) {
  proto::CreateJobRequest req;
  req.set_name("n");
  req.mutable_model()->set_name("m");
  req.mutable_cluster()->set_name("c");
  req.mutable_options()->set_objective_kind(proto::PLAN_OBJECTIVE_STEADY_STATE);
  NewJob j = NewJobFromProto(req);
  EXPECT_EQ(j.name, "n");
  EXPECT_EQ(j.spec.model.name(), "m");
  EXPECT_EQ(j.spec.cluster.name(), "c");
  EXPECT_EQ(j.spec.options.objective_kind(), proto::PLAN_OBJECTIVE_STEADY_STATE);
  EXPECT_FALSE(j.training.has_value());
  req.mutable_training()->set_iterations(9);
  j = NewJobFromProto(req);
  ASSERT_TRUE(j.training.has_value());
  EXPECT_EQ(j.training->iterations, 9);
}

TEST(JobConvertTest, GetJobLeavesTheLayersOutOverTheResponseLimit) {
  JobRecord r = JobFromProto(FullJob());
  proto::PlanVersion current;
  current.set_job_id(r.id);
  current.set_version(3);
  proto::GetJobResponse small = GetJobResponseOf(r, &current);
  EXPECT_FALSE(small.model_omitted());
  EXPECT_EQ(small.job().model().layers_size(), 1);
  EXPECT_EQ(small.current().version(), 3);
  EXPECT_FALSE(GetJobResponseOf(r, nullptr).has_current());

  r.spec.model.clear_layers();
  for (int i = 0; i < 15000; ++i) {
    r.spec.model.add_layers()->set_name(absl::StrCat(std::string(230, 'x'), i));
  }
  ASSERT_GT(JobToProto(r).ByteSizeLong(), kMaxResponseBytes);
  proto::GetJobResponse big = GetJobResponseOf(r, &current);
  EXPECT_TRUE(big.model_omitted());
  EXPECT_EQ(big.job().model().layers_size(), 0);
  EXPECT_EQ(big.job().num_layers(), 15000);
  EXPECT_EQ(big.job().model().name(), "llama3-8b");
  EXPECT_EQ(big.current().version(), 3);
  EXPECT_LE(big.ByteSizeLong(), kMaxResponseBytes);
}

}  // namespace
}  // namespace octopipe::planner
