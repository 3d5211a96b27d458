// SizeLimits: the one place that says how large an input OctoPipe accepts — model, cluster and
// planning-run sizes — shared by the planner service (server flags override the defaults) and
// the `octopipe` CLI, so both refuse the same inputs with the same message.
//
// Contract: every Check* function runs BEFORE anything proportional to the checked size is
// allocated or computed, and answers kResourceExhausted naming the field, its value and the
// limit ("options.num_microbatches: 2147483647 exceeds the limit of 4096 (max_microbatches)").
// A value that is wrong whatever the limit (negative, non-finite) is kInvalidArgument and is
// left to the types' own Validate. The defaults are sized for the largest pipelines worth
// planning today (4,096 GPUs, 4,096 layers) while keeping one evaluation of the simulator
// under about a second and its memory under a few hundred MB.
//
// Plain value type; the functions are stateless and thread-safe.
#ifndef OCTOPIPE_CORE_LIMITS_H_
#define OCTOPIPE_CORE_LIMITS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/cluster.h"
#include "core/model_graph.h"

namespace octopipe {

struct SizeLimits {
  // Layers of one model (model.layers). Each layer costs a row of the cost table per device.
  int64_t max_layers = 4096;
  // Devices of one cluster (sum of nodes[].num_devices) and of one pipeline.
  int64_t max_devices = 4096;
  // Entries of cluster.nodes and cluster.hardware.
  int64_t max_nodes = 4096;
  int64_t max_hardware = 256;
  // Micro-batches per iteration (options and model.training).
  int64_t max_microbatches = 4096;
  // Chunks (stages) per device a schedule may use.
  int64_t max_chunks = 16;
  // Evaluation threads of one tuning run.
  int64_t max_threads = 64;
  // Stages x micro-batches of the largest candidate one run may evaluate (each is 3-4 compute
  // ops plus their transfers): bounds the memory and the time of one simulator pass.
  int64_t max_stage_microbatches = int64_t{1} << 20;
  // Layers x pipeline devices: the size of the per-(layer, device) cost table built per run.
  int64_t max_layer_devices = int64_t{1} << 22;
  // Longest tuning budget a request may ask for.
  double max_time_budget_s = 600;
  // Longest name (job, node, hardware, layer) accepted.
  int64_t max_name_bytes = 256;
  // Largest model / cluster / plan file the CLI reads.
  int64_t max_file_bytes = int64_t{64} << 20;
};

// kResourceExhausted "<field>: <value> exceeds the limit of <limit> (<limit_name>)" when
// value > limit; OK otherwise.
absl::Status CheckLimit(absl::string_view field, int64_t value, int64_t limit,
                        absl::string_view limit_name);

// Layer count, training.num_microbatches and name lengths of a converted model.
absl::Status CheckModelSize(const ModelGraph& model, const SizeLimits& limits);
// Node, hardware and device counts and name lengths of a converted cluster.
absl::Status CheckClusterSize(const Cluster& cluster, const SizeLimits& limits);

// One planning / simulation run: `devices` pipeline devices, up to `chunks` stages per device
// (0: the tuner's default of 4), `microbatches`, `threads` over a model of `layers` layers.
// Fields are named as `prefix` + "num_devices" etc. so the service says "options.num_devices"
// and the CLI "--devices" (pass field names through `names`).
struct RunSizeNames {
  const char* devices = "num_devices";
  const char* chunks = "chunks";
  const char* microbatches = "num_microbatches";
  const char* threads = "threads";
};
absl::Status CheckRunSize(int64_t layers, int64_t devices, int64_t chunks, int64_t microbatches,
                          int64_t threads, const SizeLimits& limits,
                          const RunSizeNames& names = RunSizeNames());

}  // namespace octopipe

#endif  // OCTOPIPE_CORE_LIMITS_H_
