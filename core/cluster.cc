#include "core/cluster.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"

namespace octopipe {
namespace {

const HardwareSpec* FindHardware(const Cluster& c, const std::string& name) {
  for (const HardwareSpec& h : c.hardware) {
    if (h.name == name) return &h;
  }
  return nullptr;
}

// Physical ranges (finite unless said): values outside them overflow the simulator's sums or
// quotients to inf/NaN. Unlimited memory and links (+inf) are allowed: synthetic clusters use
// them, and they only ever appear as divisors or capacities.
constexpr double kMinRate = 1;      // bytes/s, FLOP/s
constexpr double kMaxRate = 1e21;   // far above any device or link
constexpr double kMaxBytes = 1e18;  // device memory
constexpr int kMaxSmCount = 100000;
constexpr double kMaxLatencyS = 3600;

bool InRange(double value, double lo, double hi, bool inf_ok) {
  if (inf_ok && value == std::numeric_limits<double>::infinity()) return true;
  return std::isfinite(value) && value >= lo && value <= hi;
}

absl::Status RangeError(const std::string& path, double value, const char* range) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, " must be ", range, ", got ", value));
}

absl::Status ValidateLink(const std::string& path, const LinkSpec& link) {
  if (!InRange(link.bandwidth, kMinRate, kMaxRate, /*inf_ok=*/true)) {
    return RangeError(path + ".bandwidth", link.bandwidth, "in [1, 1e21] bytes/s or +inf");
  }
  if (!InRange(link.latency_s, 0, kMaxLatencyS, /*inf_ok=*/false)) {
    return RangeError(path + ".latency_s", link.latency_s, "finite and in [0, 3600] s");
  }
  if (link.allreduce_bandwidth != 0 &&
      !InRange(link.allreduce_bandwidth, kMinRate, kMaxRate, /*inf_ok=*/true)) {
    return RangeError(path + ".allreduce_bandwidth", link.allreduce_bandwidth,
                      "0 (the link's bandwidth) or in [1, 1e21] bytes/s or +inf");
  }
  if (!InRange(link.allreduce_latency_s, 0, kMaxLatencyS, /*inf_ok=*/false)) {
    return RangeError(path + ".allreduce_latency_s", link.allreduce_latency_s,
                      "finite and in [0, 3600] s (0: the link's latency)");
  }
  if (link.allreduce_overlapped_bandwidth != 0 &&
      !InRange(link.allreduce_overlapped_bandwidth, kMinRate, kMaxRate, /*inf_ok=*/true)) {
    return RangeError(path + ".allreduce_overlapped_bandwidth",
                      link.allreduce_overlapped_bandwidth,
                      "0 (allreduce_bandwidth) or in [1, 1e21] bytes/s or +inf");
  }
  if (!InRange(link.allreduce_overlapped_latency_s, 0, kMaxLatencyS, /*inf_ok=*/false)) {
    return RangeError(path + ".allreduce_overlapped_latency_s",
                      link.allreduce_overlapped_latency_s,
                      "finite and in [0, 3600] s (0: allreduce_latency_s)");
  }
  return absl::OkStatus();
}

}  // namespace

int Cluster::num_devices() const {
  int n = 0;
  for (const Node& node : nodes) n += node.num_devices;
  return n;
}

int Cluster::node_of_device(int device) const {
  for (int i = 0; i < static_cast<int>(nodes.size()); ++i) {
    if (device < nodes[i].num_devices) return i;
    device -= nodes[i].num_devices;
  }
  return -1;
}

const HardwareSpec& Cluster::device_hardware(int device) const {
  return *FindHardware(*this, nodes[node_of_device(device)].hardware);
}

const LinkSpec& Cluster::link(int from_device, int to_device) const {
  const int a = node_of_device(from_device);
  if (a == node_of_device(to_device)) return nodes[a].intra_node_link;
  return inter_node_link;
}

double Cluster::usable_memory(int device) const {
  return device_hardware(device).memory_bytes - memory_reserve_bytes;
}

