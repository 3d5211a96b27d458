#include "executor/trainer.h"

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "executor/data.h"
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
  return layers;
}

absl::StatusOr<RankResult> TrainRank(const ModelSpec& spec, const Plan& plan, int rank,
                                     Transport* transport, const TrainOptions& options) {
  RankResult result;
  result.rank = rank;
  ASSIGN_OR_RETURN(result.layers, BuildRankLayers(spec, plan, rank));
  PipelineEngine engine(plan, rank, &result.layers, transport,
                        spec.dims.batch * spec.dims.seq_len, spec.dims.hidden);
  RETURN_IF_ERROR(engine.Validate());
  AdamWOptions adam;
  adam.lr = static_cast<float>(options.lr);
  AdamW optimizer(adam);
  for (int it = 0; it < options.iterations; ++it) {
    for (auto& layer : result.layers) {
      if (layer) layer->ZeroGrads();
    }
    const std::vector<MicroBatch> data =
        IterationData(spec, options.data_seed, it, plan.num_microbatches);
    absl::StatusOr<IterationStats> stats = engine.RunIteration(data);
    if (!stats.ok()) {
      return absl::Status(stats.status().code(),
                          absl::StrCat("iteration ", it, ": ", stats.status().message()));
    }
    result.iterations.push_back(std::move(*stats));
    if (options.step_optimizer) RETURN_IF_ERROR(ApplyAdamW(result.layers, &optimizer));
  }
  return result;
}

}  // namespace octopipe::executor
