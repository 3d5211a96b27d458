// Evaluator's event-driven pass under link contention (RunEvents and its helpers, declared in
// simulator/evaluator.h); the rest of the class is in evaluator.cc.
#include <algorithm>
#include <cstdint>
#include <functional>

#include "absl/base/attributes.h"
#include "absl/status/status.h"
#include "simulator/evaluator.h"
#include "simulator/evaluator_internal.h"

namespace octopipe {

using evaluator_internal::StopPoller;

// Sizes the per-run arrays for a contention pass, clears its event heap and frees every link.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void Evaluator::ResetEventRun(bool track_pred) {
  transfer_log_.clear();
  const int32_t n = static_cast<int32_t>(ops_.size());
  const int P = P_;
  dirty_ = true;
  start_.resize(n);
  end_.resize(n);
  compute_end_.resize(n);
  if (track_pred) {
    pred_.assign(n, -1);
    pred_transfer_.assign(n, 0);
  }
  device_free_ = device_start_;
  comm_free_ = device_start_;
  tail_window_.assign(P, TailWindow{});
  first_start_.assign(P, 0.0);
  live_.assign(P, 0.0);
  max_live_.assign(P, 0.0);
  heap_.clear();
  link_free_.assign(static_cast<size_t>(P) * P, 0.0);
}

// Sets every node's inputs for the contention pass (its data predecessors, plus the previous
// op on its device) and queues the start of each op that has none.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void Evaluator::SeedEvents(EventRun* run) {
  for (int d = 0; d < P_; ++d) {
    for (int32_t f = device_offset_[d]; f < device_offset_[d + 1]; ++f) {
      Node& node = nodes_[f];
      node.ready = f == device_offset_[d] ? device_start_[d] : 0;
      node.pending = kind_stage_[node.ks].predecessors + (f > device_offset_[d] ? 1 : 0);
      if (node.pending == 0) PushEvent(Event{node.ready, run->seq++, -1, f, 0});
    }
  }
}

// (time, seq) is unique, so the pop order does not depend on the heap's implementation.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void Evaluator::PushEvent(const Event& e) {
  heap_.push_back(e);
  std::push_heap(heap_.begin(), heap_.end(), std::greater<Event>());
}

// One input of the op at c arrives at t from p (over a transfer or not): raises c's earliest
// start (recording p as the predecessor that set it) and queues c's start once it was the last.
// Left to the compiler's inlining, as the lambda it replaces was: forcing it into its three
// call sites costs evaluator_bench's contention pass 0.7% more instructions.
inline void Evaluator::ResolveInput(int32_t c, double t, int32_t p,
                                                                 bool transfer, EventRun* run) {
  Node& node = nodes_[c];
  if (t > node.ready || (run->track_pred && pred_[c] < 0)) {
    node.ready = std::max(node.ready, t);
    if (run->track_pred) {
      pred_[c] = p;
      pred_transfer_[c] = transfer;
    }
  }
  if (--node.pending == 0) PushEvent(Event{node.ready, run->seq++, -1, c, 0});
}

// A transfer became ready: serves it on its directed link in FIFO order, logs it if asked and
// delivers it to its consumer.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void Evaluator::ServeTransfer(const Event& e, EventRun* run) {
  const Edge& edge = edges_[e.edge];
  const int a = device_[e.producer];
  const int b = device_[e.op];
  const size_t link = static_cast<size_t>(a) * P_ + b;
  const double start = std::max(e.time, link_free_[link]);
  const double end = start + edge.delay;  // = pb.transfer_s(a, b, bytes)
  link_free_[link] = end;
  if (run->log_transfers) {
    TransferRecord t;
    t.from_device = a;
    t.to_device = b;
    t.consumer = ops_[e.op];
    t.bytes = edge.bytes;
    t.start_s = start;
    t.end_s = end;
    transfer_log_.push_back(t);
  }
  ResolveInput(e.op, end, e.producer, true, run);
}

