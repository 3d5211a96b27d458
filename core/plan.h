// Plan: partition (layer ranges -> stages) + placement (stage -> device) + per-stage recompute
// choice + schedule, with a version.
//
// Invariants after ValidatePlan: stages cover layers [0, L) contiguously in order, every stage
// maps to a device in [0, num_devices), every device in use has a schedule entry.
#ifndef OCTOPIPE_CORE_PLAN_H_
#define OCTOPIPE_CORE_PLAN_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
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

  int num_stages() const { return static_cast<int>(stages.size()); }
};

// Splits `num_layers` layers into `num_stages` contiguous ranges as evenly as possible
// (earlier stages get the extra layers). Requires 1 <= num_stages <= num_layers.
std::vector<StageAssignment> EvenPartition(int num_layers, int num_stages);

// Checks the partition and placement against a model of `num_layers` layers.
absl::Status ValidatePlanShape(const Plan& plan, int num_layers);

}  // namespace octopipe

#endif  // OCTOPIPE_CORE_PLAN_H_
