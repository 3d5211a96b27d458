// The pipeline's data edges: which op of a micro-batch feeds which. One definition, used by the
// simulator (simulator/pipeline_rules.h turns an edge into a transfer or a barrier and costs it)
// and by the executor (executor/engine.cc turns the edges between ranks into the messages each
// rank expects from each peer).
//
// With back(s) the backward of stage s for micro-batch m — B when the backward is split into B
// and W, BW when it is not:
//   F(s)   -> F(s+1)      crosses stages: stage s's output (EdgeData::kActivation)
//   F(S-1) -> back(S-1)   the loss turns the last forward into the first backward
//   F(s)   -> R(s)        when stage s recomputes
//   R(s)   -> back(s)
//   back(s)-> back(s-1)   crosses stages: the gradient of stage s-1's output (kGradient)
//   B(s)   -> W(s)
// Under vocabulary parallelism (P devices, the output layer split by vocabulary) the loss edge
// F(S-1) -> back(S-1) is replaced by the split output layer:
//   F(S-1) -> S(d)        for every device d: the last hidden state (kVocabInput, a broadcast)
//   S(d)   -> T(d')       for every d, d': the shards' all-reduce barrier (kVocabAllReduce)
//   S(d)   -> back(S-1)   for every d: the all-reduce also delivers the input gradient
// An op's device is its stage's, except a vocabulary pass (S, T), whose `stage` is its device.
//
// Inline and allocation-free (the evaluator's hot loop calls it). Stateless; any thread.
#ifndef OCTOPIPE_CORE_PIPELINE_EDGES_H_
#define OCTOPIPE_CORE_PIPELINE_EDGES_H_

#include <cstdint>

#include "core/schedule.h"

namespace octopipe {

// What an edge carries.
enum class EdgeData : uint8_t {
  kNone,            // an edge within a stage (F -> R, R -> back, B -> W, the loss)
  kActivation,      // F(s) -> F(s+1)
  kGradient,        // back(s) -> back(s-1)
  kVocabInput,      // F(S-1) -> S(d)
  kVocabAllReduce,  // S(d) -> T(d'), S(d) -> back(S-1)
};

// What the edges depend on.
struct PipelineShape {
  int num_stages = 0;
  int num_devices = 0;
  bool vocab_parallel = false;
  const uint8_t* recompute = nullptr;  // per stage, 1: the stage recomputes; null: none does
  bool recomputes(int stage) const { return recompute != nullptr && recompute[stage] != 0; }
};

// Calls fn(OpKind consumer_kind, int consumer_stage, EdgeData data) for every data successor of
// an op of `kind` on `stage` (same micro-batch), cross-stage edges first. backward(s) returns
// the kind of stage s's backward for this micro-batch (kB or kBW).
template <typename BackwardKind, typename Fn>
inline void ForEachSuccessor(const PipelineShape& p, OpKind kind, int stage,
                             BackwardKind&& backward, Fn&& fn) {
  const int s = stage;
  switch (kind) {
    case OpKind::kF:
      if (s + 1 < p.num_stages) {
        fn(OpKind::kF, s + 1, EdgeData::kActivation);
      } else if (p.vocab_parallel) {
        for (int d = 0; d < p.num_devices; ++d) fn(OpKind::kS, d, EdgeData::kVocabInput);
      } else {
        fn(backward(s), s, EdgeData::kNone);
      }
      if (p.recomputes(s)) fn(OpKind::kR, s, EdgeData::kNone);
      break;
    case OpKind::kR:
      fn(backward(s), s, EdgeData::kNone);
      break;
    case OpKind::kB:
      if (s > 0) fn(backward(s - 1), s - 1, EdgeData::kGradient);
      fn(OpKind::kW, s, EdgeData::kNone);
      break;
    case OpKind::kBW:
      if (s > 0) fn(backward(s - 1), s - 1, EdgeData::kGradient);
      break;
    case OpKind::kS:
      for (int d = 0; d < p.num_devices; ++d) fn(OpKind::kT, d, EdgeData::kVocabAllReduce);
      fn(backward(p.num_stages - 1), p.num_stages - 1, EdgeData::kVocabAllReduce);
      break;
    case OpKind::kW:  // no successors
    case OpKind::kT:
      break;
  }
}

// Calls fn(OpKind producer_kind, int producer_stage) for every data predecessor of an op of
// `kind` on `stage` (same micro-batch) — the edges above, seen from their consumer — in the
// order: cross-stage or loss edge first, then R.
template <typename BackwardKind, typename Fn>
inline void ForEachPredecessor(const PipelineShape& p, OpKind kind, int stage,
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
      if (s + 1 < p.num_stages) {
        fn(backward(s + 1), s + 1);
      } else if (p.vocab_parallel) {
        for (int d = 0; d < p.num_devices; ++d) fn(OpKind::kS, d);
      } else {
        fn(OpKind::kF, s);
      }
      if (p.recomputes(s)) fn(OpKind::kR, s);
      break;
    case OpKind::kW:
      fn(OpKind::kB, s);
      break;
    case OpKind::kS:
      fn(OpKind::kF, p.num_stages - 1);
      break;
    case OpKind::kT:
      for (int d = 0; d < p.num_devices; ++d) fn(OpKind::kS, d);
      break;
  }
}

}  // namespace octopipe

#endif  // OCTOPIPE_CORE_PIPELINE_EDGES_H_
