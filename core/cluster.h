// Cluster: nodes of devices with hardware specs and the links between them.
//
// Devices are numbered globally in node order (node 0's devices first). Link(a, b) is the
// node's intra-node link when a and b share a node, else the cluster's inter-node link.
// Plain value type; safe to share const.
#ifndef OCTOPIPE_CORE_CLUSTER_H_
#define OCTOPIPE_CORE_CLUSTER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace octopipe {

struct HardwareSpec {
  std::string name;
  double peak_flops = 0;        // dense BF16 FLOP/s
  double memory_bytes = 0;      // HBM capacity (may be +inf for synthetic clusters)
  double memory_bandwidth = 0;  // HBM bytes/s
  double op_overhead_s = 0;     // fixed executor cost per scheduled op (measured clusters)
  // CPU seconds per cross-device message at each end, charged to the op that sends or
  // receives it (measured clusters; see proto/cluster.proto).
  double message_cpu_s = 0;
  // Dense FP8 FLOP/s (Hopper and later); 0: no FP8 tensor cores (a model training in fp8
  // cannot be planned on it).
  double peak_flops_fp8 = 0;
  // Streaming multiprocessors; 0: unknown (overlapped communication then takes nothing from
  // the compute it overlaps; TrainingOptions::ep_comm_sms).
  int sm_count = 0;
};

struct LinkSpec {
  double bandwidth = 0;  // bytes/s per direction (may be +inf)
  double latency_s = 0;
  // Bus bandwidth of a gradient all-reduce over this link, bytes/s: 2 (n - 1) / n x the bytes
  // of an n-member all-reduce / its time beyond latency, the figure nccl-tests reports as
  // busbw. 0: the link's bandwidth (a ring all-reduce at link speed). Measured clusters set it
  // where the collective runs slower than the link (the CPU executor copies and sums on host).
  double allreduce_bandwidth = 0;
  // Latency of each of an all-reduce's 2 (n - 1) ring steps; 0: the link's latency_s.
  double allreduce_latency_s = 0;
  // The same two for an all-reduce that runs while its ranks compute (the DP sync overlapped
  // with the backward); 0: allreduce_bandwidth / allreduce_latency_s. `octopipe profile` sets
  // them, clamped to no faster than idle (on a CPU host compute and collective share cores).
  double allreduce_overlapped_bandwidth = 0;
  double allreduce_overlapped_latency_s = 0;
};

struct Node {
  std::string name;
  std::string hardware;  // name of an entry in Cluster::hardware
  int num_devices = 0;
  LinkSpec intra_node_link;
};

struct Cluster {
  std::string name;
  std::vector<HardwareSpec> hardware;
  std::vector<Node> nodes;
  LinkSpec inter_node_link;
  double memory_reserve_bytes = 0;
  // The devices are one executor's ranks (proto/cluster.proto Cluster.executor_ranks), as
  // `octopipe profile` measured them; informational (planned like any cluster).
  bool executor_ranks = false;

  int num_devices() const;
  int node_of_device(int device) const;
  // Hardware of a device; the cluster must be valid and device in range.
  const HardwareSpec& device_hardware(int device) const;
  const LinkSpec& link(int from_device, int to_device) const;
  // Usable memory of a device: capacity minus the reserve.
  double usable_memory(int device) const;
};

// Errors name the field path and value, e.g. "nodes[1].hardware: unknown hardware 'B200'".
absl::Status Validate(const Cluster& cluster);

// `devices` identical devices with unlimited memory and zero-latency unlimited links.
Cluster SyntheticCluster(int devices);

}  // namespace octopipe

#endif  // OCTOPIPE_CORE_CLUSTER_H_
