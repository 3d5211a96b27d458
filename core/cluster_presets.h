// Built-in clusters: public H100, H200 and A100 figures (docs/architecture.md, "Cost model")
// arranged as the clusters of examples/clusters/ (which are written from these builders), so the
// CLI has an embedded default and the examples cannot drift from the code.
//
//   h100-1node, h100-4nodes, h100-16nodes   8 x H100-SXM per node, NVLink + IB NDR
//   h200-1node                              8 x H200-SXM
//   a100-1node                              8 x A100-SXM 80GB
//   mixed-h100-a100                         2 H100 nodes + 2 A100 nodes
#ifndef OCTOPIPE_CORE_CLUSTER_PRESETS_H_
#define OCTOPIPE_CORE_CLUSTER_PRESETS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/cluster.h"

namespace octopipe {

std::vector<std::string> ClusterPresetNames();
// kInvalidArgument naming the value and listing the valid names.
absl::StatusOr<Cluster> ClusterPreset(absl::string_view name);

}  // namespace octopipe

#endif  // OCTOPIPE_CORE_CLUSTER_PRESETS_H_
