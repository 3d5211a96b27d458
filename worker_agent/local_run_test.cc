// RunPlanLocally: threads and processes measure the same training (same loss per iteration),
// with sane figures, and a failing run names the rank.
#include "worker_agent/local_run.h"

#include <cstdlib>

#include "gtest/gtest.h"
#include "simulator/classic_pipeline.h"

namespace octopipe::agent {
namespace {

executor::ModelSpec Spec() {
  return *executor::ParseModelSpec(
      "ref:pattern=M*-E,hidden=16,heads=2,ffn=24,experts=4,top_k=2,moe_ffn=12,state=4,seq=8,"
      "vocab=32,seed=5,microbatches=4");
}

TEST(LocalRunTest, ThreadsAndProcessesMeasureTheSameTraining) {
  const Plan plan = *ClassicPlan(ScheduleKind::k1F1B, 2, 0, 4, executor::ToModelGraph(Spec()));
  LocalRunOptions o;
  o.train.iterations = 3;
  o.transport = executor::TransportKind::kInProc;
  absl::StatusOr<RunMeasurement> threads = RunPlanLocally(Spec(), plan, o);
  ASSERT_TRUE(threads.ok()) << threads.status();
  o.transport = executor::TransportKind::kGloo;
  absl::StatusOr<RunMeasurement> procs = RunPlanLocally(Spec(), plan, o);
  ASSERT_TRUE(procs.ok()) << procs.status();
  ASSERT_EQ(threads->loss.size(), 3u);
  EXPECT_EQ(threads->loss, procs->loss);
  for (const RunMeasurement* m : {&*threads, &*procs}) {
    EXPECT_EQ(m->ranks, 2);
    EXPECT_GT(m->mean_iteration_s, 0);
    // Two stages of 1F1B over 4 micro-batches idle at the start and the end: a real bubble.
    EXPECT_GT(m->mean_bubble, 0.02);
    EXPECT_LT(m->mean_bubble, 1);
    EXPECT_GT(m->stage_op_s.count({0, OpKind::kF}), 0u);
    // Each rank's compute thread's CPU time over its layers' wall time (from the processes'
    // reports too): a share of a core, above 0 (the thread did compute).
    ASSERT_EQ(m->compute_cpu_share.size(), 2u);
    for (double share : m->compute_cpu_share) {
      EXPECT_GT(share, 0.05);
      EXPECT_LE(share, 1.0);
    }
  }
  // The communication threads' CPU per message: measured per rank process (every message costs
  // some: threads woken, a socket written and read), not for threads that share one process.
  EXPECT_TRUE(threads->comm_cpu_per_message_s.empty());
  ASSERT_EQ(procs->comm_cpu_per_message_s.size(), 2u);
  for (double c : procs->comm_cpu_per_message_s) {
    EXPECT_GT(c, 0);
    EXPECT_LT(c, 0.05);
  }
}

TEST(LocalRunTest, AFailingRankIsNamed) {
  const Plan plan = *ClassicPlan(ScheduleKind::k1F1B, 2, 0, 4, executor::ToModelGraph(Spec()));
  LocalRunOptions o;
  o.transport = executor::TransportKind::kNccl;
  // The rank processes see no GPU, on any host: NCCL fails in every rank.
  ASSERT_EQ(setenv("CUDA_VISIBLE_DEVICES", "", 1), 0);
  absl::StatusOr<RunMeasurement> m = RunPlanLocally(Spec(), plan, o);
  unsetenv("CUDA_VISIBLE_DEVICES");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kAborted);
  EXPECT_NE(m.status().message().find("rank 0 failed"), std::string::npos) << m.status();
}

}  // namespace
}  // namespace octopipe::agent
