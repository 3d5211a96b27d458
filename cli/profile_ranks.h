// The rank side of `octopipe profile`: every rank trains the profile's plan for 1 + repeat
// iterations (TrainRank) and reports its layers' and ops' times as JSON; rank 0 and 1 also
// ping-pong messages of the plans' size. Threads over the in-process transport, or one forked
// process per rank over a real one.
#ifndef OCTOPIPE_CLI_PROFILE_RANKS_H_
#define OCTOPIPE_CLI_PROFILE_RANKS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/layout_plan.h"
#include "core/plan.h"
#include "executor/model_spec.h"
#include "executor/transport_factory.h"

namespace octopipe::cli {

struct RankLaunch {
  int ranks = 2;
  // kInProc: threads; else one process per rank.
  executor::TransportKind transport = executor::TransportKind::kGloo;
  double timeout_s = 60;           // a rank waits this long on a peer
  double rotate_cores_ms = 0;      // executor/core_rotation.h; 0 = off
};

// Runs `plan` on every rank for 1 + `repeat` iterations (the first is not reported); with
// `ping` ranks 0 and 1 then measure the link, and every rank the gradient all-reduce over all
// ranks, one call per bucket of `allreduce_bytes` (bytes, in order) for a few rounds, each
// bucket in its own memory, as the data-parallel gradient sync runs them; with `probe` every
// rank times the host-speed probe first. Returns each rank's JSON report, by rank:
//   {"layers": [[iteration, layer, kind, mean seconds over micro-batches], ...],
//    "overhead": [mean per-op executor overhead of each measured iteration],
//    "wall": [this rank's wall seconds of each measured iteration],
//    "ops": [[iteration, stage, micro-batch, kind, start, end, previous op's end], ...] (times
//            on the machine-wide steady clock, seconds),
//    "comm_cpu": [CPU seconds of the rank's other threads (Gloo's event loop, ...) per message
//                 sent or received, of each measured iteration that had messages; empty for
//                 inproc, whose ranks share one process],
//    "link": [[bytes, one-way seconds], ...],
//    "allreduce": [[bytes, seconds of one all-reduce with its copies in and out], ...] (empty
//                  without `ping` or with one rank),
//    "probe": seconds of the host-speed probe timed before the iterations (0 without `probe`)}
// or the first failing rank's error (kInternal, "rank R failed: ...").
// With `layout` (whose pipeline plan is `plan`; f.ranks = layout->num_ranks) every rank runs its
// part of the layout instead (executor/layout_trainer.h): its layers' times are then those of
// its shards, with the collectives inside them.
absl::StatusOr<std::vector<std::string>> RunProfileRanks(
    const executor::ModelSpec& spec, const Plan& plan, const RankLaunch& f, int repeat, bool ping,
    bool probe = false, const LayoutPlan* layout = nullptr,
    const std::vector<size_t>& allreduce_bytes = {});

}  // namespace octopipe::cli

#endif  // OCTOPIPE_CLI_PROFILE_RANKS_H_
