// PipelineProblem: the flat, per-stage and per-device numbers the simulator evaluates a
// schedule against. Built once per (model, cluster, partition, placement) and then shared by
// every schedule evaluation, so the hot loop sees only flat arrays indexed by stage or device.
//
// Stage s runs on device stage_device[s]. Times are seconds for one micro-batch; bytes are per
// micro-batch. A transfer from device a to b takes link_latency_s[a*P+b] +
// bytes * link_inv_bandwidth[a*P+b]. Plain value type; safe to share const across threads.
#ifndef OCTOPIPE_SIMULATOR_PROBLEM_H_
#define OCTOPIPE_SIMULATOR_PROBLEM_H_

#include <cstddef>
#include <cstdint>
#include <vector>


namespace octopipe {

struct PipelineProblem {
  int num_devices = 0;
  int num_stages = 0;
  int num_microbatches = 0;

  // Per stage.
  std::vector<int32_t> stage_device;
  std::vector<double> forward_s;
  std::vector<double> backward_input_s;
  std::vector<double> weight_grad_s;
  std::vector<double> recompute_s;
  std::vector<double> activation_bytes;    // held from F until the backward is complete
  std::vector<double> activation_bytes_w;  // part of it still needed by W after B
  std::vector<double> input_bytes;         // stage input: all that F keeps under recompute
  std::vector<double> output_bytes;        // sent to the next stage; its gradient comes back
  std::vector<uint8_t> recompute;          // 1: F keeps only the input, R re-materialises
  // The executor's fixed cost per op (HardwareSpec::op_overhead_s) already included in each of
  // forward_s, backward_input_s, weight_grad_s and recompute_s. An unsplit BW op is one op, so
  // it pays it once: B + W - op_overhead_s (OpDuration). Empty: 0 for every stage.
  std::vector<double> op_overhead_s;
  // Expert-parallel all-to-alls overlapped with other micro-batches' compute
  // (TrainingOptions::ep_comm_overlap): per stage, the seconds F (and B, BW) spend on them,
  // not included in forward_s / backward_input_s. They run on the device's communication
  // stream after the op's compute, one at a time, and the op's outputs are ready when its
  // communication ends (OpTail). The device's next op starts when the compute ends if it is of
  // another kind (a forward beside a backward's all-to-all or the other way round:
  // TailOverlapsNext), else when the tail ends. While a tail runs, the op beside it computes at
  // 1 - tail_compute_share[stage] of its rate (ComputeBesideTail: the SMs the all-to-all
  // kernels hold, TrainingOptions::ep_comm_sms / HardwareSpec::sm_count). Empty: none (the
  // default).
  std::vector<double> forward_tail_s;
  std::vector<double> backward_tail_s;
  std::vector<double> tail_compute_share;

  // Per device.
  std::vector<double> static_bytes;     // weights + gradients + optimizer state of its stages
  std::vector<double> memory_capacity;  // usable bytes (capacity minus reserve)

  // Devices x devices, row = sender.
  std::vector<double> link_latency_s;
  std::vector<double> link_inv_bandwidth;  // seconds per byte (0 for unlimited links)
  // Transfers on one directed link are served one at a time, in order of readiness.
  bool link_contention = false;

  double tokens_per_microbatch = 0;

  double overhead_s(int stage) const {
    return op_overhead_s.empty() ? 0.0 : op_overhead_s[stage];
  }

  // Vocabulary parallelism (simulator/vocab_parallel.h; off unless `vocab_parallel`): the
  // output layer is split over the devices by vocabulary and costs nothing in the last stage.
  // Device d runs its shard's S pass and T pass for every micro-batch. Per micro-batch:
  //   F(S-1) -> S(d)     the last hidden state, vocab_input_bytes, sent to every device
  //   S(d) -> T(d'), back(S-1)   through one all-reduce of the softmax max and sum and the
  //                      input gradient: every S(d) must end, then vocab_allreduce_s passes
  // Per device (empty when off):
  bool vocab_parallel = false;
  std::vector<double> vocab_s_s;               // S pass seconds
  std::vector<double> vocab_t_s;               // T pass seconds
  std::vector<double> vocab_activation_bytes;  // held from S until T
  double vocab_input_bytes = 0;
  double vocab_allreduce_s = 0;

  // The input embedding split by the same vocabulary columns (simulator/vocab_parallel.h; only
  // with vocab_parallel, when layer 0 is an embedding over the head's vocabulary). Stage 0's
  // ops hold the shard of its own device r0 = stage_device[0] (in its F, R and W); every other
  // device d looks up its rows for every micro-batch before its first op (embed_prologue_s[d])
  // and scatter-adds every micro-batch's gradient after its last op, once the last one has
  // arrived (embed_epilogue_s[d]); both are 0 for r0. Stage 0's first F waits embed_ready_s
  // (one lookup and the reduce of the partial embeddings); the gradient of B/BW(0, m) reaches
  // every device embed_broadcast_s after it ends. Rules: DeviceEarliestStart, DeviceEnd and
  // DevicePeriod (pipeline_rules.h).
  bool embed_split = false;
  std::vector<double> embed_prologue_s;  // per device (empty when off)
  std::vector<double> embed_epilogue_s;  // per device (empty when off)
  double embed_ready_s = 0;
  double embed_broadcast_s = 0;

  // Op ids of vocabulary passes use the device as their stage, so id spaces span this many.
  int num_stage_ids() const {
    return vocab_parallel && num_devices > num_stages ? num_devices : num_stages;
  }

  double transfer_s(int from, int to, double bytes) const {
    const size_t i = static_cast<size_t>(from) * num_devices + to;
    return link_latency_s[i] + bytes * link_inv_bandwidth[i];
  }
};

// Every stage costs f, b, w (R = f) seconds, no memory, no transfer time, unlimited memory:
// the setting of the closed-form bubble results and of the cost-independent generators.
PipelineProblem UniformProblem(const std::vector<int>& stage_device, int num_devices,
                               int num_microbatches, double f, double b, double w);

}  // namespace octopipe

#endif  // OCTOPIPE_SIMULATOR_PROBLEM_H_
