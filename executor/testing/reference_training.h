// Test helpers: single-process reference training to compare distributed training against, and
// the layouts the equality tests run.
#ifndef OCTOPIPE_EXECUTOR_TESTING_REFERENCE_TRAINING_H_
#define OCTOPIPE_EXECUTOR_TESTING_REFERENCE_TRAINING_H_

#include <vector>

#include "core/layout_plan.h"
#include "core/plan.h"
#include "executor/model_spec.h"
#include "executor/tensor.h"

namespace octopipe::executor::testing {

// Single-process training of `spec` on `microbatches` micro-batches per iteration (the data of
// TrainOptions' default seed), `iterations` iterations each followed by an AdamW step at
// TrainOptions' default learning rate.
struct Reference {
  std::vector<double> losses;               // per iteration
  double loss = 0;                          // of the last iteration
  std::vector<std::vector<Tensor>> grads;   // of the last iteration, per layer
  std::vector<std::vector<Tensor>> params;  // after the last step, per layer
};
Reference TrainReference(const ModelSpec& spec, int microbatches, int iterations);

// The equality tests' reference model — every layer kind (selective scan, attention, MLP, MoE
// with 4 experts top-2, head) at toy sizes — with `microbatches` micro-batches per iteration.
ModelSpec EqualityTestSpec(int microbatches);

// `plan` run by `dp` replicas, its devices TP groups of `tp` ranks, EP degree `ep`: replica r
// takes micro-batches [r M, (r + 1) M) and its device j the ranks from (r + dp j) tp (the
// layout search's order with PP outermost).
LayoutPlan HomogeneousLayout(const Plan& plan, int tp, int ep, int dp);

}  // namespace octopipe::executor::testing

#endif  // OCTOPIPE_EXECUTOR_TESTING_REFERENCE_TRAINING_H_
