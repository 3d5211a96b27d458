// Pipeline rules: the one place that says how long an op runs, which ops of a micro-batch feed
// which, and how an op changes the live activation memory of its device. The evaluator, the
// list scheduler and the planner's calibration all call these, so a rule changes in one place.
//
// The data dependencies of a micro-batch are core/pipeline_edges.h's (shared with the
// executor); here each edge becomes a transfer (the bytes crossing between stages, when their
// devices differ) or, for the vocabulary all-reduce, a barrier of vocab_allreduce_s.
// An op's device is its stage's, except a vocabulary pass, whose stage is its device.
// Memory: F keeps its activations (only its input under recompute), R re-materialises the
// rest, B frees what W does not need, W and BW free the remainder; so the deltas of one
// (stage, micro-batch) sum to zero.
//
// S allocates its shard's activations and T frees them.
//
// When vocab_parallel also splits the input embedding (PipelineProblem::embed_split) no edge and
// no op changes: the embedding's work off stage 0's device sits before and after each device's
// own ops (DeviceEarliestStart, DeviceEnd, DevicePeriod; simulator/vocab_parallel.h says why).
//
// Everything here is inline and allocation-free: it sits in the evaluator's hot loop.
// Stateless; safe from any thread.
#ifndef OCTOPIPE_SIMULATOR_PIPELINE_RULES_H_
#define OCTOPIPE_SIMULATOR_PIPELINE_RULES_H_

#include "core/pipeline_edges.h"
#include "core/schedule.h"
#include "simulator/problem.h"

