// Pipeline rules: the one place that says how long an op runs, which ops of a micro-batch feed
// which, and how an op changes the live activation memory of its device. The evaluator, the
// list scheduler and the planner's calibration all call these, so a rule changes in one place.
//
// The data dependencies of micro-batch m (DESIGN.md "Simulator semantics"), with back(s) the
// backward of stage s for m — B when the backward is split into B and W, BW when it is not:
//   F(s)   -> F(s+1)      crosses stages: carries output_bytes[s]
//   F(S-1) -> back(S-1)   the loss turns the last forward into the first backward
//   F(s)   -> R(s)        when stage s recomputes
//   R(s)   -> back(s)
//   back(s)-> back(s-1)   crosses stages: carries the gradient, output_bytes[s-1]
//   B(s)   -> W(s)
// Memory: F keeps its activations (only its input under recompute), R re-materialises the
// rest, B frees what W does not need, W and BW free the remainder; so the deltas of one
// (stage, micro-batch) sum to zero.
//
// Everything here is inline and allocation-free: it sits in the evaluator's hot loop.
// Stateless; safe from any thread.
#ifndef OCTOPIPE_SIMULATOR_PIPELINE_RULES_H_
#define OCTOPIPE_SIMULATOR_PIPELINE_RULES_H_

#include "core/schedule.h"
#include "simulator/problem.h"

namespace octopipe {

// True for the ops that carry a stage's input gradient (B, or the unsplit BW).
inline constexpr bool IsBackward(OpKind kind) {
  return kind == OpKind::kB || kind == OpKind::kBW;
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
  }
  return 0;
}

// Bytes of activations the op adds to (> 0) or frees from (< 0) its device when it runs.
inline double ActivationDelta(const PipelineProblem& pb, OpKind kind, int stage) {
  const double act = pb.activation_bytes[stage];
  switch (kind) {
    case OpKind::kF: return pb.recompute[stage] ? pb.input_bytes[stage] : act;
    case OpKind::kR: return act - pb.input_bytes[stage];
    case OpKind::kB: return -(act - pb.activation_bytes_w[stage]);
    case OpKind::kW: return -pb.activation_bytes_w[stage];
    case OpKind::kBW: return -act;
  }
  return 0;
}

// Number of data predecessors of the op (the edges above that end at it).
inline int DataPredecessorCount(const PipelineProblem& pb, OpKind kind, int stage) {
  switch (kind) {
    case OpKind::kF: return stage > 0 ? 1 : 0;
    case OpKind::kB:
    case OpKind::kBW: return 1 + (pb.recompute[stage] ? 1 : 0);
    case OpKind::kR:  // R <- F
    case OpKind::kW:  // W <- B
      return 1;
  }
  return 0;
}

// Calls fn(OpKind consumer_kind, int consumer_stage, double bytes) for every data successor of
// an op of `kind` on `stage` (same micro-batch). `bytes` is what crosses to the consumer's stage
// — a transfer when that stage sits on another device — or -1 for an edge within the stage.
// backward(s) returns the kind of stage s's backward for this micro-batch (kB or kBW).
template <typename BackwardKind, typename Fn>
inline void ForEachDataSuccessor(const PipelineProblem& pb, OpKind kind, int stage,
                                 BackwardKind&& backward, Fn&& fn) {
  const int s = stage;
  switch (kind) {
    case OpKind::kF:
      if (s + 1 < pb.num_stages) {
        fn(OpKind::kF, s + 1, pb.output_bytes[s]);
      } else {
        fn(backward(s), s, -1.0);
      }
      if (pb.recompute[s]) fn(OpKind::kR, s, -1.0);
      break;
    case OpKind::kR:
      fn(backward(s), s, -1.0);
      break;
    case OpKind::kB:
      if (s > 0) fn(backward(s - 1), s - 1, pb.output_bytes[s - 1]);
      fn(OpKind::kW, s, -1.0);
      break;
    case OpKind::kBW:
      if (s > 0) fn(backward(s - 1), s - 1, pb.output_bytes[s - 1]);
      break;
    case OpKind::kW:  // no successors
      break;
  }
}

// Calls fn(OpKind producer_kind, int producer_stage) for every data predecessor of an op of
// `kind` on `stage` (same micro-batch), in the order: cross-stage or loss edge first, then R.
template <typename BackwardKind, typename Fn>
inline void ForEachDataPredecessor(const PipelineProblem& pb, OpKind kind, int stage,
                                   BackwardKind&& backward, Fn&& fn) {
  const int s = stage;
  switch (kind) {
    case OpKind::kF:
      if (s > 0) fn(OpKind::kF, s - 1);
      break;
    case OpKind::kR:
      fn(OpKind::kF, s);
      break;
    case OpKind::kB:
    case OpKind::kBW:
      if (s + 1 < pb.num_stages) {
        fn(backward(s + 1), s + 1);
      } else {
        fn(OpKind::kF, s);
      }
      if (pb.recompute[s]) fn(OpKind::kR, s);
      break;
    case OpKind::kW:
      fn(OpKind::kB, s);
      break;
  }
}

}  // namespace octopipe

#endif  // OCTOPIPE_SIMULATOR_PIPELINE_RULES_H_