// The op of `e` starts at e.time: times it (compute, then its tail on the communication
// stream, as in RunDag), frees its device for the next op and sends its outputs, queueing a
// transfer for each cross-device edge.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void Evaluator::StartEventOp(const Event& e, EventRun* run) {
  const int32_t p = e.op;
  start_[p] = e.time;
  const KindStage& k = kind_stage_[nodes_[p].ks];
  const int dp = device_[p];
  // Beside the previous op's tail, then the op's own tail and the device's next op, as in
  // RunDag.
  const double compute_end = e.time + ComputeBesideTail(k.duration, e.time, tail_window_[dp]);
  tail_window_[dp] = TailWindow{};
  compute_end_[p] = compute_end;
  end_[p] = compute_end;
  double next_free = compute_end;
  const bool has_next = p + 1 < device_offset_[dp + 1];
  if (k.tail > 0) {
    end_[p] = std::max(compute_end, comm_free_[dp]) + k.tail;
    comm_free_[dp] = end_[p];
    if (has_next) {
      if (TailOverlapsNext(static_cast<OpKind>(k.kind),
                           static_cast<OpKind>(kind_stage_[nodes_[p + 1].ks].kind))) {
        tail_window_[dp] = TailWindow{end_[p] - k.tail, end_[p], tail_share_[nodes_[p].ks]};
      } else {
        next_free = end_[p];
      }
    }
  }
  if (has_next) ResolveInput(p + 1, next_free, p, false, run);
  ForEachSuccessor(p, [&](int32_t c, int32_t ei) {
    const Edge& edge = edges_[ei];
    if (edge.transfer) {
      PushEvent(Event{end_[p], run->seq++, p, c, ei});
    } else {
      ResolveInput(c, end_[p] + edge.delay, p, false, run);
    }
  });
}

// After a complete contention pass: each device's first start and compute end, stage 0's last
// backward end, and the activation peaks (from the schedule order).
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void Evaluator::FinishEventRun() {
  for (int d = 0; d < P_; ++d) {
    const int32_t lo = device_offset_[d], hi = device_offset_[d + 1];
    if (lo == hi) continue;
    first_start_[d] = start_[lo];
    device_free_[d] = compute_end_[hi - 1];
  }
  b0_end_ = last_b0_pos_ >= 0 ? end_[last_b0_pos_] : 0;
  ComputeMemory();
}

// Event-driven pass for link contention: op starts and transfers in time order, each directed
// link serving one transfer at a time. An empty heap with ops left means a cycle.
absl::Status Evaluator::RunEvents(const PipelineProblem& pb, bool track_pred, bool log_transfers,
                                  const std::function<bool()>* should_stop) {
  ResetEventRun(track_pred);
  EventRun run{0, track_pred, log_transfers};
  SeedEvents(&run);
  StopPoller poll(should_stop);
  int32_t processed = 0;
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<Event>());
    const Event e = heap_.back();
    heap_.pop_back();
    if (e.producer >= 0) {  // a transfer became ready: serve it on its link in FIFO order
      ServeTransfer(e, &run);
      continue;
    }
    if (poll.Tick()) {
      run_ops_ = processed;
      return StoppedError();
    }
    ++processed;
    StartEventOp(e, &run);
  }
  if (processed != static_cast<int32_t>(ops_.size())) {
    return absl::FailedPreconditionError("cycle");
  }
  FinishEventRun();
  return absl::OkStatus();
}

void Evaluator::ComputeMemory() {
  for (int d = 0; d < P_; ++d) {
    double live = 0, max_live = 0;
    for (int32_t f = device_offset_[d]; f < device_offset_[d + 1]; ++f) {
      live += kind_stage_[nodes_[f].ks].delta;
      max_live = std::max(max_live, live);
    }
    live_[d] = live;
    max_live_[d] = max_live;
  }
}

}  // namespace octopipe