namespace octopipe {

// The `bytes` an edge reports for an all-reduce barrier (the edge waits vocab_allreduce_s
// whatever the devices); -1 is an edge within a stage, >= 0 a transfer between devices.
inline constexpr double kAllReduceEdge = -2.0;

// The device that runs an op of `kind` on `stage`.
inline int OpDevice(const PipelineProblem& pb, OpKind kind, int stage) {
  return IsVocabPass(kind) ? stage : pb.stage_device[stage];
}

// True when an edge carrying `bytes` from device `from` to device `to` is a link transfer.
inline bool IsTransferEdge(double bytes, int from, int to) { return bytes >= 0 && from != to; }

// Seconds between the end of an edge's producer and its consumer's earliest start: the
// transfer time of a transfer, the all-reduce time of a barrier, else 0. (Under link
// contention the evaluator serves transfers on their links instead; the rest is this.)
inline double EdgeDelay(const PipelineProblem& pb, double bytes, int from, int to) {
  if (bytes == kAllReduceEdge) return pb.vocab_allreduce_s;
  return IsTransferEdge(bytes, from, to) ? pb.transfer_s(from, to, bytes) : 0.0;
}

// True for the ops that carry a stage's input gradient (B, or the unsplit BW).
inline constexpr bool IsBackward(OpKind kind) {
  return kind == OpKind::kB || kind == OpKind::kBW;
}

// Seconds of communication-stream work after an op's compute (PipelineProblem::forward_tail_s):
// F's and the backward's (B or BW) expert-parallel all-to-alls when they are overlapped.
inline double OpTail(const PipelineProblem& pb, OpKind kind, int stage) {
  if (kind == OpKind::kF) return pb.forward_tail_s.empty() ? 0.0 : pb.forward_tail_s[stage];
  if (kind == OpKind::kB || kind == OpKind::kBW) {
    return pb.backward_tail_s.empty() ? 0.0 : pb.backward_tail_s[stage];
  }
  return 0.0;
}

// Whether an op of kind `next` runs beside the tail of the op of kind `kind` before it on the
// same device. The runtimes that overlap expert all-to-alls pair a forward with a backward
// (DualPipe; Megatron-Core's combined 1F1B, which pairs them only in the steady phase): a
// forward's all-to-all hides behind a backward's compute and the other way round. An op of the
// same kind (F after F in a warm-up, B after B in a cool-down) has no partner, so it starts when
// the tail ends.
inline constexpr bool TailOverlapsNext(OpKind kind, OpKind next) { return kind != next; }

// The share of the SMs a tail of `stage` holds while it runs (PipelineProblem::
// tail_compute_share; 0 when none).
inline double TailComputeShare(const PipelineProblem& pb, int stage) {
  return pb.tail_compute_share.empty() ? 0.0 : pb.tail_compute_share[stage];
}

// A communication kernel holding `share` of the device's SMs over [from, to), beside the op
// after the one whose tail it is (TailOverlapsNext); to <= from: none.
struct TailWindow {
  double from = 0, to = 0, share = 0;
};

// Seconds `compute` seconds of work take when they start at `start` beside `w`: full speed
// outside the window, 1 - share of it inside.
inline double ComputeBesideTail(double compute, double start, const TailWindow& w) {
  if (w.share <= 0 || w.to <= start || w.to <= w.from) return compute;
  const double before = w.from > start ? w.from - start : 0.0;
  if (compute <= before) return compute;
  const double window = w.to - (w.from > start ? w.from : start);
  const double slowed = w.share >= 1 ? window : (compute - before) / (1 - w.share);
  return compute + w.share * (slowed < window ? slowed : window);
}

// Seconds one micro-batch of `kind` takes on stage `stage`. Every op pays the executor's fixed
// per-op cost once, which the per-kind times already include: so the unsplit BW, one op, is
// B + W minus that cost (not B + W, which would pay it twice).
inline double OpDuration(const PipelineProblem& pb, OpKind kind, int stage) {
  switch (kind) {
    case OpKind::kF: return pb.forward_s[stage];
    case OpKind::kB: return pb.backward_input_s[stage];
    case OpKind::kW: return pb.weight_grad_s[stage];
    case OpKind::kBW:
      return pb.backward_input_s[stage] + pb.weight_grad_s[stage] - pb.overhead_s(stage);
    case OpKind::kR: return pb.recompute_s[stage];
    case OpKind::kS: return pb.vocab_s_s[stage];
    case OpKind::kT: return pb.vocab_t_s[stage];
  }
  return 0;
}

// Bytes of activations the op adds to (> 0) or frees from (< 0) its device when it runs.
// (A vocabulary pass's `stage` is a device, so the per-stage arrays are read only for the
// other kinds.)
inline double ActivationDelta(const PipelineProblem& pb, OpKind kind, int stage) {
  switch (kind) {
    case OpKind::kF: return pb.recompute[stage] ? pb.input_bytes[stage] : pb.activation_bytes[stage];
    case OpKind::kR: return pb.activation_bytes[stage] - pb.input_bytes[stage];
    case OpKind::kB: return -(pb.activation_bytes[stage] - pb.activation_bytes_w[stage]);
    case OpKind::kW: return -pb.activation_bytes_w[stage];
    case OpKind::kBW: return -pb.activation_bytes[stage];
    case OpKind::kS: return pb.vocab_activation_bytes[stage];
    case OpKind::kT: return -pb.vocab_activation_bytes[stage];
  }
  return 0;
}

// The earliest start of any op on `device`. 0 unless the embedding is split; then stage 0's
// device r0 waits embed_ready_s for the first reduced embedding (so does its first op, always an
// F of stage 0: every other op depends on one), and every other device first looks up its rows
// for every micro-batch (embed_prologue_s).
inline double DeviceEarliestStart(const PipelineProblem& pb, int device) {
  if (!pb.embed_split) return 0;
  return device == pb.stage_device[0] ? pb.embed_ready_s : pb.embed_prologue_s[device];
}

// Where the device's part of an iteration ends, given its last op's end and the end of stage
// 0's last backward (B or BW; its gradient is the last the embedding shards need). Without the
// split: its last op's end. With it: r0's last op's end (r0 scatter-adds its shard in stage 0's
// W or BW); every other device scatter-adds all M gradients (embed_epilogue_s) once it is done
// with its ops and the last gradient has arrived (embed_broadcast_s after that backward).
inline double DeviceEnd(const PipelineProblem& pb, int device, double last_op_end,
                        double stage0_backward_end) {
  if (!pb.embed_split || device == pb.stage_device[0]) return last_op_end;
  const double arrived = stage0_backward_end + pb.embed_broadcast_s;
  return (last_op_end > arrived ? last_op_end : arrived) + pb.embed_epilogue_s[device];
}

// The device's period when iterations overlap (the steady state: each device steps its own
// optimizer and starts its next iteration when it can), from its first op's start and last
// op's end and the end of stage 0's last backward. Without the split: last - first. With it, a
// device d other than r0 runs its next ops without waiting for the embedding: its lookups and
// scatter-adds only add their time; but r0's next first F waits for every shard's update and
// next lookup: the last gradient's broadcast, the slowest device's scatter-adds, then
// embed_ready_s (lookup and reduce) — unless r0's own ops end later.
inline double DevicePeriod(const PipelineProblem& pb, int device, double first_op_start,
                           double last_op_end, double stage0_backward_end) {
  if (!pb.embed_split) return last_op_end - first_op_start;
  if (device != pb.stage_device[0]) {
    return last_op_end - first_op_start + pb.embed_prologue_s[device] +
           pb.embed_epilogue_s[device];
  }
  double scatter = 0;
  for (double e : pb.embed_epilogue_s) scatter = e > scatter ? e : scatter;
  const double next =
      stage0_backward_end + pb.embed_broadcast_s + scatter + pb.embed_ready_s;
  return (last_op_end > next ? last_op_end : next) - first_op_start;
}

// Number of data predecessors of the op (the edges above that end at it).
inline int DataPredecessorCount(const PipelineProblem& pb, OpKind kind, int stage) {
  const bool vocab_loss = pb.vocab_parallel && stage == pb.num_stages - 1;
  switch (kind) {
    case OpKind::kF: return stage > 0 ? 1 : 0;
    case OpKind::kB:
    case OpKind::kBW: return (vocab_loss ? pb.num_devices : 1) + (pb.recompute[stage] ? 1 : 0);
    case OpKind::kR:  // R <- F
    case OpKind::kW:  // W <- B
    case OpKind::kS:  // S <- F(S-1)
      return 1;
    case OpKind::kT: return pb.num_devices;  // T <- every S
  }
  return 0;
}

// The pipeline's edges (core/pipeline_edges.h) over this problem.
inline PipelineShape ShapeOf(const PipelineProblem& pb) {
  return PipelineShape{pb.num_stages, pb.num_devices, pb.vocab_parallel, pb.recompute.data()};
}

// Calls fn(OpKind consumer_kind, int consumer_stage, double bytes) for every data successor of
// an op of `kind` on `stage` (same micro-batch; ForEachSuccessor's edges). `bytes` is what
// crosses to the consumer's stage — a transfer when that stage sits on another device — or -1
// for an edge within the stage, or kAllReduceEdge for the vocabulary all-reduce barrier
// (EdgeDelay turns any of them into time). backward(s) returns the kind of stage s's backward
// for this micro-batch (kB or kBW).
template <typename BackwardKind, typename Fn>
inline void ForEachDataSuccessor(const PipelineProblem& pb, OpKind kind, int stage,
                                 BackwardKind&& backward, Fn&& fn) {
  ForEachSuccessor(ShapeOf(pb), kind, stage, backward,
                   [&](OpKind consumer, int consumer_stage, EdgeData data) {
                     switch (data) {
                       case EdgeData::kActivation:
                         fn(consumer, consumer_stage, pb.output_bytes[stage]);
                         break;
                       case EdgeData::kGradient:
                         fn(consumer, consumer_stage, pb.output_bytes[stage - 1]);
                         break;
                       case EdgeData::kVocabInput:
                         fn(consumer, consumer_stage, pb.vocab_input_bytes);
                         break;
                       case EdgeData::kVocabAllReduce:
                         fn(consumer, consumer_stage, kAllReduceEdge);
                         break;
                       case EdgeData::kNone: fn(consumer, consumer_stage, -1.0); break;
                     }
                   });
}

// Calls fn(OpKind producer_kind, int producer_stage) for every data predecessor of an op of
// `kind` on `stage` (same micro-batch; ForEachPredecessor's edges), in the order: cross-stage or
// loss edge first, then R.
template <typename BackwardKind, typename Fn>
inline void ForEachDataPredecessor(const PipelineProblem& pb, OpKind kind, int stage,
                                   BackwardKind&& backward, Fn&& fn) {
  ForEachPredecessor(ShapeOf(pb), kind, stage, backward, fn);
}

}  // namespace octopipe

#endif  // OCTOPIPE_SIMULATOR_PIPELINE_RULES_H_
