#include "executor/trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "executor/checkpoint.h"
#include "executor/core_rotation.h"
#include "executor/data.h"
#include "executor/layers/vocab_embedding.h"
#include "executor/layers/vocab_head.h"
#include "executor/optimizer.h"
#include "executor/reference_trainer.h"

namespace octopipe::executor {

std::vector<MicroBatch> IterationData(const ModelSpec& spec, uint64_t data_seed, int iteration,
                                      int num_microbatches) {
  return MakeMicroBatches(spec.dims, data_seed, iteration, num_microbatches);
}

absl::StatusOr<std::vector<std::unique_ptr<Layer>>> BuildRankLayers(const ModelSpec& spec,
                                                                    const Plan& plan, int rank) {
  const int L = static_cast<int>(spec.kinds.size());
  RETURN_IF_ERROR(ValidatePlanShape(plan, L));
  std::vector<std::unique_ptr<Layer>> layers(L);
  for (const StageAssignment& st : plan.stages) {
    if (st.device != rank) continue;
    for (int l = st.first_layer; l <= st.last_layer; ++l) {
      ASSIGN_OR_RETURN(layers[l], MakeLayer(spec.kinds[l], spec.dims, l));
    }
  }
  if (plan.vocab_parallel) {
    // Every rank holds its vocabulary shard of the head; the last stage's rank also its norm.
    // Its shard is the plan's (the split the simulator costed), or equal without one.
    if (spec.kinds.back() != "head" || spec.dims.vocab < plan.num_devices) {
      return absl::InvalidArgumentError(absl::StrCat(
          "vocab_parallel: the model must end with its head and have at least one vocabulary "
          "entry per device: vocab ", spec.dims.vocab, ", ", plan.num_devices, " devices"));
    }
    ASSIGN_OR_RETURN(const std::vector<int64_t> columns,
                     PlanVocabShardColumns(plan, spec.dims.vocab));
    layers[L - 1] = std::make_unique<VocabShardHead>(
        spec.dims, L - 1, VocabShardRange(columns, rank), plan.stages.back().device == rank);
    // The embedding, over the same vocabulary, is split by the same columns (stage 0's rank runs
    // its layer; see engine.h).
    if (spec.kinds.front() == "embedding") {
      layers[0] =
          std::make_unique<VocabShardEmbedding>(spec.dims, 0, VocabShardRange(columns, rank));
    }
  }
  return layers;
}

// Rank 0 decides and tells every other rank whether to stop before the next iteration.
absl::StatusOr<bool> AgreeOnStop(int rank, Transport* transport, const TrainOptions& options) {
  int32_t stop = 0;
  if (rank == 0) {
    stop = options.stop_requested && options.stop_requested() ? 1 : 0;
    for (int r = 1; r < transport->size(); ++r) {
      RETURN_IF_ERROR(transport->Send(r, kStopControlTag, &stop, sizeof(stop)));
    }
  } else {
    RETURN_IF_ERROR(transport->Recv(0, kStopControlTag, &stop, sizeof(stop)));
  }
  return stop != 0;
}

// After an iteration whose gradients are final on this rank: every other rank tells rank 0 so
// (kCommitControlTag), and rank 0, having heard from all, sends its stop decision for the next
// iteration, which is also the go-ahead for this iteration's step (TrainOptions::
// snapshot_on_failure).
static absl::StatusOr<bool> CommitStep(int rank, Transport* transport,
                                       const TrainOptions& options) {
  int32_t final = 1;
  if (rank != 0) {
    RETURN_IF_ERROR(transport->Send(0, kCommitControlTag, &final, sizeof(final)));
    int32_t stop = 0;
    RETURN_IF_ERROR(transport->Recv(0, kStopControlTag, &stop, sizeof(stop)));
    return stop != 0;
  }
  for (int r = 1; r < transport->size(); ++r) {
    RETURN_IF_ERROR(transport->Recv(r, kCommitControlTag, &final, sizeof(final)));
  }
  return AgreeOnStop(rank, transport, options);
}

namespace {

// The tags of a vocabulary shard's checkpoint part sent to the rank that writes the whole
// layer: its tensors (parameters, then first and second moments once the optimizer has
// stepped), from these bases up (below kStopControlTag, far above the engine's tags).
constexpr uint32_t kHeadPartTag = 0xFFFFFE00u;
constexpr uint32_t kEmbeddingPartTag = 0xFFFFFD00u;

// Every tensor of a part, in the order it travels.
std::vector<Tensor*> TravellingPieces(LayerCheckpoint* part) {
  std::vector<Tensor*> out;
  for (auto* v : {&part->params, &part->first_moments, &part->second_moments}) {
    for (Tensor& t : *v) out.push_back(&t);
  }
  return out;
}

// One vocabulary-split layer's checkpoint: `own` is this rank's part. A rank other than
// `holder` sends it there; the holder receives every other shard's part (shaped by
// `empty_part(d)`: its parameters, uninitialised) and returns the whole layer's checkpoint,
// merged by `whole_of` in shard order; the other ranks return nullopt.
using WholeOf = absl::StatusOr<std::vector<Tensor>> (*)(const std::vector<std::vector<Tensor>>&);
absl::StatusOr<std::optional<LayerCheckpoint>> GatherVocabShards(
    LayerCheckpoint own, int rank, int holder, int num_ranks, uint32_t tag_base,
    Transport* transport, const std::function<std::vector<Tensor>(int)>& empty_part,
    WholeOf whole_of) {
  if (rank != holder) {
    uint32_t tag = tag_base;
    for (Tensor* t : TravellingPieces(&own)) {
      RETURN_IF_ERROR(transport->Send(holder, tag++, t->data(), t->size() * sizeof(float)));
    }
    return std::nullopt;
  }
  std::vector<std::vector<Tensor>> params(num_ranks), first(num_ranks), second(num_ranks);
  for (int d = 0; d < num_ranks; ++d) {
    LayerCheckpoint part;
    if (d == rank) {
      part = own;
    } else {
      part.params = empty_part(d);
      if (!own.first_moments.empty()) part.first_moments = part.second_moments = part.params;
      uint32_t tag = tag_base;
      for (Tensor* t : TravellingPieces(&part)) {
        RETURN_IF_ERROR(transport->Recv(d, tag++, t->data(), t->size() * sizeof(float)));
      }
    }
    params[d] = std::move(part.params);
    first[d] = std::move(part.first_moments);
    second[d] = std::move(part.second_moments);
  }
  LayerCheckpoint whole = std::move(own);
  ASSIGN_OR_RETURN(whole.params, whole_of(params));
  if (!whole.first_moments.empty()) {
    ASSIGN_OR_RETURN(whole.first_moments, whole_of(first));
    ASSIGN_OR_RETURN(whole.second_moments, whole_of(second));
  }
  return whole;
}

// Vocabulary parallelism: writes the rank's layers but its vocabulary shards — of the head,
// which goes to the norm holder, and of a split embedding, which goes to stage 0's rank; each
// holder merges every shard's part in shard order and writes the whole layer, so the checkpoint
// loads into any partition (executor/checkpoint.h).
absl::Status SaveVocabParallelCheckpoint(const ModelSpec& spec, const Plan& plan, int rank,
                                         Transport* transport, int64_t iteration,
                                         RankResult* result, const AdamW& optimizer,
                                         const std::string& root) {
  ASSIGN_OR_RETURN(std::vector<LayerCheckpoint> layers,
                   RankLayerCheckpoints(iteration, result->layers, optimizer));
  LayerCheckpoint head = std::move(layers.back());  // every rank holds a shard of the head
  layers.pop_back();
  std::optional<LayerCheckpoint> embedding;
  if (dynamic_cast<const VocabShardEmbedding*>(result->layers.front().get()) != nullptr) {
    embedding = std::move(layers.front());  // and of the embedding when it is split
    layers.erase(layers.begin());
  }
  for (const LayerCheckpoint& c : layers) RETURN_IF_ERROR(WriteLayerCheckpoint(root, c));
  ASSIGN_OR_RETURN(const std::vector<int64_t> columns,
                   PlanVocabShardColumns(plan, spec.dims.vocab));
  const int P = plan.num_devices, hidden = spec.dims.hidden;
  auto width = [&](int d) {
    const VocabRange r = VocabShardRange(columns, d);
    return r.end - r.begin;
  };
  ASSIGN_OR_RETURN(
      std::optional<LayerCheckpoint> whole_head,
      GatherVocabShards(std::move(head), rank, plan.stages.back().device, P, kHeadPartTag,
                        transport,
                        [&](int d) { return std::vector<Tensor>{Tensor(hidden, width(d))}; },
                        &WholeHeadOf));
  if (whole_head) RETURN_IF_ERROR(WriteLayerCheckpoint(root, *whole_head));
  if (embedding) {
    ASSIGN_OR_RETURN(
        std::optional<LayerCheckpoint> whole_embedding,
        GatherVocabShards(std::move(*embedding), rank, plan.stages.front().device, P,
                          kEmbeddingPartTag, transport,
                          [&](int d) { return std::vector<Tensor>{Tensor(width(d), hidden)}; },
                          &WholeEmbeddingOf));
    if (whole_embedding) RETURN_IF_ERROR(WriteLayerCheckpoint(root, *whole_embedding));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WritePipelineCheckpoint(const ModelSpec& spec, const Plan& plan, int rank,
                                     Transport* transport, int completed, RankResult* result,
                                     const AdamW& optimizer, const std::string& root) {
  if (plan.vocab_parallel) {
    return SaveVocabParallelCheckpoint(spec, plan, rank, transport, completed, result, optimizer,
                                       root);
  }
  return SaveRankCheckpoint(root, completed, result->layers, optimizer);
}

// The iterations of RunTrainingLoop from result->first_iteration on, and the final save.
// *uncommitted is set when it fails with this rank's gradients of the next iteration final but
// not stepped (the commit of TrainOptions::snapshot_on_failure failed).
static absl::Status TrainIterations(const TrainOptions& options, const TrainingHooks& hooks,
                                    int rank, Transport* transport, AdamW* optimizer,
                                    const std::function<absl::Status(int)>& save,
                                    int* last_saved, bool* uncommitted, RankResult* result);

absl::Status RunTrainingLoop(const ModelSpec& spec, int rank, Transport* transport,
                             const TrainOptions& options, const TrainingHooks& hooks,
                             RankResult* result) {
  AdamWOptions adam;
  adam.lr = static_cast<float>(options.lr);
  AdamW optimizer(adam);
  const bool checkpoints = !options.checkpoint_dir.empty();
  if (checkpoints && options.resume) {
    absl::StatusOr<int64_t> latest =
        options.resume_iteration >= 0
            ? absl::StatusOr<int64_t>(options.resume_iteration)
            : LatestCompleteCheckpoint(options.checkpoint_dir, spec);
    if (!latest.ok() && !absl::IsNotFound(latest.status())) return latest.status();
    if (latest.ok() && *latest > 0) {
      RETURN_IF_ERROR(
          LoadRankCheckpoint(options.checkpoint_dir, *latest, result->layers, &optimizer,
                             hooks.cut));
      result->first_iteration = static_cast<int>(*latest);
    }
  }
  std::optional<CoreRotation> rotation;
  if (options.core_rotation_s > 0) {
    const int slot = options.local_slot >= 0 ? options.local_slot : rank;
    rotation.emplace(slot, options.local_slots > 0 ? options.local_slots : transport->size(),
                     options.core_rotation_s);
    if (!rotation->active() && slot == 0) {
      std::fprintf(stderr, "core rotation off: %s\n", rotation->reason().c_str());
    }
  }
  if (options.host_probe_repeats > 0) {
    ASSIGN_OR_RETURN(result->host_probe, RunHostProbe(spec, options.host_probe_repeats));
  }
  // The moments now, not at the first step (see AdamW::Reserve).
  if (options.step_optimizer) ReserveAdamW(result->layers, &optimizer);
  auto save = [&](int completed) -> absl::Status {
    const auto start = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(hooks.write_checkpoint(completed, optimizer));
    if (rank == 0) {
      // Only checkpoints older than the `keep` newest complete ones go; the one being written
      // by the other ranks now is newer than all of those.
      absl::StatusOr<int> pruned =
          PruneCheckpoints(options.checkpoint_dir, spec, std::max(1, options.keep_checkpoints));
      if (!pruned.ok()) return pruned.status();
    }
    if (options.on_checkpoint) {
      options.on_checkpoint(completed, std::chrono::duration<double>(
                                           std::chrono::steady_clock::now() - start)
                                           .count());
    }
    return absl::OkStatus();
  };
  int last_saved = result->first_iteration;
  result->completed_iterations = result->first_iteration;
  bool uncommitted = false;
  absl::Status trained = TrainIterations(options, hooks, rank, transport, &optimizer, save,
                                         &last_saved, &uncommitted, result);
  if (trained.ok() || !options.snapshot_on_failure || !checkpoints ||
      result->completed_iterations < last_saved) {
    return trained;
  }
  // See TrainOptions::snapshot_on_failure.
  auto failed_too = [&trained](int iteration, const absl::Status& s) {
    return absl::Status(trained.code(),
                        absl::StrCat(trained.message(), "; saving the state of iteration ",
                                     iteration, " failed too: ", s.message()));
  };
  // The layers held whole, then the shards gathered over the rank's own copies (when those
  // cannot be gathered, the whole layers still count: another replica may hold the rest).
  auto snapshot = [&](int iteration) -> absl::StatusOr<int> {
    absl::StatusOr<int> written = SaveWholeRankLayers(options.checkpoint_dir, iteration,
                                                      result->layers, optimizer, hooks.whole);
    if (!written.ok()) return written.status();
    if (hooks.snapshot_shards) {
      absl::StatusOr<int> shards = hooks.snapshot_shards(iteration, result->layers, optimizer);
      if (shards.ok()) *written += *shards;
    }
    return written;
  };
  const int completed = result->completed_iterations;
  if (completed == last_saved) {
    // The failure came right after the checkpoint of `completed` (or the resume from it),
    // which holds this rank's state already.
    if (options.on_snapshot && completed > 0) {
      options.on_snapshot(completed, WholeRankLayerCount(result->layers, hooks.whole));
    }
  } else {
    absl::StatusOr<int> written = snapshot(completed);
    if (!written.ok()) return failed_too(completed, written.status());
    if (options.on_snapshot) options.on_snapshot(completed, *written);
  }
  if (uncommitted && options.step_optimizer) {
    // Roll forward: this rank's gradients of the next iteration are the reduced ones.
    RETURN_IF_ERROR(ApplyAdamW(result->layers, &optimizer));
    absl::StatusOr<int> written = snapshot(completed + 1);
    if (!written.ok()) return failed_too(completed + 1, written.status());
    if (options.on_snapshot) options.on_snapshot(completed + 1, *written);
  }
  return trained;
}

static absl::Status TrainIterations(const TrainOptions& options, const TrainingHooks& hooks,
                                    int rank, Transport* transport, AdamW* optimizer,
                                    const std::function<absl::Status(int)>& save,
                                    int* last_saved, bool* uncommitted, RankResult* result) {
  const bool checkpoints = !options.checkpoint_dir.empty();
  const bool commit = options.stoppable && options.snapshot_on_failure;
  std::optional<bool> decided;  // the stop decision that came with the last commit
  for (int it = result->first_iteration; it < options.iterations; ++it) {
    if (options.stoppable) {
      absl::StatusOr<bool> stop =
          decided.has_value() ? *decided : AgreeOnStop(rank, transport, options);
      if (!stop.ok()) {
        return absl::Status(stop.status().code(), absl::StrCat("before iteration ", it, ": ",
                                                               stop.status().message()));
      }
      if (*stop) {
        result->stopped = true;
        break;
      }
    }
    for (auto& layer : result->layers) {
      if (layer) layer->ZeroGrads();
    }
    absl::StatusOr<IterationStats> stats = hooks.iterate(it);
    if (!stats.ok()) {
      return absl::Status(stats.status().code(),
                          absl::StrCat("iteration ", it, ": ", stats.status().message()));
    }
    if (commit) {
      absl::StatusOr<bool> stop = CommitStep(rank, transport, options);
      if (!stop.ok()) {
        *uncommitted = true;  // its gradients are final: see TrainOptions::snapshot_on_failure
        return absl::Status(stop.status().code(),
                            absl::StrCat("after iteration ", it, ", committing its step: ",
                                         stop.status().message()));
      }
      decided = *stop;
    }
    if (options.step_optimizer) RETURN_IF_ERROR(ApplyAdamW(result->layers, optimizer));
    result->completed_iterations = it + 1;
    if (checkpoints && options.checkpoint_interval > 0 &&
        (it + 1) % options.checkpoint_interval == 0) {
      RETURN_IF_ERROR(save(it + 1));
      *last_saved = it + 1;
    }
    if (options.on_iteration) options.on_iteration(it, *stats);
    result->iterations.push_back(std::move(*stats));
  }
  const bool save_now =
      result->stopped || (options.checkpoint_at_end && result->completed_iterations > 0);
  if (checkpoints && save_now && *last_saved != result->completed_iterations) {
    RETURN_IF_ERROR(save(result->completed_iterations));
    *last_saved = result->completed_iterations;
  }
  return absl::OkStatus();
}

absl::StatusOr<RankResult> TrainRank(const ModelSpec& spec, const Plan& plan, int rank,
                                     Transport* transport, const TrainOptions& options) {
  RankResult result;
  result.rank = rank;
  ASSIGN_OR_RETURN(result.layers, BuildRankLayers(spec, plan, rank));
  PipelineEngine engine(plan, rank, &result.layers, transport,
                        spec.dims.batch * spec.dims.seq_len, spec.dims.hidden);
  RETURN_IF_ERROR(engine.Validate());
  TrainingHooks hooks;
  hooks.iterate = [&](int it) {
    return engine.RunIteration(IterationData(spec, options.data_seed, it, plan.num_microbatches));
  };
  hooks.write_checkpoint = [&](int completed, const AdamW& optimizer) {
    return WritePipelineCheckpoint(spec, plan, rank, transport, completed, &result, optimizer,
                                   options.checkpoint_dir);
  };
  RETURN_IF_ERROR(RunTrainingLoop(spec, rank, transport, options, hooks, &result));
  return result;
}

}  // namespace octopipe::executor
