// RunPlanLocally: runs every rank of a plan on this machine and measures the run — the one
// implementation of "run a plan and measure it" behind `octopipe train` (the agent runs the same
// TrainRank per rank process across nodes and aggregates the same figures per node).
//
// Ranks are processes (fork; Gloo or NCCL, rendezvous in a private temporary directory that is
// removed afterwards) or, with transport "inproc", threads over the in-process transport.
// Figures: loss per iteration (from the rank holding the head), iteration time = slowest rank,
// bubble = 1 - (sum of op time) / (ranks x iteration time), and the mean op seconds per
// (stage, op kind) over the iterations after the first (a warm-up) when there are several.
#ifndef OCTOPIPE_WORKER_AGENT_LOCAL_RUN_H_
#define OCTOPIPE_WORKER_AGENT_LOCAL_RUN_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/layout_plan.h"
#include "core/plan.h"
#include "core/schedule.h"
#include "executor/model_spec.h"
#include "executor/trainer.h"
#include "executor/transport_factory.h"

namespace octopipe::agent {

struct LocalRunOptions {
  executor::TransportKind transport = executor::TransportKind::kGloo;
  double timeout_s = 60;           // a rank waits this long on a peer before failing
  executor::TrainOptions train;    // iterations, lr, ...
};

struct RunMeasurement {
  int ranks = 0;
  std::vector<double> loss;         // per iteration
  std::vector<double> iteration_s;  // per iteration, slowest rank
  std::vector<double> bubble;       // per iteration
  double mean_iteration_s = 0;      // after the first iteration when there are several
  double mean_bubble = 0;
  // (stage, op kind) -> (mean seconds, samples), after the first iteration when several.
  std::map<std::pair<int, OpKind>, std::pair<double, int>> stage_op_s;
  // (layer, op kind) -> (mean seconds per op, samples), same iterations: what per-layer
  // calibration consumes (a BW op counts as its B and W parts).
  std::map<std::pair<int, OpKind>, std::pair<double, int>> layer_op_s;
  // Per rank, the most activation bytes the executor held at once (its own accounting).
  std::vector<double> peak_activation_bytes;
  // Per rank, the computing thread's CPU time over the wall time of its layers' compute (same
  // iterations as layer_op_s): 1 when it had its core to itself; 0.7 means 30% of its op time
  // went to other threads or processes on that core, so its ops ran that much longer than a
  // profile on a quiet machine measured. Host steal from a virtual CPU does not show here.
  std::vector<double> compute_cpu_share;
  // Per rank, the CPU seconds its communication threads (every thread but the one running the
  // ops: sending, receiving, Gloo's event loop) used per message sent or received, same
  // iterations: the CPU a message takes from the cores, measured directly (0 without messages).
  // Empty for transport "inproc" (the ranks are threads of one process).
  std::vector<double> comm_cpu_per_message_s;
  // Per rank, mean seconds per iteration (same iterations) of its gradient all-reduces
  // (executor/layout_trainer.h: a layout with data parallelism; 0 otherwise), and of those the
  // seconds it waited for them after its own ops ended: what the overlap did not hide.
  std::vector<double> grad_sync_s, grad_sync_wait_s;
  // Each rank's host-speed probe (executor/host_probe.h), timed before its first iteration, when
  // LocalRunOptions::train.host_probe_repeats > 0; empty otherwise.
  std::vector<double> host_probe_s;
  // The last iteration's measured timeline: per rank, each op's start and end in the rank's
  // op order (the plan's schedule order), in seconds, every rank on one axis (ranks on one
  // machine share the steady clock; the earliest rank's start is 0).
  std::vector<std::vector<double>> last_op_start_s, last_op_end_s;
};

// Errors: kInternal when a process cannot be started; otherwise kAborted with one line per
// failed rank ("rank R failed: ...", the rank's own error, which names a lost peer).
absl::StatusOr<RunMeasurement> RunPlanLocally(const executor::ModelSpec& spec, const Plan& plan,
                                              const LocalRunOptions& options);
// The same for a whole layout (core/layout_plan.h): plan.num_ranks ranks, each running
// executor::TrainLayoutRank. Figures are per rank as above; stage_op_s mixes the replicas of
// one stage number (different pipelines of a heterogeneous layout share stage numbers).
// kInvalidArgument (executor::CheckLayoutRunnable) when the layout cannot run the model.
absl::StatusOr<RunMeasurement> RunLayoutLocally(const executor::ModelSpec& spec,
                                                const LayoutPlan& plan,
                                                const LocalRunOptions& options);

}  // namespace octopipe::agent

#endif  // OCTOPIPE_WORKER_AGENT_LOCAL_RUN_H_
