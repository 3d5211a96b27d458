// Pins the run-directory records an agent reads from its ranks: an iteration record keeps its
// per-stage and per-layer op times through JSON, and a record from an older rank (no per-layer
// times) still parses.
#include "worker_agent/run_files.h"

#include "gtest/gtest.h"

namespace octopipe::agent {
namespace {

TEST(RunFilesTest, IterationRecordKeepsStageAndLayerTimes) {
  IterationRecord r;
  r.iteration = 7;
  r.has_loss = true;
  r.loss = 2.5;
  r.wall_s = 0.25;
  r.busy_s = 0.2;
  r.ops[{1, "F"}] = {0.125, 4};
  r.layer_ops[{3, "B"}] = {0.0625, 4};
  r.layer_ops[{4, "W"}] = {0.03125, 4};
  r.checkpoint_s = 0.5;
  absl::StatusOr<IterationRecord> back = ParseIterationRecord(IterationRecordJson(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->iteration, 7);
  EXPECT_DOUBLE_EQ(back->loss, 2.5);
  ASSERT_EQ(back->ops.size(), 1u);
  EXPECT_DOUBLE_EQ((back->ops[{1, "F"}].seconds), 0.125);
  ASSERT_EQ(back->layer_ops.size(), 2u);
  EXPECT_DOUBLE_EQ((back->layer_ops[{3, "B"}].seconds), 0.0625);
  EXPECT_EQ((back->layer_ops[{4, "W"}].samples), 4);
  EXPECT_DOUBLE_EQ(back->checkpoint_s, 0.5);
}

TEST(RunFilesTest, RecordWithoutLayerTimesStillParses) {
  absl::StatusOr<IterationRecord> r = ParseIterationRecord(
      R"({"iteration":1,"has_loss":false,"loss":0,"wall_s":0.1,"busy_s":0.05,"ops":[]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->layer_ops.empty());
  EXPECT_DOUBLE_EQ(r->checkpoint_s, -1);
}

TEST(RunFilesTest, MalformedRecordIsAnError) {
  EXPECT_FALSE(ParseIterationRecord("{\"iteration\": \"x\"}").ok());
}

}  // namespace
}  // namespace octopipe::agent
