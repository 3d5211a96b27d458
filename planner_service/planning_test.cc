// PrepareInput's size limits on micro-batches: one pipeline's limit is max_microbatches; with
// the layout chosen the request's micro-batches are the global batch, limited per replica.
#include "planner_service/planning.h"

#include <string>
#include <vector>

#include "core/cluster.h"
#include "core/cluster_presets.h"
#include "core/convert.h"
#include "core/model_graph.h"
#include "core/synthetic_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace octopipe::planner {
namespace {

using ::testing::HasSubstr;

struct Request {
  proto::Model model;
  proto::Cluster cluster;
  proto::PlanOptions options;
};

// A small synthetic model on one 8-GPU node.
Request Small(int microbatches, bool choose_layout) {
  Request r;
  r.model = ModelToProto(*ParseSyntheticModel("layers=16,f=0.01,b=0.01,w=0.01"));
  r.cluster = ClusterToProto(*ClusterPreset("h100-1node"));
  r.options.set_num_microbatches(microbatches);
  r.options.set_choose_layout(choose_layout);
  return r;
}

absl::StatusOr<PlanningInput> Prepare(const Request& r) {
  return PrepareInput(r.model, r.cluster, r.options, {}, PlanningLimits());
}

TEST(PlanningTest, OnePipelineTakesAtMostMaxMicrobatches) {
  ASSERT_TRUE(Prepare(Small(4096, false)).ok());
  const absl::Status s = Prepare(Small(4097, false)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("options.num_microbatches: 4097 exceeds the limit of 4096 "
                        "(max_microbatches)"));
}

TEST(PlanningTest, ALayoutsGlobalBatchIsLimitedPerReplica) {
  // 8 GPUs: up to 8 replicas of up to 4096 micro-batches each.
  absl::StatusOr<PlanningInput> in = Prepare(Small(8 * 4096, true));
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_TRUE(in->choose_layout);
  EXPECT_EQ(in->tuner.num_microbatches, 8 * 4096);
  EXPECT_EQ(in->layout.max_microbatches_per_pipeline, 4096);

  const absl::Status s = Prepare(Small(8 * 4096 + 1, true)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("options.num_microbatches: 32769 exceeds the limit of 32768 "
                        "(max_microbatches per replica x devices)"));

  // The model's own batch is the global batch too.
  Request from_model = Small(0, true);
  from_model.model.mutable_training()->set_num_microbatches(6000);
  in = Prepare(from_model);
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(in->tuner.num_microbatches, 6000);
}

TEST(PlanningTest, ALayoutWhoseReplicasWouldExceedTheLimitIsSkippedNotRun) {
  // 6000 micro-batches: DP1 would run 6000 in one pipeline; the search keeps DP >= 2.
  Request r = Small(6000, true);
  r.options.set_time_budget_s(2);
  r.options.set_layout_pp(2);
  absl::StatusOr<PlanningInput> in = Prepare(r);
  ASSERT_TRUE(in.ok()) << in.status();
  absl::StatusOr<proto::PlanResult> result = RunPlanning(*in, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_TRUE(result->has_layout());
  EXPECT_GE(result->layout().dp(), 2);
  EXPECT_LE(result->layout().microbatches_per_pipeline(), 4096);
}

}  // namespace
// After a node loss fixed degrees stand while some layout keeps them: TP 2 over the 12 GPUs
// left with 16 micro-batches stays (PP3 x TP2 x DP2, PP open); PP1 x TP1 over 3 GPUs would be
// DP3, which 8 micro-batches do not split, so every degree goes; a fixed EP goes with DP.
TEST(PlanningTest, NodeLossKeepsTheFixedDegreesSomeLayoutOfTheDevicesLeftCanHold) {
  // The request {pp, tp, dp, ep} as relaxed for `available` GPUs and `global` micro-batches.
  // `model_tp`: the model's own training.tp_degree.
  auto relaxed = [](int pp, int tp, int dp, int ep, int available, int global,
                    int model_tp = 0) {
    LayoutRequest r;
    r.pp = pp;
    r.tp = tp;
    r.dp = dp;
    r.ep = ep;
    RelaxLayoutForDevicesLeft(available, global, model_tp, /*model_ep=*/0, &r);
    return std::vector<int>{r.pp, r.tp, r.dp, r.ep};
  };
  EXPECT_EQ(relaxed(0, 2, 0, 0, 12, 16), (std::vector<int>{0, 2, 0, 0}));
  EXPECT_EQ(relaxed(1, 1, 4, 2, 3, 8), (std::vector<int>{0, 0, 0, 0}));
  EXPECT_EQ(relaxed(2, 0, 4, 2, 6, 12), (std::vector<int>{2, 0, 0, 0}));  // PP2 x DP3: no EP 2
  EXPECT_EQ(relaxed(2, 0, 2, 0, 8, 8), (std::vector<int>{2, 0, 2, 0}));   // PP2 x TP2 x DP2
  // PP2 over 6 GPUs with 8 micro-batches holds with TP3 (DP1), but not with the model's TP2
  // (which the search keeps): PP goes, and PP3 x TP2 is left to choose.
  EXPECT_EQ(relaxed(2, 0, 0, 0, 6, 8), (std::vector<int>{2, 0, 0, 0}));
  EXPECT_EQ(relaxed(2, 0, 0, 0, 6, 8, /*model_tp=*/2), (std::vector<int>{0, 0, 0, 0}));
}

}  // namespace octopipe::planner
