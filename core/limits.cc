#include "core/limits.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace octopipe {
namespace {

absl::Status CheckName(absl::string_view field, const std::string& name,
                       const SizeLimits& limits) {
  if (static_cast<int64_t>(name.size()) <= limits.max_name_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(field, ": a name of ", name.size(),
                                                   " bytes exceeds the limit of ",
                                                   limits.max_name_bytes, " (max_name_bytes)"));
}

}  // namespace

absl::Status CheckLimit(absl::string_view field, int64_t value, int64_t limit,
                        absl::string_view limit_name) {
  if (value <= limit) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(field, ": ", value, " exceeds the limit of ",
                                                   limit, " (", limit_name, ")"));
}

absl::Status CheckModelSize(const ModelGraph& model, const SizeLimits& limits) {
  RETURN_IF_ERROR(CheckLimit("model.layers", model.num_layers(), limits.max_layers, "max_layers"));
  RETURN_IF_ERROR(CheckLimit("model.training.num_microbatches", model.training.num_microbatches,
                             limits.max_microbatches, "max_microbatches"));
  RETURN_IF_ERROR(CheckName("model.name", model.name, limits));
  for (int i = 0; i < model.num_layers(); ++i) {
    RETURN_IF_ERROR(CheckName(absl::StrCat("model.layers[", i, "].name"), model.layers[i].name,
                              limits));
  }
  return absl::OkStatus();
}

absl::Status CheckClusterSize(const Cluster& cluster, const SizeLimits& limits) {
  RETURN_IF_ERROR(CheckLimit("cluster.nodes", static_cast<int64_t>(cluster.nodes.size()),
                             limits.max_nodes, "max_nodes"));
  RETURN_IF_ERROR(CheckLimit("cluster.hardware", static_cast<int64_t>(cluster.hardware.size()),
                             limits.max_hardware, "max_hardware"));
  int64_t devices = 0;  // summed in 64 bits: per-node counts are ints and may overflow an int
  for (size_t i = 0; i < cluster.nodes.size(); ++i) {
    devices += std::max(0, cluster.nodes[i].num_devices);
    RETURN_IF_ERROR(CheckName(absl::StrCat("cluster.nodes[", i, "].name"), cluster.nodes[i].name,
                              limits));
  }
  RETURN_IF_ERROR(CheckLimit("cluster devices (sum of nodes[].num_devices)", devices,
                             limits.max_devices, "max_devices"));
  for (size_t i = 0; i < cluster.hardware.size(); ++i) {
    RETURN_IF_ERROR(CheckName(absl::StrCat("cluster.hardware[", i, "].name"),
                              cluster.hardware[i].name, limits));
  }
  return CheckName("cluster.name", cluster.name, limits);
}

absl::Status CheckRunSize(int64_t layers, int64_t devices, int64_t chunks, int64_t microbatches,
                          int64_t threads, const SizeLimits& limits, const RunSizeNames& names) {
  RETURN_IF_ERROR(CheckLimit("model.layers", layers, limits.max_layers, "max_layers"));
  RETURN_IF_ERROR(CheckLimit(names.devices, devices, limits.max_devices, "max_devices"));
  RETURN_IF_ERROR(CheckLimit(names.chunks, chunks, limits.max_chunks, "max_chunks"));
  RETURN_IF_ERROR(
      CheckLimit(names.microbatches, microbatches, limits.max_microbatches, "max_microbatches"));
  RETURN_IF_ERROR(CheckLimit(names.threads, threads, limits.max_threads, "max_threads"));
  // The largest candidate: every device runs `chunks` stages (the tuner's default is 4), but
  // never more stages than layers.
  const int64_t stages =
      std::min(std::max<int64_t>(layers, 1), std::max<int64_t>(devices, 1) *
                                                 std::max<int64_t>(chunks > 0 ? chunks : 4, 1));
  RETURN_IF_ERROR(CheckLimit(absl::StrCat("stages x ", names.microbatches, " (", stages, " x ",
                                          microbatches, ")"),
                             stages * std::max<int64_t>(microbatches, 1),
                             limits.max_stage_microbatches, "max_stage_microbatches"));
  return CheckLimit(absl::StrCat("model.layers x ", names.devices, " (", layers, " x ", devices,
                                 ")"),
                    layers * std::max<int64_t>(devices, 1), limits.max_layer_devices,
                    "max_layer_devices");
}

}  // namespace octopipe
