#include "worker_agent/agent_metrics.h"

#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace octopipe::agent {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::unique_ptr<AgentMetrics> MustStart() {
  absl::StatusOr<std::unique_ptr<AgentMetrics>> m = AgentMetrics::Start("127.0.0.1", 0, "n1");
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

// Two devices on this node run stages 0 (device 0) and 1 (device 1) and, under vocabulary
// parallelism, each its shard's S and T passes (keyed by the device, not a stage).
NodeIteration VocabIteration() {
  NodeIteration n;
  n.job_id = "j";
  n.wall_s = 1;
  n.ops[{0, "F"}] = {0.5, 2};
  n.ops[{1, "B"}] = {0.75, 3};
  n.ops[{0, "S"}] = {0.25, 1};
  n.ops[{1, "T"}] = {0.5, 4};
  n.stage_device = {{0, 0}, {1, 1}};
  return n;
}

TEST(AgentMetricsTest, LabelsStageOpsWithTheirDeviceAndVocabularyPassesWithNoStage) {
  std::unique_ptr<AgentMetrics> m = MustStart();
  ASSERT_NE(m, nullptr);
  m->OnIteration(VocabIteration());
  const std::string text = m->Text();
  // Labels are serialized in name order.
  EXPECT_THAT(text, HasSubstr("octopipe_agent_stage_op_seconds{device=\"0\",job_id=\"j\","
                              "kind=\"F\",node=\"n1\",stage=\"0\"} 0.25"));
  EXPECT_THAT(text, HasSubstr("octopipe_agent_stage_op_seconds{device=\"1\",job_id=\"j\","
                              "kind=\"B\",node=\"n1\",stage=\"1\"} 0.25"));
  EXPECT_THAT(text, HasSubstr("octopipe_agent_stage_op_seconds{device=\"0\",job_id=\"j\","
                              "kind=\"S\",node=\"n1\",stage=\"vocab\"} 0.25"));
  EXPECT_THAT(text, HasSubstr("octopipe_agent_stage_op_seconds{device=\"1\",job_id=\"j\","
                              "kind=\"T\",node=\"n1\",stage=\"vocab\"} 0.125"));
  // No S or T series claims a pipeline stage.
  EXPECT_THAT(text, Not(HasSubstr("kind=\"S\",node=\"n1\",stage=\"0\"")));
  EXPECT_THAT(text, Not(HasSubstr("kind=\"T\",node=\"n1\",stage=\"1\"")));
}

TEST(AgentMetricsTest, EveryStageOpSeriesHasTheSameLabelNames) {
  std::unique_ptr<AgentMetrics> m = MustStart();
  ASSERT_NE(m, nullptr);
  m->OnIteration(VocabIteration());
  const std::string text = m->Text();
  int series = 0;
  for (size_t at = text.find("\noctopipe_agent_stage_op_seconds{"); at != std::string::npos;
       at = text.find("\noctopipe_agent_stage_op_seconds{", at + 1)) {
    const std::string line = text.substr(at + 1, text.find('\n', at + 1) - at - 1);
    for (const char* label : {"device=\"", "job_id=\"", "kind=\"", "node=\"", "stage=\""}) {
      EXPECT_THAT(line, HasSubstr(label));
    }
    ++series;
  }
  EXPECT_EQ(series, 4);
}

}  // namespace
}  // namespace octopipe::agent
