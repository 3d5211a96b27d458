// PlannerLink: what the agent needs from the planner, in plain types (no gRPC or protobuf), so
// the agent's policy is tested against any implementation; GrpcPlannerLink is the real one.
// Errors follow absl codes: kUnavailable / kDeadlineExceeded when the planner cannot be
// reached (the agent keeps training and retries with back-off), kFailedPrecondition /
// kNotFound from Heartbeat when the planner no longer counts the node alive (re-register).
#ifndef OCTOPIPE_WORKER_AGENT_PLANNER_LINK_H_
#define OCTOPIPE_WORKER_AGENT_PLANNER_LINK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/job_event_kind.h"
#include "core/layout_plan.h"
#include "core/plan.h"
#include "worker_agent/run_files.h"

namespace octopipe::agent {

struct DeviceSlot {
  std::string node;
  int local_device = 0;
};

// A job agents train, with its current plan version.
struct AgentJob {
  std::string job_id;
  int64_t version = 0;  // 0: no plan yet
  int64_t created_unix_ms = 0;  // when the planner made the version
  std::string reason;           // why: initial, measured, node_failure, drain, node_join
  Plan plan;  // pipeline 0's plan (the one stage-time reports refer to)
  // The whole layout the ranks run: every pipeline, replica and TP/EP group. A link that gets
  // a single-pipeline version may leave it empty: the agent then runs `plan` as one pipeline
  // (SinglePipelineLayout).
  LayoutPlan layout;
  std::vector<DeviceSlot> slots;  // by rank (for a single pipeline: by plan device)
  std::string reference_model;
  int iterations = 1;
  int checkpoint_interval = 0;
  double lr = 1e-3;
  uint64_t data_seed = 7;
};

struct AgentEndpoint {
  std::string node;
  std::string address;
  bool alive = false;
};

struct StageTimeReport {
  int stage = 0;        // for S and T (a vocabulary-parallel plan's shard passes): the device
  std::string op_kind;  // F, B, W, BW, R, S, T
  double seconds = 0;   // mean
  int64_t samples = 0;
};

// Mean seconds of one layer's op of one kind (F, B, W, R; a BW op reported as its B and W).
struct LayerTimeReport {
  int layer = 0;
  std::string op_kind;
  double seconds = 0;
  int64_t samples = 0;
};

// One plan device's mean busy seconds (its ops' durations) and iteration seconds per
// iteration, over `iterations` iterations.
struct DeviceBusyReport {
  int device = 0;
  double busy_s = 0;
  double iteration_s = 0;
  int64_t iterations = 0;
};

// The node's view of the run with its stage times: iterations complete on every local rank, and
// the newest iteration's loss (where a local rank computes it) and tokens/s.
struct ProgressReport {
  int64_t iteration = 0;
  bool has_loss = false;
  double loss = 0;
  double tokens_per_s = 0;
};

struct JobEventReport {
  JobEventKind kind = JobEventKind::kStarted;
  std::string node;
  int64_t plan_version = 0;
  int64_t iteration = 0;
  std::string message;
};

class PlannerLink {
 public:
  virtual ~PlannerLink() = default;
  // Returns the heartbeat interval the planner asks for, in seconds.
  virtual absl::StatusOr<double> Register(const std::string& node, int num_devices,
                                          const std::string& address) = 0;
  // Returns true when the node was drained: the agent should leave, not register again.
  virtual absl::StatusOr<bool> Heartbeat(const std::string& node) = 0;
  // Every job with agent training and a current plan (others are left out).
  virtual absl::StatusOr<std::vector<AgentJob>> AgentJobs() = 0;
  virtual absl::StatusOr<std::vector<AgentEndpoint>> Agents() = 0;
  virtual absl::Status ReportStageTimes(const std::string& job_id, int64_t version,
                                        const std::string& node,
                                        const std::vector<StageTimeReport>& times,
                                        const std::vector<LayerTimeReport>& layer_times,
                                        const std::vector<DeviceBusyReport>& device_times,
                                        const ProgressReport& progress) = 0;
  virtual absl::Status ReportEvent(const std::string& job_id, const JobEventReport& event) = 0;
};

}  // namespace octopipe::agent

#endif  // OCTOPIPE_WORKER_AGENT_PLANNER_LINK_H_
