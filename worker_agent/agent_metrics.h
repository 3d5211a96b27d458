// AgentMetrics: the agent's Prometheus metrics (prometheus-cpp), served on /metrics by an
// Exposer. Per job (label job) and, where it applies, per plan device (device) or stage:
//   octopipe_agent_iteration_seconds          last iteration, slowest local rank
//   octopipe_agent_bubble_ratio{device}       1 - busy / iteration time, per local device
//   octopipe_agent_pipeline_bubble_ratio      over this node's devices
//   octopipe_agent_stage_op_seconds{stage,device,kind}  mean op seconds in the last iteration:
//                                             stage "0".. and the plan device that ran it for
//                                             F/B/W/BW/R; stage "vocab" and the device for the
//                                             vocabulary-parallel passes S and T (every device
//                                             runs its shard's; they belong to no stage)
//   octopipe_agent_tokens_per_second, octopipe_agent_loss (on the node holding the head)
//   octopipe_agent_checkpoint_seconds         the last checkpoint (slowest local rank)
//   octopipe_agent_overhead_ratio             the agent's bookkeeping in the ranks / iteration
//                                             time, over the job's iterations on this node
//   octopipe_agent_plan_switch_seconds        the last plan switch (newer version seen -> its
//                                             first iteration here)
//   octopipe_agent_plan_version, octopipe_agent_rank_restarts_total,
//   octopipe_agent_events_total{kind}, octopipe_agent_state{state} (1 for the current state)
// Thread-safe (prometheus-cpp metrics are).
#ifndef OCTOPIPE_WORKER_AGENT_AGENT_METRICS_H_
#define OCTOPIPE_WORKER_AGENT_AGENT_METRICS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "worker_agent/agent.h"

namespace octopipe::agent {

class AgentMetrics final : public AgentObserver {
 public:
  // Serves on host:port (port 0 picks one). kUnavailable naming the address on failure.
  static absl::StatusOr<std::unique_ptr<AgentMetrics>> Start(const std::string& host, int port,
                                                             const std::string& node);
  int port() const;
  // Every metric in the text exposition format (what /metrics serves).
  std::string Text() const;

  void OnState(AgentState state) override;
  void OnPlanVersion(const std::string& job_id, int64_t version) override;
  void OnIteration(const NodeIteration& iteration) override;
  void OnRankRestart(const std::string& job_id) override;
  void OnPlanSwitch(const std::string& job_id, double seconds) override;
  void OnEvent(const std::string& job_id, const JobEventReport& event) override;

 private:
  AgentMetrics(std::unique_ptr<prometheus::Exposer> exposer, const std::string& node);

  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<prometheus::Registry> registry_;
  const std::string node_;
  prometheus::Family<prometheus::Gauge>& iteration_seconds_;
  prometheus::Family<prometheus::Gauge>& bubble_;
  prometheus::Family<prometheus::Gauge>& pipeline_bubble_;
  prometheus::Family<prometheus::Gauge>& stage_op_seconds_;
  prometheus::Family<prometheus::Gauge>& tokens_per_s_;
  prometheus::Family<prometheus::Gauge>& loss_;
  prometheus::Family<prometheus::Gauge>& checkpoint_seconds_;
  prometheus::Family<prometheus::Gauge>& overhead_ratio_;
  prometheus::Family<prometheus::Gauge>& plan_switch_seconds_;
  prometheus::Family<prometheus::Gauge>& plan_version_;
  prometheus::Family<prometheus::Counter>& restarts_;
  prometheus::Family<prometheus::Counter>& events_;
  prometheus::Family<prometheus::Gauge>& state_;
};

}  // namespace octopipe::agent

#endif  // OCTOPIPE_WORKER_AGENT_AGENT_METRICS_H_
