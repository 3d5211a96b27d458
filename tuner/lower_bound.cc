#include "tuner/lower_bound.h"

#include <algorithm>

namespace octopipe {

LowerBound PipelineLowerBound(const std::vector<LayerCost>& layers, int num_devices,
                              int num_microbatches, bool steady_state) {
  LowerBound lb;
  if (layers.empty() || num_devices < 1 || num_microbatches < 1) return lb;
  const double m = num_microbatches;
  double total_work = 0, sum_f = 0, sum_b = 0;
  for (int l = 0; l < static_cast<int>(layers.size()); ++l) {
    const LayerCost& c = layers[l];
    const double work = c.forward_s + c.backward_input_s + c.weight_grad_s;
    total_work += work;
    // sum_f and sum_b hold the layers below l here: the forward must reach l first, and the
    // backward of l must still pass through them.
    double term = m * work;
    if (!steady_state) {
      term = std::max(sum_f + m * work, sum_f + m * (c.forward_s + c.backward_input_s) + sum_b);
    }
    if (term > lb.layer_s) {
      lb.layer_s = term;
      lb.heaviest_layer = l;
    }
    sum_f += c.forward_s;
    sum_b += c.backward_input_s;
  }
  lb.work_s = total_work * m / num_devices;
  if (!steady_state) lb.chain_s = sum_f + sum_b + layers.front().weight_grad_s;
  lb.seconds = lb.work_s;
  lb.binding = "work";
  if (lb.chain_s > lb.seconds) {
    lb.seconds = lb.chain_s;
    lb.binding = "chain";
  }
  if (lb.layer_s > lb.seconds) {
    lb.seconds = lb.layer_s;
    lb.binding = "layer";
  }
  return lb;
}

std::vector<LayerCost> FastestLayerCosts(const ProblemBuilder& builder) {
  std::vector<LayerCost> out(builder.num_layers());
  for (int l = 0; l < builder.num_layers(); ++l) {
    LayerCost best = builder.layer_cost(l, 0);
    for (int d = 1; d < builder.num_devices(); ++d) {
      const LayerCost& c = builder.layer_cost(l, d);
      best.forward_s = std::min(best.forward_s, c.forward_s);
      best.backward_input_s = std::min(best.backward_input_s, c.backward_input_s);
      best.weight_grad_s = std::min(best.weight_grad_s, c.weight_grad_s);
    }
    out[l] = best;
  }
  return out;
}

double LowerBoundGap(double predicted_s, const LowerBound& bound) {
  if (!(bound.seconds > 0) || !(predicted_s > bound.seconds)) return 0;
  return (predicted_s - bound.seconds) / predicted_s;
}

}  // namespace octopipe
