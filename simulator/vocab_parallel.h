// Vocabulary parallelism (Yeung et al. 2024, "Balancing Pipeline Parallelism with Vocabulary
// Parallelism"): the output layer — final norm, logits GEMM over the vocabulary and the
// cross-entropy — is split over every pipeline device by vocabulary instead of running on the
// last stage's device, so a large vocabulary no longer makes one device the bottleneck.
//
// Per micro-batch (the paper's single-barrier algorithm): the last stage's forward broadcasts
// its hidden state X to every device; device d's S pass computes its shard's logits, the local
// softmax max and sum and its partial input gradient; one all-reduce combines max, sum and the
// input gradient, which the last stage's backward then consumes; device d's T pass computes its
// shard's weight gradient (deferrable like W). Edges and durations are rules of
// simulator/pipeline_rules.h; this file sizes the shards and costs the collective.
//
// Shards are sized to the devices' speed on the head (equal on identical devices), so every
// device's S and T take about the same time: VocabShardFractions, rounded to whole vocabulary
// columns by the one rule the executor shares (VocabShardColumns, core/plan.h). The plan
// carries those columns (Plan::vocab_shard_columns), the executor runs them and the simulator
// costs exactly them (ProblemBuilder). Pure functions; thread-safe.
#ifndef OCTOPIPE_SIMULATOR_VOCAB_PARALLEL_H_
#define OCTOPIPE_SIMULATOR_VOCAB_PARALLEL_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "core/cost_model.h"
#include "core/model_graph.h"
#include "simulator/problem.h"

namespace octopipe {

// kFailedPrecondition naming `vocab_parallel` unless the model's last layer is its head (the
// output layer to split), there is a layer before it, and the head's vocabulary has at least
// one entry per device (`num_devices`; every shard holds at least one column).
absl::Status CheckVocabParallelModel(const ModelGraph& model, int num_devices);

// For a problem with vocab_parallel: kInvalidArgument naming the field unless every per-device
// vector has one finite, non-negative entry per device and the all-reduce time is finite and
// non-negative. OK when vocab_parallel is off.
absl::Status ValidateVocabParallel(const PipelineProblem& problem);

// Fraction of the vocabulary each device takes, proportional to its speed: 1 / head_seconds[d]
// normalised to sum to 1 (equal fractions when any time is not > 0).
std::vector<double> VocabShardFractions(const std::vector<double>& head_seconds);

// The vocabulary columns per device a plan is costed with and runs: VocabShardColumns (core/
// plan.h) of VocabShardFractions(head_seconds). Requires 1 <= head_seconds.size() <= vocab.
std::vector<int64_t> VocabShardColumnsForSpeeds(int64_t vocab,
                                                const std::vector<double>& head_seconds);

// One device's share of the output layer for one micro-batch.
struct VocabShard {
  double s_s = 0;               // S pass: (F + B of the head) x fraction, plus the op overhead
  double t_s = 0;               // T pass: W of the head x fraction, plus the op overhead
  double activation_bytes = 0;  // X (kept for the weight gradient) + its softmax share
  double static_bytes = 0;      // weights, gradients and optimizer state of the shard
};
VocabShard VocabShardCost(const LayerCost& head, double fraction, double op_overhead_s);

// Bytes of the per-micro-batch all-reduce: the input gradient (as large as the hidden state)
// plus the fp32 softmax max and sum of every token.
double VocabAllReduceBytes(double hidden_state_bytes, double tokens);

// Ring all-reduce of `bytes` over devices 0..P-1 in index order: 2 (P - 1) steps, each moving
// bytes / P over every ring link at once, so a step lasts as long as the slowest link takes
// (latency + bytes / P / bandwidth). `latency_s` and `inv_bandwidth` are P x P, row = sender.
// 0 for one device.
double RingAllReduceSeconds(int num_devices, const std::vector<double>& latency_s,
                            const std::vector<double>& inv_bandwidth, double bytes);

// `layers` with the last layer's (the head's) F, B and W divided over `num_devices`: the
// per-layer costs a lower bound may assume once the head is split.
std::vector<LayerCost> WithHeadSplit(std::vector<LayerCost> layers, int num_devices);

}  // namespace octopipe

#endif  // OCTOPIPE_SIMULATOR_VOCAB_PARALLEL_H_
