#include "core/cluster_presets.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace octopipe {
namespace {

// Public spec sheets: dense BF16 peak (as Megatron-LM's gpu_peak_flops.py lists it), HBM
// capacity and bandwidth, dense FP8 peak (NVIDIA's H100/H200 SXM data sheets: 1979 TFLOP/s;
// A100 has no FP8) and SM count (132 on H100/H200 SXM, 108 on A100) (docs/architecture.md,
// "Cost model").
const HardwareSpec kH100{"H100-SXM", 989e12, 80e9, 3.35e12, 0, 0, 1979e12, 132};
const HardwareSpec kH200{"H200-SXM", 989e12, 141e9, 4.8e12, 0, 0, 1979e12, 132};
const HardwareSpec kA100{"A100-SXM-80GB", 312e12, 80e9, 2.04e12, 0, 0, 0, 108};

// Published NVLink figures are bidirectional (900 GB/s H100/H200, 600 GB/s A100); a pipeline
// transfer uses one direction. InfiniBand NDR: 400 Gb/s per port = 50 GB/s per direction.
// Latencies are not published: assumed 3 us for an NVLink hop and 5 us for an IB hop, typical
// NCCL point-to-point small-message figures; both are calibratable cluster-file fields.
constexpr double kNvlinkH100 = 450e9;
constexpr double kNvlinkA100 = 300e9;
constexpr double kIbNdr = 50e9;
constexpr double kNvlinkLatency = 3e-6;
constexpr double kIbLatency = 5e-6;
// Kept free on every device for the CUDA context, allocator fragmentation and NCCL buffers
// (an assumption; a cluster file sets its own).
constexpr double kReserve = 4e9;

Cluster Make(const std::string& name, const std::vector<std::pair<HardwareSpec, int>>& nodes) {
  Cluster c;
  c.name = name;
  for (const auto& [hw, count] : nodes) {
    bool known = false;
    for (const HardwareSpec& h : c.hardware) known = known || h.name == hw.name;
    if (!known) c.hardware.push_back(hw);
    for (int i = 0; i < count; ++i) {
      Node n;
      n.name = absl::StrCat("node", c.nodes.size());
      n.hardware = hw.name;
      n.num_devices = 8;
      const bool a100 = hw.name == kA100.name;
      n.intra_node_link = LinkSpec{a100 ? kNvlinkA100 : kNvlinkH100, kNvlinkLatency};
      c.nodes.push_back(n);
    }
  }
  c.inter_node_link = LinkSpec{kIbNdr, kIbLatency};
  c.memory_reserve_bytes = kReserve;
  return c;
}

struct Preset {
  const char* name;
  std::vector<std::pair<HardwareSpec, int>> nodes;
};

const std::vector<Preset>& Presets() {
  static const auto* presets = new std::vector<Preset>{
      {"h100-1node", {{kH100, 1}}},
      {"h100-4nodes", {{kH100, 4}}},
      {"h100-16nodes", {{kH100, 16}}},
      {"h200-1node", {{kH200, 1}}},
      {"a100-1node", {{kA100, 1}}},
      {"mixed-h100-a100", {{kH100, 2}, {kA100, 2}}},
  };
  return *presets;
}

}  // namespace

std::vector<std::string> ClusterPresetNames() {
  std::vector<std::string> out;
  for (const Preset& p : Presets()) out.push_back(p.name);
  return out;
}

absl::StatusOr<Cluster> ClusterPreset(absl::string_view name) {
  for (const Preset& p : Presets()) {
    if (name == p.name) return Make(p.name, p.nodes);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown cluster preset '", name, "' (valid: ",
                                                 absl::StrJoin(ClusterPresetNames(), ", "), ")"));
}

}  // namespace octopipe
