#include "worker_agent/rank_main.h"

#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "core/convert.h"
#include "core/schedule.h"
#include "executor/model_spec.h"
#include "executor/layout_trainer.h"
#include "executor/trainer.h"
#include "executor/transport_factory.h"
#include "worker_agent/run_files.h"

namespace octopipe::agent {
namespace {

std::atomic<bool> g_stop_requested{false};

void OnStopSignal(int) { g_stop_requested.store(true); }

void InstallStopHandler() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, nullptr);
}

StageOpTimes OpsOf(const executor::IterationStats& stats, double* busy) {
  StageOpTimes ops;
  *busy = 0;
  for (const executor::OpTiming& t : stats.ops) {
    OpTimeSum& s = ops[{t.op.stage, std::string(OpKindName(t.op.kind))}];
    s.seconds += t.end_s - t.start_s;
    s.samples += 1;
    *busy += t.end_s - t.start_s;
  }
  return ops;
}

// `saved`: the failure snapshot this rank wrote, also when training fails (see RankOutcome).
absl::StatusOr<RankOutcome> Train(const std::string& run_dir, int rank, int local_device,
                                  RankOutcome* saved) {
  absl::StatusOr<std::string> text = ReadWholeFile(run_dir + "/run.json");
  if (!text.ok()) return text.status();
  absl::StatusOr<RunConfig> config = ParseRunConfig(*text);
  if (!config.ok()) return config.status();
  absl::StatusOr<LayoutPlan> plan = LoadLayoutPlanFile(run_dir + "/plan.json");
  if (!plan.ok()) return plan.status();
  if (plan->num_ranks != config->num_ranks) {
    return absl::FailedPreconditionError(
        absl::StrCat(run_dir, "/plan.json: the layout has ", plan->num_ranks,
                     " ranks, run.json num_ranks is ", config->num_ranks));
  }
  absl::StatusOr<executor::ModelSpec> spec = executor::ParseModelSpec(config->reference_model);
  if (!spec.ok()) return spec.status();
  executor::TransportConfig tc;
  tc.rank = rank;
  tc.size = config->num_ranks;
  tc.store_address = config->store_address;
  tc.prefix = config->prefix;
  tc.hostname = config->hostname;
  tc.timeout_s = config->timeout_s;
  tc.cuda_device = local_device;
  tc.store_dir = run_dir + "/store";  // only without a TCP store (the store serves Gloo and NCCL)
  absl::StatusOr<std::unique_ptr<executor::Transport>> transport =
      executor::MakeTransport(config->transport, tc);
  if (!transport.ok()) return transport.status();

  std::ofstream records(absl::StrCat(run_dir, "/rank-", rank, ".jsonl"), std::ios::app);
  RankOutcome outcome;
  outcome.rank = rank;
  executor::TrainOptions o;
  o.iterations = config->iterations;
  o.data_seed = config->data_seed;
  o.lr = config->lr;
  o.checkpoint_dir = config->checkpoint_dir;
  o.checkpoint_interval = config->checkpoint_interval;
  o.checkpoint_at_end = true;
  o.resume = true;
  o.resume_iteration = config->resume_iteration;
  o.stoppable = true;
  o.stop_requested = [] { return g_stop_requested.load(); };
  // A lost peer: the state of the last completed iteration is written as it is in memory, so
  // the survivors resume from it rather than roll back to the last checkpoint.
  o.snapshot_on_failure = true;
  o.on_snapshot = [&](int iteration, int layers) {
    saved->snapshot_iteration = iteration;
    saved->snapshot_layers = layers;
  };
  int counted = 0;
  double checkpoint_s = -1;
  o.on_checkpoint = [&](int, double seconds) { checkpoint_s = seconds; };
  double overhead_s = 0;
  o.on_iteration = [&](int it, const executor::IterationStats& stats) {
    const auto start = std::chrono::steady_clock::now();
    IterationRecord r;
    r.overhead_s = overhead_s;
    r.checkpoint_s = checkpoint_s;
    checkpoint_s = -1;
    r.iteration = it;
    r.has_loss = stats.has_loss;
    r.loss = stats.loss;
    r.wall_s = stats.wall_s;
    r.ops = OpsOf(stats, &r.busy_s);
    for (const executor::LayerOpTiming& t : stats.layer_ops) {
      OpTimeSum& s = r.layer_ops[{t.layer, std::string(OpKindName(t.kind))}];
      s.seconds += t.seconds;
      s.samples += 1;
    }
    records << IterationRecordJson(r) << "\n" << std::flush;
    overhead_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (counted++ == 0) return;  // the first iteration of a run warms up
    for (const auto& [key, sum] : r.ops) {
      outcome.ops[key].seconds += sum.seconds;
      outcome.ops[key].samples += sum.samples;
    }
  };
  absl::StatusOr<executor::RankResult> result =
      executor::TrainLayoutRank(*spec, *plan, rank, transport->get(), o);
  if (!result.ok()) return result.status();
  outcome.ok = true;
  outcome.snapshot_iteration = saved->snapshot_iteration;
  outcome.snapshot_layers = saved->snapshot_layers;
  outcome.stopped = result->stopped;
  outcome.first_iteration = result->first_iteration;
  outcome.completed_iterations = result->completed_iterations;
  return outcome;
}

}  // namespace

int RunRankProcess(const std::string& run_dir, int rank, int local_device) {
  InstallStopHandler();
  RankOutcome saved;
  absl::StatusOr<RankOutcome> outcome = Train(run_dir, rank, local_device, &saved);
  RankOutcome out;
  if (outcome.ok()) {
    out = std::move(*outcome);
  } else {
    out = saved;
    out.rank = rank;
    out.error = std::string(outcome.status().message());
    std::cerr << "octopipe-agent rank " << rank << ": " << out.error << "\n";
  }
  absl::Status written =
      WriteFileAtomically(absl::StrCat(run_dir, "/rank-", rank, ".result.json"), RankOutcomeJson(out));
  if (!written.ok()) std::cerr << "octopipe-agent rank " << rank << ": " << written.message() << "\n";
  return out.ok && written.ok() ? 0 : 1;
}

}  // namespace octopipe::agent
