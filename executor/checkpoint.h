// Training checkpoints of the reference model, per layer, so that a plan with a different
// partition (or number of ranks) can load them: each rank writes the layers it owns and loads
// the layers its new stages need.
//
// Layout under a checkpoint root directory:
//   ROOT/iter-000000012/layer-00003.ckpt   layer 3 after 12 completed iterations
// A layer file holds: magic "OPCKPT01", format version, layer index, iteration, optimizer step,
// layer kind, the layer's parameters and its AdamW first and second moments (same order as
// Layer::params()), then a 64-bit FNV-1a checksum of everything before it. Every file is
// written atomically: a temporary file in the same directory, fsync, rename, fsync of the
// directory — a reader sees a complete file or none.
//
// A checkpoint (one iteration) is *complete* when every layer of the model has a file whose
// checksum, header (layer index, iteration, kind) and tensor shapes are valid. A rank killed
// while writing leaves an incomplete checkpoint; a flipped byte fails the checksum; either way
// LatestCompleteCheckpoint skips it and the previous complete one is used.
//
// Thread/process safety: different ranks may write different layers of the same iteration
// concurrently (distinct files); readers may run concurrently with writers (atomic renames).
// The root must be visible to every rank that will load the checkpoint (for resuming on
// another node after a node loss, storage shared by the nodes).
#ifndef OCTOPIPE_EXECUTOR_CHECKPOINT_H_
#define OCTOPIPE_EXECUTOR_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "executor/layer.h"
#include "executor/model_spec.h"
#include "executor/optimizer.h"
#include "executor/tensor.h"

namespace octopipe::executor {

// One layer's saved state.
struct LayerCheckpoint {
  int layer = 0;
  int64_t iteration = 0;       // completed iterations when saved
  int64_t optimizer_step = 0;  // AdamW::step() when saved
  std::string kind;
  std::vector<Tensor> params;
  std::vector<Tensor> first_moments;   // empty when optimizer_step is 0
  std::vector<Tensor> second_moments;  // empty when optimizer_step is 0
};

// The file of `layer` in the checkpoint of `iteration`.
std::string LayerCheckpointPath(const std::string& root, int64_t iteration, int layer);

// Serializes and writes atomically (see the top comment). kInternal naming the path and errno
// on an I/O failure.
absl::Status WriteLayerCheckpoint(const std::string& root, const LayerCheckpoint& checkpoint);

// Reads and verifies one file: kDataLoss naming the path for a bad magic, checksum, truncation
// or inconsistent header; kNotFound when the file does not exist.
absl::StatusOr<LayerCheckpoint> ReadLayerCheckpoint(const std::string& path);

// Verifies one file's bytes (as ReadLayerCheckpoint; `name` names them in errors).
absl::StatusOr<LayerCheckpoint> ParseLayerCheckpoint(const std::string& bytes,
                                                     const std::string& name);

// Copying checkpoints between nodes (no shared storage): the verified bytes of one file, and
// storing verified bytes under `root` at the path their own header names (layer, iteration),
// atomically; returns that path. kDataLoss for bytes that do not verify (nothing is written).
absl::StatusOr<std::string> ReadLayerCheckpointBytes(const std::string& path);
absl::StatusOr<std::string> StoreLayerCheckpointBytes(const std::string& root,
                                                      const std::string& bytes);
// Every layer file present under `root` as (iteration, layer), ascending; not verified.
std::vector<std::pair<int64_t, int>> ListLayerCheckpoints(const std::string& root);

// The newest iteration whose checkpoint is complete for `spec` (every layer file valid, kinds
// matching the spec). kNotFound when there is none (also when ROOT does not exist). Invalid
// newer checkpoints are skipped.
absl::StatusOr<int64_t> LatestCompleteCheckpoint(const std::string& root, const ModelSpec& spec);

// The state of the layers a rank owns (non-null entries of `layers`, by model layer index) with
// their share of `optimizer`'s moments (the ApplyAdamW order: layers by index, params in
// order), one LayerCheckpoint each, in layer order. A vocabulary shard of the head
// (executor/layers/vocab_head.h) gives its part only: its params() ([gain,] W_out columns); so
// does one of the embedding (executor/layers/vocab_embedding.h: its table rows).
absl::StatusOr<std::vector<LayerCheckpoint>> RankLayerCheckpoints(
    int64_t iteration, std::vector<std::unique_ptr<Layer>>& layers, const AdamW& optimizer);

// Writes RankLayerCheckpoints. kFailedPrecondition for a vocabulary shard of the head or of the
// embedding: the shards' parts are merged into the whole layer first (WholeHeadOf,
// WholeEmbeddingOf; the trainer gathers them on one rank), so that every layer file holds a
// whole layer and any partition can load it.
absl::Status SaveRankCheckpoint(const std::string& root, int64_t iteration,
                                std::vector<std::unique_ptr<Layer>>& layers,
                                const AdamW& optimizer);

// The layer files of RankLayerCheckpoints for the layers this rank holds whole: every non-null
// entry of `layers` for which `whole(layer)` is true (null `whole`: all), skipping vocabulary
// shards. What a rank can write alone, without its shard peers (a failure snapshot, see
// TrainOptions::snapshot_on_failure). Returns how many layer files were written.
absl::StatusOr<int> SaveWholeRankLayers(const std::string& root, int64_t iteration,
                                        std::vector<std::unique_ptr<Layer>>& layers,
                                        const AdamW& optimizer,
                                        const std::function<bool(int layer)>& whole);

// How many layer files SaveWholeRankLayers writes for `layers` (without writing them).
int WholeRankLayerCount(const std::vector<std::unique_ptr<Layer>>& layers,
                        const std::function<bool(int layer)>& whole);

// Loads the checkpoint of `iteration` into the non-null entries of `layers` and restores
// `optimizer` (step and moments, in the ApplyAdamW order). A vocabulary shard of the head
// takes its columns (and the gain, on the norm holder) of the whole head's file, one of the
// embedding its rows of the whole table, so a
// checkpoint saved with or without vocabulary parallelism, on any number of ranks, loads into
// either. Errors: those of ReadLayerCheckpoint; kFailedPrecondition naming the layer when a
// kind, parameter count or shape differs from the layer built here, or the saved optimizer
// steps differ.
// With `cut` (tensor- and expert-parallel shards, executor/layout_trainer.h), each layer's whole
// parameters and moments go through cut(layer, whole) first — the rank's shard of them.
using ShardCutter = std::function<absl::StatusOr<std::vector<Tensor>>(
    int layer, const std::vector<Tensor>& whole)>;
absl::Status LoadRankCheckpoint(const std::string& root, int64_t iteration,
                                std::vector<std::unique_ptr<Layer>>& layers, AdamW* optimizer,
                                const ShardCutter& cut = nullptr);

// Deletes every checkpoint directory older than the `keep` newest complete ones (keep >= 1),
// complete or not. Returns how many were removed; a directory a replicated file lands in while
// it goes is left for the next prune (not an error).
absl::StatusOr<int> PruneCheckpoints(const std::string& root, const ModelSpec& spec, int keep);

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_CHECKPOINT_H_
