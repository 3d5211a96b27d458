#include "core/layout_plan.h"

#include "core/model_zoo.h"
#include "gtest/gtest.h"

namespace octopipe {
namespace {

// A 2-stage pipeline over layers [0, 4) with M micro-batches, 1F1B-free: only the shape matters.
Plan TwoStagePlan(int microbatches) {
  Plan p;
  p.num_devices = 2;
  p.num_microbatches = microbatches;
  p.stages = {{0, 1, 0, false}, {2, 3, 1, false}};
  p.schedule.ops.resize(2);
  return p;
}

Plan OneStagePlan(int microbatches) {
  Plan p;
  p.num_devices = 1;
  p.num_microbatches = microbatches;
  p.stages = {{0, 3, 0, false}};
  p.schedule.ops.resize(1);
  return p;
}

// PP2 x DP2 on 4 ranks, pp outer: replica r's device j on rank r + 2j.
LayoutPlan Pp2Dp2() {
  LayoutPlan lp;
  lp.layout = {2, 1, 1, 2, true};
  lp.num_ranks = 4;
  lp.global_microbatches = 8;
  LayoutPipelinePlan pipe;
  pipe.plan = TwoStagePlan(4);
  pipe.replicas = {{0, 0, {0, 2}}, {1, 4, {1, 3}}};
  lp.pipelines.push_back(pipe);
  return lp;
}

TEST(LayoutPlanTest, SinglePipelineIsOneReplicaOnItsOwnRanks) {
  const LayoutPlan lp = SinglePipelineLayout(TwoStagePlan(4));
  EXPECT_TRUE(lp.single_pipeline());
  EXPECT_TRUE(ValidateLayoutPlan(lp, 4).ok());
  const std::vector<RankRole> roles = RankRoles(lp);
  ASSERT_EQ(roles.size(), 2u);
  EXPECT_EQ(roles[1].device, 1);
  EXPECT_EQ(lp.global_microbatches, 4);
}

TEST(LayoutPlanTest, RolesOfPp2Dp2) {
  const LayoutPlan lp = Pp2Dp2();
  ASSERT_TRUE(ValidateLayoutPlan(lp, 4).ok()) << ValidateLayoutPlan(lp, 4);
  const std::vector<RankRole> roles = RankRoles(lp);
  EXPECT_EQ(roles[2].dp_rank, 0);
  EXPECT_EQ(roles[2].device, 1);
  EXPECT_EQ(roles[1].dp_rank, 1);
  EXPECT_EQ(roles[1].device, 0);
}

TEST(LayoutPlanTest, HeterogeneousReplicasTileTheBatch) {
  LayoutPlan lp;
  lp.layout = {2, 1, 1, 2, true};
  lp.num_ranks = 3;
  lp.global_microbatches = 6;
  LayoutPipelinePlan a, b;
  a.plan = TwoStagePlan(4);
  a.replicas = {{0, 0, {0, 1}}};
  b.plan = OneStagePlan(2);
  b.replicas = {{1, 4, {2}}};
  lp.pipelines = {a, b};
  EXPECT_TRUE(ValidateLayoutPlan(lp, 4).ok()) << ValidateLayoutPlan(lp, 4);
  lp.global_microbatches = 7;
  absl::Status s = ValidateLayoutPlan(lp, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("global_microbatches"), std::string::npos) << s;
}

TEST(LayoutPlanTest, BadLayoutsAreRefusedNamingTheField) {
  struct Case {
    const char* what;
    void (*edit)(LayoutPlan*);
    const char* field;
  };
  const Case cases[] = {
      {"rank used twice", [](LayoutPlan* p) { p->pipelines[0].replicas[1].device_ranks = {0, 3}; },
       "device_ranks[0]"},
      {"rank not covered", [](LayoutPlan* p) { p->num_ranks = 5; }, "num_ranks"},
      {"rank outside", [](LayoutPlan* p) { p->pipelines[0].replicas[1].device_ranks = {1, 9}; },
       "device_ranks[1]"},
      {"overlapping micro-batches",
       [](LayoutPlan* p) { p->pipelines[0].replicas[1].first_microbatch = 2; },
       "first_microbatch"},
      {"dp disagrees", [](LayoutPlan* p) { p->layout.dp = 3; }, "layout.dp"},
      {"ep does not divide dp", [](LayoutPlan* p) { p->layout.ep = 3; }, "layout.ep"},
      {"pp disagrees", [](LayoutPlan* p) { p->layout.pp = 3; }, "layout.pp"},
      {"duplicate dp rank", [](LayoutPlan* p) { p->pipelines[0].replicas[1].dp_rank = 0; },
       "dp_rank"},
  };
  for (const Case& c : cases) {
    LayoutPlan lp = Pp2Dp2();
    c.edit(&lp);
    absl::Status s = ValidateLayoutPlan(lp, 4);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(s.message().find(c.field), std::string::npos) << c.what << ": " << s;
  }
}

TEST(LayoutPlanTest, ExpertGroupsMustRunOnePipeline) {
  LayoutPlan lp;
  lp.layout = {2, 1, 2, 2, true};
  lp.num_ranks = 3;
  lp.global_microbatches = 6;
  LayoutPipelinePlan a, b;
  a.plan = TwoStagePlan(4);
  a.replicas = {{0, 0, {0, 1}}};
  b.plan = OneStagePlan(2);
  b.replicas = {{1, 4, {2}}};
  lp.pipelines = {a, b};
  absl::Status s = ValidateLayoutPlan(lp, 4);
  EXPECT_NE(s.message().find("expert-parallel group"), std::string::npos) << s;
}

TEST(LayoutPlanTest, DegreesMustDivideTheModelsDimensions) {
  TrainingOptions training;
  training.seq_len = 4096;
  training.micro_batch_size = 1;
  training.num_microbatches = 8;
  absl::StatusOr<ModelGraph> model = ZooModel("llama3-8b", training);
  ASSERT_TRUE(model.ok()) << model.status();
  ParallelLayout l;
  l.tp = 8;
  EXPECT_TRUE(CheckLayoutAgainstModel(l, *model).ok());
  l.tp = 3;
  absl::Status s = CheckLayoutAgainstModel(l, *model);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("layout.tp"), std::string::npos) << s;
  EXPECT_NE(s.message().find("heads"), std::string::npos) << s;
}

}  // namespace
}  // namespace octopipe
