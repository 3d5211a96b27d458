// RankTrainer: one rank's training loop — builds the layers of the rank's stages from the
// reference model spec (deterministic init, so every rank's layers equal the single-process
// model's), runs the PipelineEngine for each iteration on deterministic data, and steps AdamW
// on the rank's parameters. Used by `octopipe train` (one process or thread per rank) and the
// equality tests.
#ifndef OCTOPIPE_EXECUTOR_TRAINER_H_
#define OCTOPIPE_EXECUTOR_TRAINER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/plan.h"
#include "executor/checkpoint.h"
#include "executor/engine.h"
#include "executor/host_probe.h"
#include "executor/layer.h"
#include "executor/model_spec.h"
#include "executor/optimizer.h"
#include "executor/transport.h"

namespace octopipe::executor {

struct TrainOptions {
  // Train until this many iterations are complete (counting those a resumed checkpoint holds).
  int iterations = 1;
  uint64_t data_seed = 7;
  double lr = 1e-3;
  bool step_optimizer = true;  // false: keep the gradients of the last iteration (tests)

  // Checkpoints (executor/checkpoint.h) under this directory; empty: none.
  std::string checkpoint_dir;
  // Save after every N completed iterations; 0: only when stopping early.
  int checkpoint_interval = 0;
  // Start from the newest complete checkpoint in checkpoint_dir (from scratch when there is
  // none). The data of iteration i is IterationData(.., i, ..) whatever the start, so resuming
  // from k and training to n equals training to n uninterrupted, bit for bit, for schedules
  // that accumulate each layer's weight gradients in micro-batch order.
  bool resume = false;
  // With resume: >= 0 loads exactly the checkpoint of this iteration (0: from scratch), so that
  // ranks on nodes with different checkpoint directories start from the iteration their agents
  // agreed on; -1: the newest complete one in checkpoint_dir.
  int64_t resume_iteration = -1;
  // Also save when training completes (a restarted run then finds itself done).
  bool checkpoint_at_end = false;
  // Complete checkpoints kept (older ones are pruned by rank 0 after each save).
  int keep_checkpoints = 2;

  // Coordinated stop at an iteration boundary (plan switch, drain). Must be equal on every
  // rank: when true, before each iteration rank 0 evaluates stop_requested (if set) and sends
  // the decision to every other rank (one small message on a reserved tag); on "stop" every
  // rank saves a checkpoint of the completed iterations and returns with stopped = true.
  bool stoppable = false;
  std::function<bool()> stop_requested;  // read on rank 0 only
  // Core rotation (executor/core_rotation.h): > 0 moves this rank's computing thread to the
  // next allowed CPU every this many seconds, as local rank `local_slot` of `local_slots` ranks
  // on this machine (so that every rank runs at the mean core's speed on a host whose cores
  // differ). 0: the scheduler places the thread. Ignored (and said once on stderr) when the
  // machine has fewer CPUs than local ranks. local_slot -1 and local_slots 0 mean the rank and
  // the number of ranks (every rank on this machine, as `octopipe train --ranks` runs them).
  double core_rotation_s = 0;
  int local_slot = -1;
  int local_slots = 0;

  // > 0: before the first iteration (core rotation already on, as the iterations run), time
  // this many host-speed probes (executor/host_probe.h) into RankResult::host_probe. Every rank
  // probes at once, as the ranks compute at once in the iterations that follow.
  int host_probe_repeats = 0;

  // Called after each iteration (its optimizer step and checkpoint, if any) with its index and
  // statistics.
  std::function<void(int iteration, const IterationStats& stats)> on_iteration;
  // Called after each checkpoint this rank saved, with the iteration and seconds it took.
  std::function<void(int iteration, double seconds)> on_checkpoint;

