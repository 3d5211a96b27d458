// Private to the evaluator library: the helpers that both of Evaluator's translation units use,
// evaluator.cc (Prepare, the DAG pass, the results) and evaluator_events.cc (RunEvents, the
// event-driven pass under link contention). Include it from nowhere else.
#ifndef OCTOPIPE_SIMULATOR_EVALUATOR_INTERNAL_H_
#define OCTOPIPE_SIMULATOR_EVALUATOR_INTERNAL_H_

#include <cstdint>
#include <functional>

#include "core/schedule.h"
#include "simulator/evaluator.h"

namespace octopipe {
namespace evaluator_internal {

// Index of (kind, stage) in Evaluator::kind_stage_; the edges of that (kind, stage) are at
// 2 * index + slot in Evaluator::edges_.
inline int32_t KindStageIndex(OpKind kind, int stage) {
  return stage * kNumOpKinds + static_cast<int>(kind);
}
inline OpKind KindOfIndex(int32_t ks) { return static_cast<OpKind>(ks % kNumOpKinds); }

// Node::succ[1] of an op whose first data successors are a vocabulary fan-out — the last
// stage's F under vocab_parallel feeds every device's S, an S feeds every device's T — with
// Node::edge[1] holding the micro-batch. Its one other successor, if any, is succ[0].
inline constexpr int32_t kFanOut = -2;

// Counts the ops of a preparation pass and polls the stop check every kStopPollOps of them.
class StopPoller {
 public:
  explicit StopPoller(const std::function<bool()>* should_stop) : should_stop_(should_stop) {}
  bool Tick() {
    if (should_stop_ == nullptr || --left_ > 0) return false;
    left_ = kStopPollOps;
    return (*should_stop_)();
  }

 private:
  const std::function<bool()>* should_stop_;
  int32_t left_ = kStopPollOps;
};

}  // namespace evaluator_internal

template <typename Fn>
inline void Evaluator::ForEachSuccessor(int32_t p, Fn&& fn) const {
  const Node& node = nodes_[p];
  if (node.succ[1] == evaluator_internal::kFanOut) {
    const bool to_t = evaluator_internal::KindOfIndex(node.ks) == OpKind::kS;
    const int32_t* pos = vocab_pos_.data() + static_cast<size_t>(node.edge[1]) * P_ * 2 + to_t;
    const int32_t base = to_t ? fanout_t_edges_ : fanout_s_edges_;
    for (int d = 0; d < P_; ++d) fn(pos[2 * d], base + d);
    if (node.succ[0] >= 0) fn(node.succ[0], node.edge[0]);
    return;
  }
  for (int k = 0; k < 2 && node.succ[k] >= 0; ++k) fn(node.succ[k], node.edge[k]);
}

}  // namespace octopipe

#endif  // OCTOPIPE_SIMULATOR_EVALUATOR_INTERNAL_H_
