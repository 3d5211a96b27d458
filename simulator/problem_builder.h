// ProblemBuilder: turns (model, cluster, cost model, partition + placement) into the flat
// PipelineProblem the simulator evaluates. The only place stage costs are summed from layers.
//
// The cost model is queried once per (layer, hardware kind) at construction; afterwards a stage
// costs O(1) through prefix sums, so search loops can build thousands of problems cheaply.
// What the executor pays beyond its layers' compute comes from the cluster (measured by
// `octopipe profile`): the hardware's per-op overhead is added to every stage op, and each
// message costs the link's latency + bytes / bandwidth. Tensor- and expert-parallel
// collectives (CostModel::Comm, from the model's tp_degree / ep_degree and the device's node
// and the inter-node link) are added to each layer's F, B and R.
// Immutable after construction; safe to share const across threads.
#ifndef OCTOPIPE_SIMULATOR_PROBLEM_BUILDER_H_
#define OCTOPIPE_SIMULATOR_PROBLEM_BUILDER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cluster.h"
#include "core/cost_model.h"
#include "core/model_graph.h"
#include "core/plan.h"
#include "simulator/problem.h"

namespace octopipe {

class ProblemBuilder {
 public:
  // Uses the first `num_devices` devices of `cluster`. kInvalidArgument naming "devices" when
  // the cluster has fewer. `layer_time_factors` (empty, or one per layer) scale each layer's
  // F/B/W/R seconds: the calibration fitted from agents' measured times, the most trusted
  // cost source. With `vocab_parallel` the model's head is split over the devices
  // (simulator/vocab_parallel.h; CheckVocabParallelModel's error otherwise): it costs nothing
  // in the stage sums (Work, StaticBytes, ActivationBytes and the stages built), and every
  // problem built carries the shards' S/T passes, static bytes and the all-reduce. The shards
  // are vocab_shard_columns(): the devices' speed on the head rounded to whole columns
  // (VocabShardColumnsForSpeeds); each is costed by its exact share columns / vocabulary. A
  // first layer that is an embedding over the head's vocabulary is split by the same columns
  // (split_embedding()).
  static absl::StatusOr<ProblemBuilder> Create(const ModelGraph& model, const Cluster& cluster,
                                               const CostModel& cost_model, int num_devices,
                                               const std::vector<double>& layer_time_factors = {},
                                               bool vocab_parallel = false);

  // Validates the plan's partition and placement (and that its vocab_parallel is the
  // builder's), then builds. A vocab_parallel plan is costed with its own shards
  // (PlanVocabShardColumns: plan.vocab_shard_columns, equal shards when it has none; its
  // errors), the split the executor runs, whatever vocab_shard_columns() says.
  absl::StatusOr<PipelineProblem> Build(const Plan& plan) const;
  // Fast path for search loops: `stages` must already be a valid partition and placement.
  // Costs the shards vocab_shard_columns().
  void BuildInto(const std::vector<StageAssignment>& stages, int num_microbatches,
                 PipelineProblem* out) const;

  int num_layers() const { return num_layers_; }
  int num_devices() const { return num_devices_; }
  // F + B + W seconds of layers [first, last] on `device`.
  double Work(int first, int last, int device) const;
  // Weights + gradients + optimizer bytes of layers [first, last] on `device`.
  double StaticBytes(int first, int last, int device) const;
  // Activation bytes one micro-batch of layers [first, last] holds until its backward.
  double ActivationBytes(int first, int last, int device) const;
  const LayerCost& layer_cost(int layer, int device) const {
    return classes_[device_class_[device]].layers[layer];
  }
  double memory_capacity(int device) const { return capacity_[device]; }
  bool vocab_parallel() const { return vocab_parallel_; }
  // Whether vocab_parallel also splits the model's input embedding (SplitsEmbedding): then the
  // embedding costs nothing in Work and StaticBytes either, stage 0 is costed with its
  // device's shard, and every problem built carries the embedding's PipelineProblem fields.
  bool split_embedding() const { return split_embedding_; }
  // With vocab_parallel: the head's vocabulary (0 otherwise).
  int64_t vocab() const { return vocab_; }
  // With vocab_parallel: the vocabulary columns of each device's shard (sum: the head's
  // vocabulary), what a plan built by this builder carries (Plan::vocab_shard_columns).
  // Empty otherwise.
  const std::vector<int64_t>& vocab_shard_columns() const { return vocab_shard_columns_; }

 private:
  ProblemBuilder() = default;

  // Prefix sums over layers for one hardware kind: sum[l] is the total of layers [0, l).
  struct HardwareClass {
    std::vector<LayerCost> layers;
    std::vector<double> f, b, w, r, act, act_w, statics, work;
    // Prefix sums of the overlapped EP all-to-alls of F and B (TrainingOptions::ep_comm_overlap;
    // all 0 otherwise): the stages' PipelineProblem::forward_tail_s / backward_tail_s.
    std::vector<double> ft, bt;
    // The share of an overlapped all-to-all's seconds the compute beside it loses
    // (PipelineProblem::tail_compute_share): ep_comm_sms / sm_count; 0 when unknown.
    double tail_compute_share = 0;
    // The hardware's fixed executor cost per scheduled op (HardwareSpec::op_overhead_s), added
    // once to each stage's F, B, W and R: a stage's op pays it once whatever its layer count.
    double op_overhead_s = 0;
    // HardwareSpec::message_cpu_s: added to a stage's F and B once per neighbouring stage on
    // another device (F receives from the one below and sends to the one above, B the reverse).
    double message_cpu_s = 0;
  };

  int num_layers_ = 0;
  int num_devices_ = 0;
  double tokens_per_microbatch_ = 0;
  std::vector<HardwareClass> classes_;
  std::vector<int> device_class_;
  std::vector<double> capacity_;
  std::vector<double> link_latency_s_;
  std::vector<double> link_inv_bandwidth_;
  // Vocabulary parallelism: per device, its shard of the head; the hidden state broadcast to
  // every shard and the all-reduce per micro-batch.
  struct VocabShardCosts {
    std::vector<double> s_s, t_s, activation_bytes, static_bytes;  // per device
    // With the embedding split: the device's share of the embedding's F, B, W and R seconds
    // (its shard's lookup, ..., scatter-add), per device; static_bytes holds its rows too.
    std::vector<double> embed_f, embed_b, embed_w, embed_r;
  };
  bool vocab_parallel_ = false;
  bool comm_tails_ = false;  // some stage has overlapped EP communication
  bool split_embedding_ = false;  // vocab_parallel_ and SplitsEmbedding(model)
  double embed_bytes_ = 0;        // the embedding's output per micro-batch: reduced, broadcast
  int64_t vocab_ = 0;  // the head's vocabulary
  std::vector<int64_t> vocab_shard_columns_;
  VocabShardCosts vocab_costs_;  // of vocab_shard_columns_
  double vocab_input_bytes_ = 0;
  double vocab_allreduce_s_ = 0;

  void InitVocabParallel();
  // Each device's shard cost for `columns` (one per device, summing to vocab_).
  VocabShardCosts VocabCostsOf(const std::vector<int64_t>& columns) const;
  void BuildWith(const std::vector<StageAssignment>& stages, int num_microbatches,
                 const VocabShardCosts& vocab, PipelineProblem* out) const;
};

// One-shot convenience over ProblemBuilder.
absl::StatusOr<PipelineProblem> BuildProblem(const ModelGraph& model, const Cluster& cluster,
                                             const CostModel& cost_model, const Plan& plan);

}  // namespace octopipe

#endif  // OCTOPIPE_SIMULATOR_PROBLEM_BUILDER_H_
