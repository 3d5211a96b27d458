#include "worker_agent/agent_metrics.h"

#include "absl/strings/str_cat.h"
#include "prometheus/text_serializer.h"

namespace octopipe::agent {
namespace {

template <typename Builder>
auto& Make(Builder builder, const char* name, const char* help,
           std::shared_ptr<prometheus::Registry>& registry) {
  return builder.Name(name).Help(help).Register(*registry);
}

}  // namespace

absl::StatusOr<std::unique_ptr<AgentMetrics>> AgentMetrics::Start(const std::string& host,
                                                                   int port,
                                                                   const std::string& node) {
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    exposer = std::make_unique<prometheus::Exposer>(absl::StrCat(host, ":", port));
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("--metrics_port: cannot serve /metrics on ", host, ":", port, ": ", e.what()));
  }
  return std::unique_ptr<AgentMetrics>(new AgentMetrics(std::move(exposer), node));
}

AgentMetrics::AgentMetrics(std::unique_ptr<prometheus::Exposer> exposer, const std::string& node)
    : exposer_(std::move(exposer)),
      registry_(std::make_shared<prometheus::Registry>()),
      node_(node),
      iteration_seconds_(Make(prometheus::BuildGauge(), "octopipe_agent_iteration_seconds",
                              "Measured seconds of the last iteration (slowest local rank)",
                              registry_)),
      bubble_(Make(prometheus::BuildGauge(), "octopipe_agent_bubble_ratio",
                   "Measured bubble ratio of a plan device in the last iteration", registry_)),
      pipeline_bubble_(Make(prometheus::BuildGauge(), "octopipe_agent_pipeline_bubble_ratio",
                            "Measured bubble ratio over this node's devices", registry_)),
      stage_op_seconds_(Make(prometheus::BuildGauge(), "octopipe_agent_stage_op_seconds",
                             "Mean measured op seconds per stage, plan device and op kind (the "
                             "vocabulary-parallel passes S and T: stage vocab)",
                             registry_)),
      tokens_per_s_(Make(prometheus::BuildGauge(), "octopipe_agent_tokens_per_second",
                         "Tokens per second of the last iteration", registry_)),
      loss_(Make(prometheus::BuildGauge(), "octopipe_agent_loss", "Loss of the last iteration",
                 registry_)),
      checkpoint_seconds_(Make(prometheus::BuildGauge(), "octopipe_agent_checkpoint_seconds",
                               "Seconds the last checkpoint took (slowest local rank)",
                               registry_)),
      overhead_ratio_(Make(prometheus::BuildGauge(), "octopipe_agent_overhead_ratio",
                           "Agent bookkeeping seconds in the ranks per iteration second (mean "
                           "over the job's iterations on this node)",
                           registry_)),
      plan_switch_seconds_(Make(prometheus::BuildGauge(), "octopipe_agent_plan_switch_seconds",
                                "Seconds of the last plan switch: newer version seen -> its "
                                "first iteration on this node",
                                registry_)),
      plan_version_(Make(prometheus::BuildGauge(), "octopipe_agent_plan_version",
                         "Plan version this node runs", registry_)),
      restarts_(Make(prometheus::BuildCounter(), "octopipe_agent_rank_restarts_total",
                     "Restarts of a plan version's ranks from its last checkpoint after they "
                     "failed without a node loss",
                     registry_)),
      events_(Make(prometheus::BuildCounter(), "octopipe_agent_events_total",
                   "Job events this agent reported, by kind", registry_)),
      state_(Make(prometheus::BuildGauge(), "octopipe_agent_state",
                  "1 for the agent's current state", registry_)) {
  exposer_->RegisterCollectable(registry_);
  OnState(AgentState::kRegistering);
}

std::string AgentMetrics::Text() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

int AgentMetrics::port() const {
  const std::vector<int> ports = exposer_->GetListeningPorts();
  return ports.empty() ? 0 : ports[0];
}

void AgentMetrics::OnState(AgentState state) {
  for (AgentState s : {AgentState::kRegistering, AgentState::kWatching, AgentState::kRunning,
                       AgentState::kSwitching}) {
    state_.Add({{"node", node_}, {"state", AgentStateName(s)}}).Set(s == state ? 1 : 0);
  }
}

void AgentMetrics::OnPlanVersion(const std::string& job_id, int64_t version) {
  plan_version_.Add({{"node", node_}, {"job_id", job_id}}).Set(static_cast<double>(version));
}

void AgentMetrics::OnIteration(const NodeIteration& n) {
  const prometheus::Labels job = {{"node", node_}, {"job_id", n.job_id}};
  iteration_seconds_.Add(job).Set(n.wall_s);
  pipeline_bubble_.Add(job).Set(n.local_bubble);
  tokens_per_s_.Add(job).Set(n.tokens_per_s);
  if (n.has_loss) loss_.Add(job).Set(n.loss);
  if (n.checkpoint_s >= 0) checkpoint_seconds_.Add(job).Set(n.checkpoint_s);
  overhead_ratio_.Add(job).Set(n.mean_overhead_ratio);
  for (const auto& [device, bubble] : n.rank_bubble) {
    bubble_.Add({{"node", node_}, {"job_id", n.job_id}, {"device", std::to_string(device)}})
        .Set(bubble);
  }
  for (const auto& [key, sum] : n.ops) {
    if (sum.samples == 0) continue;
    // S and T (vocabulary parallelism) are keyed by the device that ran them: no stage.
    const bool vocab = key.second == "S" || key.second == "T";
    const auto device = n.stage_device.find(key.first);
    stage_op_seconds_
        .Add({{"node", node_},
              {"job_id", n.job_id},
              {"stage", vocab ? std::string("vocab") : std::to_string(key.first)},
              {"device", vocab ? std::to_string(key.first)
                         : device != n.stage_device.end() ? std::to_string(device->second)
                                                          : std::string()},
              {"kind", key.second}})
        .Set(sum.seconds / sum.samples);
  }
}

void AgentMetrics::OnRankRestart(const std::string& job_id) {
  restarts_.Add({{"node", node_}, {"job_id", job_id}}).Increment();
}

void AgentMetrics::OnPlanSwitch(const std::string& job_id, double seconds) {
  plan_switch_seconds_.Add({{"node", node_}, {"job_id", job_id}}).Set(seconds);
}

void AgentMetrics::OnEvent(const std::string& job_id, const JobEventReport& event) {
  events_.Add({{"node", node_}, {"job_id", job_id}, {"kind", std::string(JobEventKindName(event.kind))}}).Increment();
}

}  // namespace octopipe::agent
