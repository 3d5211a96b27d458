#include "cli/report_page.h"

#include <string>
#include <vector>

#include "core/cluster.h"
#include "core/cost_model.h"
#include "core/synthetic_model.h"
#include "gtest/gtest.h"
#include "simulator/classic_pipeline.h"
#include "simulator/schedules.h"

namespace octopipe::cli {
namespace {

ClassicRun OneF1B(const ModelGraph& model, const Cluster& cluster) {
  ClassicRequest req;
  req.kind = ScheduleKind::k1F1B;
  req.devices = 4;
  req.microbatches = 8;
  req.eval.timeline = true;
  absl::StatusOr<ClassicRun> run = SimulateClassic(model, cluster, CostModel(), req);
  EXPECT_TRUE(run.ok()) << run.status();
  return *run;
}

// Every op of the schedule, in its device's row and order, with the simulated times.
TEST(ReportPageTest, RunSectionHasTheScheduleTimesStagesAndMemory) {
  const ModelGraph model = *ParseSyntheticModel("layers=8,f=1,b=2,w=1");
  const Cluster cluster = SyntheticCluster(4);
  const ClassicRun run = OneF1B(model, cluster);
  const report::Section s = RunSection("1f1b", model, run.plan, run.problem, run.result);
  ASSERT_EQ(s.plan.devices.size(), 4u);
  for (int d = 0; d < 4; ++d) {
    ASSERT_EQ(s.plan.devices[d].size(), run.plan.schedule.ops[d].size());
    for (size_t i = 0; i < s.plan.devices[d].size(); ++i) {
      const report::TimelineOp& op = s.plan.devices[d][i];
      EXPECT_EQ(op.label, OpToString(run.plan.schedule.ops[d][i]));
      EXPECT_EQ(op.kind, std::string(OpKindName(run.plan.schedule.ops[d][i].kind)));
      EXPECT_EQ(op.start_s, run.result.op_start_s[d][i]);
      EXPECT_EQ(op.end_s, run.result.op_end_s[d][i]);
    }
  }
  EXPECT_EQ(s.plan.iteration_s, run.result.iteration_time_s);
  ASSERT_EQ(s.stages.size(), 4u);
  EXPECT_EQ(s.stages[1].first_layer, 2);
  EXPECT_EQ(s.stages[1].last_layer, 3);
  EXPECT_EQ(s.stages[1].device, 1);
  ASSERT_EQ(s.memory.size(), 4u);
  EXPECT_EQ(s.memory[3].device, "device 3");
  EXPECT_EQ(s.memory[3].capacity_bytes, run.problem.memory_capacity[3]);
  report::Page page;
  page.sections = {s};
  EXPECT_TRUE(report::RenderHtmlReport(page).ok());
}

TEST(ReportPageTest, SimulatedSectionEqualsTheRunItResimulates) {
  const ModelGraph model = *ParseSyntheticModel("layers=8,f=1,b=2,w=1");
  const Cluster cluster = SyntheticCluster(4);
  const ClassicRun run = OneF1B(model, cluster);
  absl::StatusOr<report::Section> s =
      SimulatedSection("t", "plan", model, cluster, CostModel(), false, run.plan);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->plan.title, "plan");
  EXPECT_EQ(s->plan.iteration_s, run.result.iteration_time_s);
  EXPECT_EQ(s->plan.devices[2].back().end_s, run.result.op_end_s[2].back());
}

TEST(ReportPageTest, ReplicasAndDeviceLabelsOfALayout) {
  LayoutPlan plan;
  plan.layout.tp = 2;
  plan.layout.dp = 2;
  plan.layout.pp = 2;
  plan.pipelines.resize(1);
  plan.pipelines[0].plan.num_microbatches = 4;
  plan.pipelines[0].replicas = {{0, 0, {0, 4}}, {1, 4, {2, 6}}};
  const std::vector<report::Replica> r = ReplicasOf(plan, 0);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[1].name, "DP rank 1");
  EXPECT_EQ(r[1].ranks, "TP groups of ranks 2-3, 6-7 (micro-batches 4..7)");
  report::Section s;
  s.plan.devices.resize(2);
  s.baseline = s.plan;
  s.memory = {{"device 0", 1, 2}, {"device 1", 1, 2}};
  LabelLayoutDevices(plan, 0, &s);
  EXPECT_EQ(s.plan.device_labels, (std::vector<std::string>{"GPUs 0-1", "GPUs 4-5"}));
  EXPECT_EQ(s.baseline->device_labels, s.plan.device_labels);
  EXPECT_EQ(s.memory[1].device, "GPUs 4-5");
}

}  // namespace
}  // namespace octopipe::cli
