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
// costs exactly them (ProblemBuilder).
//
// The input embedding (design). When layer 0 is an embedding over the head's vocabulary
// (SplitsEmbedding) vocabulary parallelism splits it by the same columns: device d holds the
// table rows [begin_d, end_d) of its head shard, with their gradients and optimizer state
// (static bytes x columns_d / vocab), so no device holds the whole vocab x hidden table. Per
// micro-batch m:
//   forward   each device gathers the rows of m's tokens in its range (zero elsewhere) and the
//             partial embeddings are summed onto stage 0's device r0 (a reduce, tokens x hidden)
//             before F(0, m);
//   backward  the gradient of the embedding's output, made by B/BW(0, m) on r0, goes to every
//             device (a broadcast) and each scatter-adds the rows of its range into its shard's
//             weight gradient.
// Scheduling, with no new op kind. r0 runs its own shard inside stage 0's ops, as the layer it
// still is there: its F (and R) gather r0's rows and add the partials of the others, its W (or
// BW) scatter-adds r0's rows; stage 0 is costed with r0's fraction of the embedding, and keeps
// the reduced embedding as its input under recompute. The other devices' lookups depend on
// nothing in the iteration (the tokens are known, the table changes only at the optimizer
// step), so each device makes all M partials before its first op (a prologue, M lookups), in the
// order stage 0 consumes them, sending each as it is made: stage 0's first F waits one lookup and
// one reduce (embed_ready_s) and the later reduces stream ahead of it. Each other device
// scatter-adds the M gradients after its last op, once the last has arrived (an epilogue of M
// scatter-adds, from max(its last op's end, stage 0's last backward's end + one broadcast)),
// before its optimizer step (when iterations overlap, only r0 waits for that: its next first F
// needs every shard updated and looked up again). The rules (pipeline_rules.h:
// DeviceEarliestStart, DeviceEnd, DevicePeriod) thus add one start and one end per device, and
// the DAG, the op kinds, the plan format and the list
// scheduler's choices stay as they are. Per-micro-batch passes would buy nothing for this:
// folding the lookup of m into a pass of m (S) would make F(0, m) wait for the last stage's
// forward of an earlier micro-batch, which forbids GPipe-like orders; folding the scatter-add
// into T would add B(0, m) -> T(d, m) and hold S's activations until stage 0's backward; and new
// kinds (a lookup and a scatter pass per device and micro-batch) would cost every schedule 2 P M
// more ops for gathers of ~1/P of the embedding's F and W each. The reduce and the broadcast are
// costed as pipelined chains over the devices (ChainSeconds); the gather/scatter of only the
// rows each device owns would move less, but needs data-dependent message sizes. Message
// buffers, like every other message's, are not counted as activation memory. The executor runs
// the same split (executor/layers/vocab_embedding.h, executor/engine.h).
//
// Pure functions; thread-safe.
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

// Whether vocabulary parallelism also splits the model's input embedding: its first layer is an
// embedding over the vocabulary of its last layer, the head (the columns are the head's).
bool SplitsEmbedding(const ModelGraph& model);

// For a problem with vocab_parallel: kInvalidArgument naming the field unless every per-device
// vector has one finite, non-negative entry per device and the all-reduce time is finite and
// non-negative; the same for the embedding's vectors and times with embed_split, which needs
// vocab_parallel. OK when both are off.
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

// One device's share of the input embedding: per micro-batch, its lookup (the gather of its
// rows; the embedding's F x fraction) and its scatter-add (W x fraction); and its static bytes.
struct EmbeddingShard {
  double lookup_s = 0;
  double scatter_s = 0;
  double static_bytes = 0;
};
EmbeddingShard EmbeddingShardCost(const LayerCost& embedding, double fraction);

// A pipelined chain over the P devices in ring order that ends (reduce: toward_root) or
// starts (broadcast) at `root`: (P - 1) x the largest link latency + bytes x the largest
// inverse bandwidth over the P - 1 links it uses — (root + k + 1) -> (root + k) for a reduce,
// (root + k) -> (root + k + 1) for a broadcast, k = 0..P-2, indices mod P. `latency_s` and
// `inv_bandwidth` are P x P, row = sender. 0 for one device.
double ChainSeconds(int num_devices, const std::vector<double>& latency_s,
                    const std::vector<double>& inv_bandwidth, double bytes, int root,
                    bool toward_root);

// Bytes of the per-micro-batch all-reduce: the input gradient (as large as the hidden state)
// plus the fp32 softmax max and sum of every token.
double VocabAllReduceBytes(double hidden_state_bytes, double tokens);

// Ring all-reduce of `bytes` over devices 0..P-1 in index order: 2 (P - 1) steps, each moving
// bytes / P over every ring link at once, so a step lasts as long as the slowest link takes
// (latency + bytes / P / bandwidth). `latency_s` and `inv_bandwidth` are P x P, row = sender.
// 0 for one device.
double RingAllReduceSeconds(int num_devices, const std::vector<double>& latency_s,
                            const std::vector<double>& inv_bandwidth, double bytes);

// `layers` with the last layer's (the head's) F, B and W divided over `num_devices`, and with
// `split_embedding` the first layer's too: the per-layer costs a lower bound may assume once
// the vocabulary layers are split.
std::vector<LayerCost> WithHeadSplit(std::vector<LayerCost> layers, int num_devices,
                                     bool split_embedding = false);

}  // namespace octopipe

#endif  // OCTOPIPE_SIMULATOR_VOCAB_PARALLEL_H_
