// RankTrainer: one rank's training loop — builds the layers of the rank's stages from the
// reference model spec (deterministic init, so every rank's layers equal the single-process
// model's), runs the PipelineEngine for each iteration on deterministic data, and steps AdamW
// on the rank's parameters. Used by `octopipe train` (one process or thread per rank) and the
// equality tests.
#ifndef OCTOPIPE_EXECUTOR_TRAINER_H_
#define OCTOPIPE_EXECUTOR_TRAINER_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/plan.h"
#include "executor/engine.h"
#include "executor/layer.h"
#include "executor/model_spec.h"
#include "executor/transport.h"

namespace octopipe::executor {

struct TrainOptions {
  int iterations = 1;
  uint64_t data_seed = 7;
  double lr = 1e-3;
  bool step_optimizer = true;  // false: keep the gradients of the last iteration (tests)
};

struct RankResult {
  int rank = 0;
  std::vector<IterationStats> iterations;
  // The rank's layers after training, by model layer index (null where another rank owns it);
  // their grads() hold the last iteration's gradients.
  std::vector<std::unique_ptr<Layer>> layers;
};

// The micro-batches of one iteration (identical on every rank).
std::vector<MicroBatch> IterationData(const ModelSpec& spec, uint64_t data_seed, int iteration,
                                      int num_microbatches);

// Builds every layer a rank's stages need (others null).
absl::StatusOr<std::vector<std::unique_ptr<Layer>>> BuildRankLayers(const ModelSpec& spec,
                                                                    const Plan& plan, int rank);

absl::StatusOr<RankResult> TrainRank(const ModelSpec& spec, const Plan& plan, int rank,
                                     Transport* transport, const TrainOptions& options);

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_TRAINER_H_
