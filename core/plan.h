// Plan: partition (layer ranges -> stages) + placement (stage -> device) + per-stage recompute
// choice + schedule, with a version.
//
// Invariants after ValidatePlan: stages cover layers [0, L) contiguously in order, every stage
// maps to a device in [0, num_devices), every device in use has a schedule entry.
#ifndef OCTOPIPE_CORE_PLAN_H_
#define OCTOPIPE_CORE_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/schedule.h"

namespace octopipe {

struct StageAssignment {
  int first_layer = 0;  // inclusive
  int last_layer = 0;   // inclusive
  int device = 0;
  bool recompute = false;

  friend bool operator==(const StageAssignment& a, const StageAssignment& b) {
    return a.first_layer == b.first_layer && a.last_layer == b.last_layer &&
           a.device == b.device && a.recompute == b.recompute;
  }
  friend bool operator!=(const StageAssignment& a, const StageAssignment& b) { return !(a == b); }
};

struct Plan {
  int64_t version = 0;
  int64_t cost_model_generation = 0;
  std::string schedule_name;
  int num_devices = 0;
  int num_microbatches = 0;
  std::vector<StageAssignment> stages;
  Schedule schedule;
  // The output layer (the model's last layer, its head) is split over all devices by
  // vocabulary (simulator/vocab_parallel.h): it costs nothing in the last stage, and every
  // device's order carries S and T passes of its shard for each micro-batch.
  bool vocab_parallel = false;
  // With vocab_parallel: the vocabulary columns of each device's shard of the head, in device
  // order (device d holds the columns after those of devices 0..d-1), summing to the model's
  // vocabulary: the split the plan was costed with (VocabShardColumns of the simulator's
  // speed-sized fractions), which the executor runs. Empty: equal shards
  // (EqualVocabShardColumns), as in plans written before the field.
  std::vector<int64_t> vocab_shard_columns;

  int num_stages() const { return static_cast<int>(stages.size()); }
};

// Splits `num_layers` layers into `num_stages` contiguous ranges as evenly as possible
// (earlier stages get the extra layers). Requires 1 <= num_stages <= num_layers.
std::vector<StageAssignment> EvenPartition(int num_layers, int num_stages);

// Checks the partition and placement against a model of `num_layers` layers, and the shape of
// vocab_shard_columns (empty, or with vocab_parallel one positive entry per device; the sum is
// checked against the model's vocabulary by PlanVocabShardColumns).
absl::Status ValidatePlanShape(const Plan& plan, int num_layers);

// The one rule that turns fractions of the vocabulary into whole columns per shard (simulator
// and executor both use it): largest remainder — each shard gets floor(vocab * f_d) (f
// normalised to sum to 1; equal fractions when any is not finite and > 0 or they sum to 0),
// the columns left go one each to the largest remainders, ties to the lower index; then every
// shard with no column takes one from the widest shard (the lowest index among equals), so
// every shard has >= 1. Sums to `vocab`. Requires 1 <= fractions.size() <= vocab.
std::vector<int64_t> VocabShardColumns(int64_t vocab, const std::vector<double>& fractions);

// Equal shards: VocabShardColumns with equal fractions (vocab / shards each, the first
// vocab % shards one column more). Requires 1 <= shards <= vocab.
std::vector<int64_t> EqualVocabShardColumns(int64_t vocab, int shards);

// The vocabulary columns each device's shard holds under `plan` for a model whose head has
// `vocab` entries: plan.vocab_shard_columns, or equal shards when it is empty.
// kInvalidArgument naming vocab_shard_columns unless the plan is vocab_parallel, has one
// positive entry per device and they sum to `vocab`, or (empty) vocab >= num_devices.
absl::StatusOr<std::vector<int64_t>> PlanVocabShardColumns(const Plan& plan, int64_t vocab);

}  // namespace octopipe

#endif  // OCTOPIPE_CORE_PLAN_H_
