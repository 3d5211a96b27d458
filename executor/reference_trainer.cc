#include "executor/reference_trainer.h"

#include <string>
#include <utility>

namespace octopipe::executor {

absl::StatusOr<std::vector<std::unique_ptr<Layer>>> BuildModel(absl::string_view pattern,
                                                               const ModelDims& dims) {
  absl::StatusOr<std::vector<std::string>> kinds = LayerKindsFromPattern(pattern);
  if (!kinds.ok()) return kinds.status();
  std::vector<std::unique_ptr<Layer>> layers;
  layers.reserve(kinds->size());
  for (size_t i = 0; i < kinds->size(); ++i) {
    absl::StatusOr<std::unique_ptr<Layer>> layer =
        MakeLayer((*kinds)[i], dims, static_cast<int>(i));
    if (!layer.ok()) return layer.status();
    layers.push_back(std::move(*layer));
  }
  return layers;
}

ReferenceResult RunReferenceIteration(std::vector<std::unique_ptr<Layer>>& layers,
                                      const std::vector<MicroBatch>& mbs) {
  for (std::unique_ptr<Layer>& layer : layers) layer->ZeroGrads();
  const size_t count = layers.size();
  std::vector<LayerContext> ctx(count);
  Tensor dloss(1, 1);
  dloss(0, 0) = 1.0f / static_cast<float>(mbs.size());
  double loss_sum = 0;
  for (const MicroBatch& mb : mbs) {
    Tensor act;
    for (size_t i = 0; i < count; ++i) act = layers[i]->Forward(act, mb, &ctx[i]);
    loss_sum += act(0, 0);
    Tensor grad = dloss;
    for (size_t i = count; i-- > 0;) {
      grad = layers[i]->BackwardInput(grad, mb, &ctx[i]);
      layers[i]->BackwardWeight(mb, &ctx[i]);
      ctx[i].Clear();
    }
  }
  ReferenceResult result;
  result.loss = mbs.empty() ? 0.0 : loss_sum / static_cast<double>(mbs.size());
  for (std::unique_ptr<Layer>& layer : layers) {
    std::vector<Tensor> copies;
    for (Tensor* g : layer->grads()) copies.push_back(*g);
    result.grads_per_layer.push_back(std::move(copies));
  }
  return result;
}

namespace {

// The parameters (and their gradients) of the non-null layers, in layer order.
void CollectParams(std::vector<std::unique_ptr<Layer>>& layers, std::vector<Tensor*>* params,
                   std::vector<const Tensor*>* grads) {
  for (std::unique_ptr<Layer>& layer : layers) {
    if (layer == nullptr) continue;
    for (Tensor* p : layer->params()) params->push_back(p);
    for (Tensor* g : layer->grads()) grads->push_back(g);
  }
}

}  // namespace

absl::Status ApplyAdamW(std::vector<std::unique_ptr<Layer>>& layers, AdamW* optimizer) {
  std::vector<Tensor*> params;
  std::vector<const Tensor*> grads;
  CollectParams(layers, &params, &grads);
  return optimizer->Step(params, grads);
}

void ReserveAdamW(std::vector<std::unique_ptr<Layer>>& layers, AdamW* optimizer) {
  std::vector<Tensor*> params;
  std::vector<const Tensor*> grads;
  CollectParams(layers, &params, &grads);
  optimizer->Reserve(params);
}

}  // namespace octopipe::executor