absl::Status Validate(const Cluster& c) {
  if (c.hardware.empty()) {
    return absl::InvalidArgumentError("hardware: a cluster needs at least one hardware spec");
  }
  for (size_t i = 0; i < c.hardware.size(); ++i) {
    const HardwareSpec& h = c.hardware[i];
    const std::string p = absl::StrCat("hardware[", i, "]");
    if (h.name.empty()) return absl::InvalidArgumentError(absl::StrCat(p, ".name is empty"));
    for (size_t j = 0; j < i; ++j) {
      if (c.hardware[j].name == h.name) {
        return absl::InvalidArgumentError(
            absl::StrCat(p, ".name '", h.name, "' is defined twice"));
      }
    }
    if (!InRange(h.peak_flops, kMinRate, kMaxRate, /*inf_ok=*/false)) {
      return RangeError(p + ".peak_flops", h.peak_flops, "finite and in [1, 1e21] FLOP/s");
    }
    if (h.peak_flops_fp8 != 0 &&
        !InRange(h.peak_flops_fp8, kMinRate, kMaxRate, /*inf_ok=*/false)) {
      return RangeError(p + ".peak_flops_fp8", h.peak_flops_fp8,
                        "0 (no FP8) or finite and in [1, 1e21] FLOP/s");
    }
    if (!InRange(h.memory_bytes, 1, kMaxBytes, /*inf_ok=*/true)) {
      return RangeError(p + ".memory_bytes", h.memory_bytes, "in [1, 1e18] bytes or +inf");
    }
    if (!InRange(h.memory_bandwidth, kMinRate, kMaxRate, /*inf_ok=*/false)) {
      return RangeError(p + ".memory_bandwidth", h.memory_bandwidth,
                        "finite and in [1, 1e21] bytes/s");
    }
    if (!(h.op_overhead_s >= 0) || !std::isfinite(h.op_overhead_s)) {
      return absl::InvalidArgumentError(
          absl::StrCat(p, ".op_overhead_s must be finite and >= 0, got ", h.op_overhead_s));
    }
    if (!InRange(h.message_cpu_s, 0, 1, /*inf_ok=*/false)) {
      return RangeError(p + ".message_cpu_s", h.message_cpu_s, "finite and in [0, 1] seconds");
    }
    if (h.sm_count < 0 || h.sm_count > kMaxSmCount) {
      return absl::InvalidArgumentError(absl::StrCat(p, ".sm_count must be 0 (unknown) or in [1, ",
                                                     kMaxSmCount, "], got ", h.sm_count));
    }
  }
  if (c.nodes.empty()) {
    return absl::InvalidArgumentError("nodes: a cluster needs at least one node");
  }
  for (size_t i = 0; i < c.nodes.size(); ++i) {
    const Node& n = c.nodes[i];
    const std::string p = absl::StrCat("nodes[", i, "]");
    // Nodes are addressed by name (agents, drains, failures): names must be unique.
    if (n.name.empty()) return absl::InvalidArgumentError(absl::StrCat(p, ".name is empty"));
    for (size_t j = 0; j < i; ++j) {
      if (c.nodes[j].name == n.name) {
        return absl::InvalidArgumentError(
            absl::StrCat(p, ".name '", n.name, "' is used by nodes[", j, "] too"));
      }
    }
    if (n.num_devices <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(p, ".num_devices must be > 0, got ", n.num_devices));
    }
    if (FindHardware(c, n.hardware) == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(p, ".hardware: unknown hardware '", n.hardware, "'"));
    }
    if (n.num_devices > 1) {
      absl::Status s = ValidateLink(p + ".intra_node_link", n.intra_node_link);
      if (!s.ok()) return s;
    }
  }
  if (c.nodes.size() > 1) {
    absl::Status s = ValidateLink("inter_node_link", c.inter_node_link);
    if (!s.ok()) return s;
  }
  if (!InRange(c.memory_reserve_bytes, 0, kMaxBytes, /*inf_ok=*/false)) {
    return RangeError("memory_reserve_bytes", c.memory_reserve_bytes,
                      "finite and in [0, 1e18] bytes");
  }
  int64_t devices = 0;
  for (const Node& n : c.nodes) devices += n.num_devices;
  if (devices > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("nodes: ", devices, " devices in total overflow a device index"));
  }
  return absl::OkStatus();
}

Cluster SyntheticCluster(int devices) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  Cluster c;
  c.name = absl::StrCat("synthetic-", devices);
  c.hardware.push_back(HardwareSpec{"synthetic", 1e15, kInf, 1e12});
  Node node;
  node.name = "node0";
  node.hardware = "synthetic";
  node.num_devices = devices;
  node.intra_node_link = LinkSpec{kInf, 0};
  c.nodes.push_back(node);
  c.inter_node_link = LinkSpec{kInf, 0};
  return c;
}

}  // namespace octopipe