  // Recovery without rollback. When training fails after this run completed iterations past
  // its last checkpoint (a peer was lost: an iteration's sends, receives or collectives, the
  // stop agreement or a checkpoint's gathering failed), the rank writes the layers it holds
  // whole (SaveWholeRankLayers: not TP/EP/vocabulary shards) from memory into checkpoint_dir
  // as the checkpoint of the completed iterations, then returns the failure. That state is
  // consistent: parameters and AdamW moments change only in the optimizer step, after an
  // iteration's gradients are final, so a failed iteration has not touched them. Copies of a
  // layer held by several ranks (data-parallel replicas) are identical and may all be written.
  // Where the survivors hold every layer, the checkpoint of the completed iterations is then
  // complete and a restart loses at most the interrupted iteration. on_snapshot is told the
  // iteration and the number of layer files that hold this rank's state of it: written now, or
  // — when the failure came right after that iteration's checkpoint — already written by it.
  //
  // With stoppable as well, the optimizer step is committed: after an iteration every rank
  // tells rank 0 that its gradients are final (kCommitControlTag), and rank 0's stop/continue
  // message for the next iteration, sent once it heard from every rank, is the go-ahead for
  // the step. No rank steps unless every rank's gradient all-reduces completed, so the
  // survivors of a node lost in the middle of the all-reduces never end on different
  // iterations (one replica's last stage stepped, its first stage not: no complete state of
  // either iteration). A rank whose commit failed with its own gradients final also rolls
  // forward: it writes the next iteration's state too (stepping from its reduced gradients is
  // what the commit would have done), and on_snapshot is called for both iterations; the
  // newest complete checkpoint over the survivors is then exact, whichever it is.
  bool snapshot_on_failure = false;
  std::function<void(int iteration, int layers)> on_snapshot;
};

// The tag of rank 0's per-iteration stop/continue message (far above the engine's tags).
inline constexpr uint32_t kStopControlTag = 0xFFFFFF00u;
// The tag of a rank's "gradients final" message to rank 0 when the step is committed (see
// TrainOptions::snapshot_on_failure).
inline constexpr uint32_t kCommitControlTag = 0xFFFFFF01u;

struct RankResult {
  int rank = 0;
  int first_iteration = 0;       // the iteration training started at (the checkpoint's)
  int completed_iterations = 0;  // iterations complete when TrainRank returned
  bool stopped = false;          // stopped early on rank 0's request
  HostProbe host_probe;          // with TrainOptions::host_probe_repeats > 0
  // Statistics of the iterations this call ran (first_iteration, first_iteration + 1, ...).
  std::vector<IterationStats> iterations;
  // The rank's layers after training, by model layer index (null where another rank owns it);
  // their grads() hold the last iteration's gradients.
  std::vector<std::unique_ptr<Layer>> layers;
};

// Rank 0 evaluates options.stop_requested and tells every other rank (kStopControlTag) whether
// to stop before the next iteration; true means stop.
absl::StatusOr<bool> AgreeOnStop(int rank, Transport* transport, const TrainOptions& options);

// The micro-batches of one iteration (identical on every rank).
std::vector<MicroBatch> IterationData(const ModelSpec& spec, uint64_t data_seed, int iteration,
                                      int num_microbatches);

// The training loop every trainer shares: resume from a checkpoint (into result->layers and
// the optimizer), core rotation, host probe, then per iteration the stop agreement, zeroed
// gradients, `iterate`, the AdamW step and the checkpoint cadence (`write_checkpoint` writes the
// rank's layer files; the loop prunes on rank 0 and reports on_checkpoint), and the final
// checkpoint when stopping early. Errors of `iterate` are prefixed "iteration I: ".
struct TrainingHooks {
  // One iteration: gradients of result->layers final when it returns (before the step).
  std::function<absl::StatusOr<IterationStats>(int iteration)> iterate;
  std::function<absl::Status(int completed, const AdamW& optimizer)> write_checkpoint;
  // Tensor- or expert-parallel shards: how a checkpoint's whole layer becomes this rank's part
  // (LoadRankCheckpoint); null for whole layers.
  ShardCutter cut;
  // Whether this rank's copy of a layer is the whole layer (a failure snapshot writes only
  // those); null: every layer it holds (vocabulary shards are skipped regardless).
  std::function<bool(int layer)> whole;
  // A failure snapshot of the layers this rank holds as tensor- or expert-parallel shards (not
  // `whole`): each gathered from this rank's own copy of it (its replica's TP group; a MoE layer
  // under EP: its own EP group's replicas) on the copy's first rank, point to point, and
  // written whole there. Returns how many layer files this rank wrote. A copy with a lost
  // member cannot be gathered (an error after the transport's timeout): its layers are not
  // written, and another copy's may be. Null: none.
  std::function<absl::StatusOr<int>(int iteration, std::vector<std::unique_ptr<Layer>>& layers,
                                    const AdamW& optimizer)>
      snapshot_shards;
};
absl::Status RunTrainingLoop(const ModelSpec& spec, int rank, Transport* transport,
                             const TrainOptions& options, const TrainingHooks& hooks,
                             RankResult* result);

// The layer files of one checkpoint written by pipeline device `rank` of `plan` (`transport`
// the pipeline's): its layers, whole; under vocab_parallel the shards of the head (and of a split
// embedding) gathered on the rank that writes the whole layer.
absl::Status WritePipelineCheckpoint(const ModelSpec& spec, const Plan& plan, int rank,
                                     Transport* transport, int completed, RankResult* result,
                                     const AdamW& optimizer, const std::string& root);

// Builds every layer a rank's stages need (others null).
absl::StatusOr<std::vector<std::unique_ptr<Layer>>> BuildRankLayers(const ModelSpec& spec,
                                                                    const Plan& plan, int rank);

// Trains `rank`'s stages of `plan`. With checkpoint options, loads/saves checkpoints as
// described on TrainOptions. Errors: a transport failure names the iteration and the peer;
// checkpoint errors as executor/checkpoint.h.
absl::StatusOr<RankResult> TrainRank(const ModelSpec& spec, const Plan& plan, int rank,
                                     Transport* transport, const TrainOptions& options);

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_TRAINER_H_
