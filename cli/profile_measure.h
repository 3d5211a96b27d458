// `octopipe profile`'s measurement runs: the plans it launches the ranks with (ZB-H1, with
// and without recompute; the layouts that split layers by tensor and expert parallelism), the
// launches repeated until the summed layer medians settle, and what the ranks report, parsed.
// The files and the summary it writes from them are profile_command.cc's; the fits, calibration/.
// Internal to the `octopipe profile` command.
#ifndef OCTOPIPE_CLI_PROFILE_MEASURE_H_
#define OCTOPIPE_CLI_PROFILE_MEASURE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/profile_ranks.h"
#include "core/json_text.h"
#include "core/model_graph.h"
#include "core/plan.h"
#include "executor/model_spec.h"

namespace octopipe::cli {

using executor::ModelSpec;

// The command's flags (profile_command.cc declares and checks them).
struct ProfileFlags {
  std::string model, prefix, transport = "gloo", check, tp = "auto", ep = "auto";
  int64_t ranks = 2, repeat = 5, microbatches = 0, max_launches = 4;
  double timeout = 60, memory = 0, stable = 0.02, rotate_cores_ms = 0;
  bool pool = true;
};

// What the profile runs measured.
struct Measurements {
  std::map<std::pair<int, int>, std::vector<double>> samples;  // (layer, kind) -> per iteration
  std::vector<double> overhead;
  std::vector<std::pair<double, double>> link;
  // The gradient all-reduce over every rank: (bytes, seconds), every rank's samples.
  std::vector<std::pair<double, double>> allreduce;
  // The same while every rank computes the model on another thread (the sync overlapped with
  // the backward).
  std::vector<std::pair<double, double>> allreduce_overlapped;
  std::vector<double> message_s;  // producer end -> consumer start, consumer idle meanwhile
  // CPU of the ranks' other threads per message (ProfileRank's "comm_cpu"), every iteration.
  std::vector<double> comm_cpu;
  // Every rank's host-speed probe of every F/B/W launch (ProfileRank's "probe").
  std::vector<double> probe;
  // Per split (tp, ep) (--tp, --ep): (layer, kind) -> per-rank, per-iteration seconds.
  std::map<std::pair<int, int>, std::map<std::pair<int, int>, std::vector<double>>> split;
  // Per split: each layer's bytes per rank as the split holds them (the largest over its ranks
  // and launches): after F, after B, its weights.
  struct SplitBytes {
    double after_f = 0, after_b = 0, params = 0;
  };
  std::map<std::pair<int, int>, std::map<int, SplitBytes>> split_bytes;
  // Per split: every rank's host-speed probe of every launch of its F/B/W phase (of the kept
  // attempt), and how many times the split was measured (MeasureSplits).
  std::map<std::pair<int, int>, std::vector<double>> split_probe;
  std::map<std::pair<int, int>, int> split_attempts;
  double light_s = 0;             // the profile run's median iteration
  int launches = 0;               // launches of the F/B/W plan
  double last_change = 0;         // the summed medians' change over the last launch
};

// ZB-H1: each layer's F, B and W run as separate ops. With `recompute` every stage is
// recomputed, so R runs too (right before B, so B then runs on a freshly built context: that is
// why F, B and W are taken from the run without recompute).
absl::StatusOr<Plan> ProfilePlan(int ranks, int microbatches, const ModelGraph& graph,
                                 bool recompute);

// How the ranks are launched: --ranks, --transport (checked before), --timeout, --rotate_cores_ms.
RankLaunch Launch(const ProfileFlags& f);

// The ranks' JSON reports (ProfileRank's); kInternal when one does not parse.
absl::StatusOr<std::vector<Json>> ParseReports(const std::vector<std::string>& reports);

// The measured iteration time of a run: per iteration the slowest rank's wall time, median.
double MedianIteration(const std::vector<Json>& reports);

// What a message costs in the engine itself (send and receive threads, mailbox hand-off
// included): for each consumer op whose input came from another rank and that sat idle while
// it travelled, consumer start - producer end. `reports` are ProfileRank's, by rank: "ops" rows
// [iteration, stage, micro-batch, kind, start, end, end of the rank's previous op].
std::vector<double> MessageTimes(const Plan& plan, const std::vector<Json>& reports);

// The splits --tp and --ep name for `spec` over f.ranks ranks, as (tp, ep): `off` none; `auto`
// every power of two d in [2, ranks] dividing ranks that the model allows (CheckLayoutRunnable;
// EP also the micro-batches, and only with MoE layers); a list, each checked (kInvalidArgument
// naming the flag, the degree and, for a layer that cannot be split so, the layer and field).
absl::StatusOr<std::vector<std::pair<int, int>>> Splits(const ProfileFlags& f,
                                                        const ModelSpec& spec);

// "TP2", "EP2", "TP2 x EP2".
std::string SplitName(std::pair<int, int> split);

// Phase 1 (`plan`): F, B, W, the per-op overhead, the messages and the ping-pong, in fresh
// launches of the ranks (every other one mirrored: a rank's core, or the rank itself, can run
// slower for a whole launch on a shared machine, and a layer then is timed on both) until the
// summed layer medians settle (--stable) or --max_launches; phase 2 (`plan_r`, every stage
// recomputed): R. The first launch also times the gradient all-reduce over every rank, one
// call per bucket of `allreduce_bytes` (RunProfileRanks). Progress goes to `err`.
absl::StatusOr<Measurements> MeasureLayers(const ModelSpec& spec, const Plan& plan,
                                           const Plan& plan_r, const ProfileFlags& f,
                                           const std::vector<size_t>& allreduce_bytes,
                                           std::ostream& err);

// Beyond this relative difference between two host-speed probes (a split's against the F/B/W
// launches', the probe against its workload by the medians), the host ran at another speed (in
// one process the two agree within ~4%: measured_win run 21).
inline constexpr double kProbeDrift = 0.05;
// The most times a split is measured while its probe stays more than kProbeDrift off the F/B/W
// launches' (MeasureSplits).
inline constexpr int kSplitAttempts = 3;

// Runs `attempt(n)` (n = 0, 1, ...: each measures once and returns its median host-speed probe)
// until one's probe is within kProbeDrift of `reference` or `max_attempts` have run, and
// returns the index of the attempt whose probe was closest to it (the first of equals; one
// without a probe, <= 0, counts as the farthest). Each retry is announced on `err`: "octopipe
// profile: LABEL: the host-speed probe ran R x the F/B/W launches'; measuring again (attempt N
// of M)". One attempt where `reference` is not positive (nothing to compare). The first
// attempt's error is returned; a later one's ends the retries, keeping the closest so far
// (said on `err`).
absl::StatusOr<int> MeasureWhileHostDiffers(
    double reference, int max_attempts, const std::string& label, std::ostream& err,
    const std::function<absl::StatusOr<double>(int attempt)>& attempt);

// Phase 4 (--tp, --ep): for each split the layers as that layout runs them (SplitProfileLayout,
// the profile's ZB-H1 schedule) for F, B, W — launched until the summed medians settle, as
// phase 1, every rank timing the host-speed probe before each launch; measured again (up to
// kSplitAttempts in all) while that probe is more than kProbeDrift off the F/B/W launches'
// (m->probe), keeping the attempt closest to them — then R with every stage recomputed.
absl::Status MeasureSplits(const ModelSpec& spec, const ModelGraph& graph,
                           const std::vector<std::pair<int, int>>& splits, const ProfileFlags& f,
                           Measurements* m, std::ostream& err);

}  // namespace octopipe::cli

#endif  // OCTOPIPE_CLI_PROFILE_MEASURE_H_
