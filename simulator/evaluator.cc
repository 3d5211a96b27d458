#include "simulator/evaluator.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>

#include "absl/base/attributes.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "simulator/evaluator_internal.h"
#include "simulator/pipeline_rules.h"
#include "simulator/vocab_parallel.h"

namespace octopipe {
namespace {

using evaluator_internal::kFanOut;
using evaluator_internal::KindOfIndex;
using evaluator_internal::KindStageIndex;
using evaluator_internal::StopPoller;

constexpr int kF = static_cast<int>(OpKind::kF);
constexpr int kB = static_cast<int>(OpKind::kB);
constexpr int kW = static_cast<int>(OpKind::kW);
constexpr int kBW = static_cast<int>(OpKind::kBW);
constexpr int kR = static_cast<int>(OpKind::kR);

// Op ids: the five kinds of one (stage, micro-batch) are adjacent, then micro-batches, then
// stages, so the lookups of one op's neighbours share cache lines.
inline int32_t IdOf(int kind, int stage, int mb, int M) {
  return (stage * M + mb) * kNumOpKinds + kind;
}

// Relative slack when comparing memory to capacity, so float summation order cannot flip a fit.
constexpr double kMemorySlack = 1e-9;

std::string OpAt(const Op& op, int device) {
  return absl::StrCat(OpToString(op), " (device ", device, ")");
}

// A vocabulary pass needs vocabulary parallelism and runs on its own shard's device.
absl::Status CheckVocabPass(const PipelineProblem& pb, const Op& op, int device) {
  if (!pb.vocab_parallel) {
    return absl::InvalidArgumentError(absl::StrCat(
        "op ", OpAt(op, device), ": vocabulary passes need vocab_parallel, which is off"));
  }
  if (op.stage != device) {
    return absl::InvalidArgumentError(absl::StrCat("op ", OpAt(op, device), ": vocabulary shard ",
                                                   op.stage, " runs on device ", op.stage));
  }
  if (op.microbatch < 0 || op.microbatch >= pb.num_microbatches) {
    return absl::InvalidArgumentError(absl::StrCat(
        "op ", OpAt(op, device), ": micro-batch must be in [0, ", pb.num_microbatches - 1, "]"));
  }
  return absl::OkStatus();
}

absl::Status StoppedWhilePreparing() {
  return absl::DeadlineExceededError(
      "evaluation stopped by its stop check while preparing the schedule");
}

}  // namespace

absl::Status Evaluator::Prepare(const PipelineProblem& pb, const Schedule& schedule,
                                const std::function<bool()>* should_stop) {
  const int P = pb.num_devices;
  if (schedule.num_devices() != P) {
    return absl::InvalidArgumentError(absl::StrCat("schedule has orders for ",
                                                   schedule.num_devices(),
                                                   " devices but the problem has ", P));
  }
  RETURN_IF_ERROR(ValidateVocabParallel(pb));
  if (prepared_ && SameStructure(pb, schedule)) {
    BuildTables(pb);
    return absl::OkStatus();
  }
  prepared_ = false;
  RETURN_IF_ERROR(BuildStructure(pb, schedule, should_stop));
  BuildTables(pb);
  RETURN_IF_ERROR(BuildNodes(pb, should_stop));
  prepared_ = true;
  return absl::OkStatus();
}

bool Evaluator::SameStructure(const PipelineProblem& pb, const Schedule& schedule) const {
  if (pb.num_devices != P_ || pb.num_stages != S_ || pb.num_microbatches != M_ ||
      pb.vocab_parallel != vocab_ || pb.stage_device != stage_device_ ||
      pb.recompute != recompute_) {
    return false;
  }
  for (int d = 0; d < P_; ++d) {
    if (schedule.ops[d].size() != static_cast<size_t>(device_offset_[d + 1] - device_offset_[d])) {
      return false;
    }
  }
  for (int d = 0; d < P_; ++d) {
    if (!std::equal(schedule.ops[d].begin(), schedule.ops[d].end(),
                    ops_.begin() + device_offset_[d])) {
      return false;
    }
  }
  return true;
}

// Copies the problem's shape into the kept structure and sizes the position arrays for a
// schedule of n ops.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void Evaluator::ResetStructure(const PipelineProblem& pb,
                                                                   size_t n) {
  P_ = pb.num_devices;
  S_ = pb.num_stages;
  M_ = pb.num_microbatches;
  vocab_ = pb.vocab_parallel;
  stage_ids_ = pb.num_stage_ids();
  stage_device_ = pb.stage_device;
  recompute_ = pb.recompute;
  const size_t num_ids = static_cast<size_t>(kNumOpKinds) * stage_ids_ * M_;
  pos_.assign(num_ids, -1);
  ops_.resize(n);
  device_.resize(n);
  device_offset_.resize(P_ + 1);
}

// Lays the device orders out flat (ops_, device_, device_offset_) and indexes each op's
// position by id (pos_), checking every op and that none appears twice. The checks stay
// inline here: a per-op helper returning a Status costs the pass 3.6% more instructions.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline absl::Status Evaluator::PlaceOps(
    const PipelineProblem& pb, const Schedule& schedule, const std::function<bool()>* should_stop) {
  StopPoller poll(should_stop);
  int32_t flat = 0;
  for (int d = 0; d < P_; ++d) {
    device_offset_[d] = flat;
    for (const Op& op : schedule.ops[d]) {
      if (poll.Tick()) return StoppedWhilePreparing();
      if (IsVocabPass(op.kind)) {
        RETURN_IF_ERROR(CheckVocabPass(pb, op, d));
      } else if (op.stage < 0 || op.stage >= S_) {
        return absl::InvalidArgumentError(
            absl::StrCat("op ", OpAt(op, d), ": stage must be in [0, ", S_ - 1, "]"));
      }
      if (op.microbatch < 0 || op.microbatch >= M_) {
        return absl::InvalidArgumentError(absl::StrCat(
            "op ", OpAt(op, d), ": micro-batch must be in [0, ", M_ - 1, "]"));
      }
      if (!IsVocabPass(op.kind) && pb.stage_device[op.stage] != d) {
        return absl::InvalidArgumentError(absl::StrCat("op ", OpAt(op, d), ": stage ", op.stage,
                                                       " is placed on device ",
                                                       pb.stage_device[op.stage]));
      }
      if (op.kind == OpKind::kR && !pb.recompute[op.stage]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "op ", OpAt(op, d), ": stage ", op.stage, " does not recompute, so it has no R op"));
      }
      const int32_t id = IdOf(static_cast<int>(op.kind), op.stage, op.microbatch, M_);
      if (pos_[id] >= 0) {
        return absl::InvalidArgumentError(absl::StrCat("op ", OpToString(op),
                                                       " appears twice (devices ",
                                                       device_[pos_[id]], " and ", d, ")"));
      }
      pos_[id] = flat;
      ops_[flat] = op;
      device_[flat] = d;
      ++flat;
    }
  }
  device_offset_[P_] = flat;
  return absl::OkStatus();
}

// Every micro-batch of every stage needs F, a backward (BW, or B and W), and R iff recompute.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline absl::Status Evaluator::CheckOpsComplete(
    const PipelineProblem& pb) const {
  for (int s = 0; s < S_; ++s) {
    for (int m = 0; m < M_; ++m) {
      auto has = [&](int kind) { return pos_[IdOf(kind, s, m, M_)] >= 0; };
      auto name = [&](OpKind kind) { return OpToString(Op{kind, s, m}); };
      if (!has(kF)) {
        return absl::InvalidArgumentError(absl::StrCat("op ", name(OpKind::kF), " is missing"));
      }
      if (has(kBW) && (has(kB) || has(kW))) {
        return absl::InvalidArgumentError(absl::StrCat(
            "ops ", name(OpKind::kBW), " and ", has(kB) ? name(OpKind::kB) : name(OpKind::kW),
            " both present: a backward is either unsplit (BW) or split (B and W)"));
      }
      if (!has(kBW) && !(has(kB) && has(kW))) {
        return absl::InvalidArgumentError(absl::StrCat(
            "backward of stage ", s, " micro-batch ", m, " is missing: need ",
            name(OpKind::kBW), " or both ", name(OpKind::kB), " and ", name(OpKind::kW)));
      }
      if (pb.recompute[s] && !has(kR)) {
        return absl::InvalidArgumentError(absl::StrCat("op ", name(OpKind::kR),
                                                       " is missing: stage ", s,
                                                       " recomputes"));
      }
    }
  }
  return absl::OkStatus();
}

// The positions the passes look up directly: stage 0's last backward in its device's order
// (the last embedding gradient, DeviceEnd) and, under vocabulary parallelism, every S and T.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void Evaluator::IndexSpecialPositions() {
  const int P = P_;
  last_b0_pos_ = -1;
  for (int32_t f = device_offset_[stage_device_[0]]; f < device_offset_[stage_device_[0] + 1];
       ++f) {
    if (ops_[f].stage == 0 && IsBackward(ops_[f].kind)) last_b0_pos_ = f;
  }
  vocab_pos_.clear();
  if (vocab_) {
    vocab_pos_.resize(static_cast<size_t>(M_) * P * 2);
    for (int m = 0; m < M_; ++m) {
      for (int d = 0; d < P; ++d) {
        const size_t i = (static_cast<size_t>(m) * P + d) * 2;
        vocab_pos_[i] = pos_[IdOf(static_cast<int>(OpKind::kS), d, m, M_)];
        vocab_pos_[i + 1] = pos_[IdOf(static_cast<int>(OpKind::kT), d, m, M_)];
      }
    }
  }
}

absl::Status Evaluator::BuildStructure(const PipelineProblem& pb, const Schedule& schedule,
                                       const std::function<bool()>* should_stop) {
  ResetStructure(pb, schedule.total_ops());
  RETURN_IF_ERROR(PlaceOps(pb, schedule, should_stop));
  RETURN_IF_ERROR(CheckOpsComplete(pb));
  RETURN_IF_ERROR(CheckVocabPassesPresent(pb));
  IndexSpecialPositions();
  return absl::OkStatus();
}

absl::Status Evaluator::CheckVocabPassesPresent(const PipelineProblem& pb) const {
  if (!pb.vocab_parallel) return absl::OkStatus();
  for (int d = 0; d < pb.num_devices; ++d) {
    for (int m = 0; m < M_; ++m) {
      for (OpKind kind : {OpKind::kS, OpKind::kT}) {
        if (pos_[IdOf(static_cast<int>(kind), d, m, M_)] < 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "op ", OpToString(Op{kind, d, m}), " is missing: the output layer is split over "
              "every device (vocab_parallel)"));
        }
      }
    }
  }
  return absl::OkStatus();
}

// The rules evaluated once per (kind, stage) and per edge of it: an op's successors, bytes and
// devices depend on its kind and stage only (whether a consumer backward is B or BW changes
// neither), so the pass reads a duration and a delay from these small tables.
void Evaluator::BuildTables(const PipelineProblem& pb) {
  device_start_.resize(P_);
  for (int d = 0; d < P_; ++d) device_start_[d] = DeviceEarliestStart(pb, d);
  const int32_t num_ks = kNumOpKinds * stage_ids_;
  kind_stage_.assign(num_ks, KindStage{});
  tail_share_.assign(num_ks, 0.0);
  fanout_s_edges_ = 2 * num_ks;
  fanout_t_edges_ = 2 * num_ks + P_;
  edges_.assign(static_cast<size_t>(2) * num_ks + 2 * P_, Edge{});
  auto fill = [&](OpKind kind, int stage) {
    const int32_t ks = KindStageIndex(kind, stage);
    KindStage& k = kind_stage_[ks];
    k.duration = OpDuration(pb, kind, stage);
    k.tail = OpTail(pb, kind, stage);
    tail_share_[ks] = TailComputeShare(pb, stage);
    k.kind = static_cast<int32_t>(kind);
    k.delta = ActivationDelta(pb, kind, stage);
    k.predecessors = DataPredecessorCount(pb, kind, stage);
    const int from = OpDevice(pb, kind, stage);
    int slot = 0;
    ForEachDataSuccessor(
        pb, kind, stage, [](int) { return OpKind::kB; },
        [&](OpKind consumer, int consumer_stage, double bytes) {
          const int to = OpDevice(pb, consumer, consumer_stage);
          Edge e;
          e.delay = EdgeDelay(pb, bytes, from, to);
          e.bytes = bytes;
          e.to_device = to;
          e.transfer = IsTransferEdge(bytes, from, to);
          if (consumer == OpKind::kS) {
            edges_[fanout_s_edges_ + consumer_stage] = e;
          } else if (consumer == OpKind::kT) {
            edges_[fanout_t_edges_ + consumer_stage] = e;  // the same for every S
          } else {
            edges_[2 * ks + slot++] = e;
          }
        });
  };
  for (int s = 0; s < S_; ++s) {
    for (OpKind kind : {OpKind::kF, OpKind::kB, OpKind::kW, OpKind::kBW, OpKind::kR}) {
      fill(kind, s);
    }
  }
  if (vocab_) {
    for (int d = 0; d < P_; ++d) {
      fill(OpKind::kS, d);
      fill(OpKind::kT, d);
    }
  }
}

absl::Status Evaluator::BuildNodes(const PipelineProblem& pb,
                                   const std::function<bool()>* should_stop) {
  const int32_t n = static_cast<int32_t>(ops_.size());
  nodes_.resize(n + 1);
  nodes_[n] = Node{0, 0, 0, {-1, -1}, {0, 0}};  // the sentinel: nodes_[cursor] at a device's end
  StopPoller poll(should_stop);
  for (int32_t p = 0; p < n; ++p) {
    if (poll.Tick()) return StoppedWhilePreparing();
    const Op op = ops_[p];
    Node& node = nodes_[p];
    node.ks = KindStageIndex(op.kind, op.stage);
    node.ready = 0;
    node.pending = kind_stage_[node.ks].predecessors;
    node.succ[0] = node.succ[1] = -1;
    node.edge[0] = node.edge[1] = 0;
    const int m = op.microbatch;
    auto backward = [&](int st) {
      return pos_[IdOf(kB, st, m, M_)] >= 0 ? OpKind::kB : OpKind::kBW;
    };
    int slot = 0;
    ForEachDataSuccessor(pb, op.kind, op.stage, backward,
                         [&](OpKind consumer, int consumer_stage, double) {
                           if (consumer == OpKind::kS || consumer == OpKind::kT) {
                             node.succ[1] = kFanOut;
                             node.edge[1] = m;
                             return;
                           }
                           node.succ[slot] = pos_[IdOf(static_cast<int>(consumer),
                                                       consumer_stage, m, M_)];
                           node.edge[slot] = 2 * node.ks + slot;
                           ++slot;
                         });
  }
  dirty_ = false;
  return absl::OkStatus();
}

void Evaluator::ResetNodes() {
  for (size_t p = 0; p < ops_.size(); ++p) {
    Node& node = nodes_[p];
    node.ready = 0;
    node.pending = kind_stage_[node.ks].predecessors;
  }
  dirty_ = false;
}

absl::Status Evaluator::StoppedError() const {
  return absl::DeadlineExceededError(absl::StrCat("evaluation stopped by its stop check after ",
                                                  run_ops_, " of ", ops_.size(), " ops"));
}

// Sizes the per-run arrays for a DAG pass and queues every device, each at its first op.
template <bool kTimes, bool kTrack>
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void Evaluator::ResetDagRun() {
  if (dirty_) ResetNodes();
  const int32_t n = static_cast<int32_t>(ops_.size());
  const int P = P_;
  if (kTimes) {
    start_.resize(n);
    end_.resize(n);
  }
  if (kTrack) {
    pred_.assign(n, -1);
    pred_transfer_.assign(n, 0);
  }
  cursor_.assign(device_offset_.begin(), device_offset_.end() - 1);
  device_free_ = device_start_;
  comm_free_ = device_start_;
  tail_window_.assign(P, TailWindow{});
  if (kTimes) compute_end_.resize(n);
  b0_end_ = 0;
  live_.assign(P, 0.0);
  max_live_.assign(P, 0.0);
  first_start_.assign(P, 0.0);
  queued_.assign(P, 1);
  worklist_.resize(P);
  std::iota(worklist_.begin(), worklist_.end(), 0);
}

// Prefetch the next op of the device 8 visits ahead, and the first consumer of the next op of
// the device 4 ahead (whose node the first prefetch brought in), so the misses of successive
// visits overlap (+30% at 512 devices). A device at its end points at the sentinel node.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void Evaluator::PrefetchAhead(const DagView& v,
                                                                  size_t head) const {
  if (head + 8 < worklist_.size()) {
    __builtin_prefetch(&v.nodes[v.cursor[worklist_[head + 8]]], 1);
    const Node& soon = v.nodes[v.cursor[worklist_[head + 4]]];
    __builtin_prefetch(&v.nodes[std::max(soon.succ[0], 0)], 1);
  }
}

// One worklist visit: device d runs its order from its cursor while the next op is ready,
// polling the stop check every kStopPollOps ops of the pass. False when the check stopped it
// (run_ops_ and dirty_ are then set).
template <bool kTimes, bool kTrack>
ABSL_ATTRIBUTE_ALWAYS_INLINE inline bool Evaluator::RunDevice(
    const DagView& v, int d, const std::function<bool()>* should_stop, int64_t* poll_left,
    int64_t* processed) {
  Node* const nodes = v.nodes;
  const int32_t lo = device_offset_[d], hi = device_offset_[d + 1];
  int32_t p = v.cursor[d];
  DeviceRun run{device_free_[d], comm_free_[d], live_[d], max_live_[d], tail_window_[d]};
  if (p == lo && p < hi && nodes[p].pending == 0) {
    first_start_[d] = run.device_free >= nodes[p].ready ? run.device_free : nodes[p].ready;
  }
  for (;;) {
    const int32_t from = p;
    const int32_t lim = hi - p > *poll_left ? p + static_cast<int32_t>(*poll_left) : hi;
    p = RunReadyOps<kTimes, kTrack>(v, d, p, lim, hi, &run);
    *poll_left -= p - from;
    if (*poll_left > 0) break;
    *poll_left = kStopPollOps;
    if ((*should_stop)()) {
      run_ops_ = *processed + (p - v.cursor[d]);
      dirty_ = true;
      return false;
    }
    if (p == hi || nodes[p].pending != 0) break;
  }
  device_free_[d] = run.device_free;
  comm_free_[d] = run.comm_free;
  tail_window_[d] = run.window;
  live_[d] = run.live;
  max_live_[d] = run.max_live;
  *processed += p - v.cursor[d];
  v.cursor[d] = p;
  return true;
}

// Runs device d's ops from position p (below lim) while each has its inputs: times it, adds
// its activation delta, resets its node for the next call and relaxes its successors. Returns
// the first position not run.
template <bool kTimes, bool kTrack>
ABSL_ATTRIBUTE_ALWAYS_INLINE inline int32_t Evaluator::RunReadyOps(const DagView& v, int d,
                                                                   int32_t p, int32_t lim,
                                                                   int32_t hi, DeviceRun* run) {
  const int32_t lo = device_offset_[d];
  double device_free = run->device_free;
  double comm_free = run->comm_free;
  double live = run->live, max_live = run->max_live;
  for (; p < lim; ++p) {
    Node& node = v.nodes[p];
    if (node.pending != 0) break;
    double start = node.ready;
    if (device_free >= start) {
      if (kTrack && p > lo && (device_free > start || pred_[p] < 0)) {
        pred_[p] = p - 1;
        pred_transfer_[p] = 0;
      }
      start = device_free;
    }
    const KindStage& k = v.kind_stage[node.ks];
    // The device computes until compute_end (slower beside the previous op's tail); an
    // overlapped all-to-all then runs on its communication stream (one at a time), and the
    // op's outputs are ready at `end`. The device's next op runs beside it if it is of
    // another kind, else it waits for it (TailOverlapsNext).
    double compute_end = start + k.duration;
    if (run->window.to > start) {  // else no tail runs beside it (a stale window ended before)
      compute_end = start + ComputeBesideTail(k.duration, start, run->window);
      run->window.to = 0;
    }
    double end = compute_end;
    double next_free = compute_end;
    if (k.tail > 0) {
      end = (comm_free > compute_end ? comm_free : compute_end) + k.tail;
      comm_free = end;
      if (p + 1 < hi) {
        if (TailOverlapsNext(static_cast<OpKind>(k.kind),
                             static_cast<OpKind>(v.kind_stage[v.nodes[p + 1].ks].kind))) {
          run->window = TailWindow{end - k.tail, end, tail_share_[node.ks]};
        } else {
          next_free = end;
        }
      }
    }
    live += k.delta;
    max_live = std::max(max_live, live);
    if (kTimes) {
      start_[p] = start;
      end_[p] = end;
      compute_end_[p] = compute_end;
    }
    if (p == v.last_b0) b0_end_ = end;
    device_free = next_free;
    const Node links = node;
    // Reset for the next call: nothing reads this node again in this one.
    node.ready = 0;
    node.pending = k.predecessors;
    RelaxSuccessors<kTrack>(v, p, d, end, links);
  }
  run->device_free = device_free;
  run->comm_free = comm_free;
  run->live = live;
  run->max_live = max_live;
  return p;
}

// Relaxes every data successor of the op at p (device d), which ends at `end`; `links` is its
// node as it was before the reset.
template <bool kTrack>
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void Evaluator::RelaxSuccessors(const DagView& v, int32_t p,
                                                                    int d, double end,
                                                                    const Node& links) {
  const int32_t c0 = links.succ[0], c1 = links.succ[1];
  const int32_t e0 = links.edge[0], e1 = links.edge[1];
  if (c1 == kFanOut) {
    const bool to_t = KindOfIndex(links.ks) == OpKind::kS;
    const int32_t* pos = v.vocab_pos + static_cast<size_t>(e1) * v.P * 2 + to_t;
    const int32_t base = to_t ? fanout_t_edges_ : fanout_s_edges_;
    for (int dd = 0; dd < v.P; ++dd) Relax<kTrack>(v, p, d, end, pos[2 * dd], base + dd);
    if (c0 >= 0) Relax<kTrack>(v, p, d, end, c0, e0);
  } else if (c0 >= 0) {
    Relax<kTrack>(v, p, d, end, c0, e0);
    if (c1 >= 0) Relax<kTrack>(v, p, d, end, c1, e1);
  }
}

// One data edge p -> c (edge e): raises c's earliest start to end + delay (recording p as the
// predecessor that set it) and queues c's device when c was its last missing input and is that
// device's next op.
template <bool kTrack>
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void Evaluator::Relax(const DagView& v, int32_t p, int d,
                                                          double end, int32_t c, int32_t e) {
  const Edge& edge = v.edges[e];
  const double t = end + edge.delay;
  Node& consumer = v.nodes[c];
  if (t > consumer.ready || (kTrack && pred_[c] < 0)) {
    consumer.ready = std::max(consumer.ready, t);
    if (kTrack) {
      pred_[c] = p;
      pred_transfer_[c] = edge.transfer;
    }
  }
  const int dc = edge.to_device;
  if (--consumer.pending == 0 && dc != d && c == v.cursor[dc] && !v.queued[dc]) {
    v.queued[dc] = 1;
    worklist_.push_back(dc);
  }
}

// Longest path in topological order over a worklist of devices: a device runs its own order
// from its cursor while the next op's data predecessors are done, and a device whose next op
// becomes ready joins the worklist. Each device walks its order sequentially and the
// successors of consecutive ops lie near each other in the next device's order, so the pass is
// O(ops) and cache-friendly at thousands of devices. An empty worklist with ops left means the
// device orders form a cycle. kTimes stores every op's start and end; kTrack the predecessor
// that set each start (ties go to the first to arrive, so the order of this pass is part of
// the critical path's definition). Each device's activation peak is summed as it runs.
template <bool kTimes, bool kTrack>
absl::Status Evaluator::RunDag(const std::function<bool()>* should_stop) {
  ResetDagRun<kTimes, kTrack>();
  const DagView v{nodes_.data(),  kind_stage_.data(), edges_.data(), cursor_.data(),
                  queued_.data(), vocab_pos_.data(),  last_b0_pos_,  P_};
  int64_t poll_left = should_stop != nullptr ? kStopPollOps : std::numeric_limits<int64_t>::max();
  size_t head = 0;
  int64_t processed = 0;
  while (head < worklist_.size()) {
    const int d = worklist_[head++];
    v.queued[d] = 0;
    PrefetchAhead(v, head);
    if (!RunDevice<kTimes, kTrack>(v, d, should_stop, &poll_left, &processed)) {
      return StoppedError();
    }
    if (head > 4096 && head * 2 > worklist_.size()) {  // keep the queue compact
      worklist_.erase(worklist_.begin(), worklist_.begin() + head);
      head = 0;
    }
  }
  if (processed != static_cast<int64_t>(ops_.size())) return DagCycle();
  return absl::OkStatus();
}

// The DAG pass ended with ops left: the device orders form a cycle. For CycleError, marks what
// ran as having no pending inputs and everything else at least one.
absl::Status Evaluator::DagCycle() {
  Node* const nodes = nodes_.data();
  for (int d = 0; d < P_; ++d) {
    for (int32_t f = device_offset_[d]; f < cursor_[d]; ++f) nodes[f].pending = 0;
    for (int32_t f = cursor_[d]; f < device_offset_[d + 1]; ++f) {
      nodes[f].pending = std::max(nodes[f].pending, 1);
    }
  }
  dirty_ = true;
  return absl::FailedPreconditionError("cycle");
}

absl::Status Evaluator::CycleError(const PipelineProblem& pb, const Schedule& schedule) const {
  const int32_t n = static_cast<int32_t>(ops_.size());
  auto pending = [&](int32_t f) { return nodes_[f].pending; };
  auto op_of = [&](int32_t f) {
    const int d = device_[f];
    return schedule.ops[d][f - device_offset_[d]];
  };
  // Unresolved predecessors of f: its device predecessor and its data predecessors.
  auto blocked_pred = [&](int32_t f) -> int32_t {
    const int d = device_[f];
    if (f > device_offset_[d] && pending(f - 1) > 0) return f - 1;
    const Op op = op_of(f);
    const int s = op.stage, m = op.microbatch;
    auto backward = [&](int st) {
      return pos_[IdOf(kB, st, m, M_)] >= 0 ? OpKind::kB : OpKind::kBW;
    };
    std::vector<int32_t> preds;
    ForEachDataPredecessor(pb, op.kind, s, backward, [&](OpKind kind, int st) {
      preds.push_back(pos_[IdOf(static_cast<int>(kind), st, m, M_)]);
    });
    for (int32_t q : preds) {
      if (pending(q) > 0) return q;
    }
    return f > device_offset_[d] ? f - 1 : -1;
  };
  int32_t start = -1;
  for (int32_t f = 0; f < n && start < 0; ++f) {
    if (pending(f) > 0) start = f;
  }
  std::vector<int32_t> seen_at(n, -1);
  std::vector<int32_t> walk;
  int32_t f = start;
  while (f >= 0 && seen_at[f] < 0) {
    seen_at[f] = static_cast<int32_t>(walk.size());
    walk.push_back(f);
    f = blocked_pred(f);
  }
  std::vector<std::string> names;
  if (f >= 0) {
    // walk[seen_at[f]..] is the cycle, each waiting on the next; print in that order.
    for (size_t i = seen_at[f]; i < walk.size() && names.size() < 16; ++i) {
      names.push_back(OpAt(op_of(walk[i]), device_[walk[i]]));
    }
    names.push_back(OpAt(op_of(f), device_[f]));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "deadlock: the device orders contradict the data dependencies; cycle: ",
      absl::StrJoin(names, " waits for ")));
}

Evaluator::Summary Evaluator::Summarize(const PipelineProblem& pb) {
  Summary out;
  double first = std::numeric_limits<double>::infinity(), last = 0;
  for (int d = 0; d < pb.num_devices; ++d) {
    const int32_t lo = device_offset_[d], hi = device_offset_[d + 1];
    if (lo == hi) continue;
    // With the split embedding the iteration begins before the first op (DeviceEarliestStart:
    // the lookups and the first reduce) and a device's part ends after its last op (DeviceEnd:
    // the scatter-adds); its steady-state period is DevicePeriod.
    first = std::min(first, first_start_[d] - device_start_[d]);
    const double done = std::max(device_free_[d], comm_free_[d]);  // compute and comm stream
    last = std::max(last, DeviceEnd(pb, d, done, b0_end_));
    out.steady_state_iteration_time_s =
        std::max(out.steady_state_iteration_time_s,
                 DevicePeriod(pb, d, first_start_[d], done, b0_end_));
  }
  out.iteration_time_s = ops_.empty() ? 0 : last - first;
  peak_.resize(pb.num_devices);
  for (int d = 0; d < pb.num_devices; ++d) {
    peak_[d] = pb.static_bytes[d] + max_live_[d];
    const double over = peak_[d] - pb.memory_capacity[d];
    if (peak_[d] > pb.memory_capacity[d] * (1 + kMemorySlack)) out.fits_memory = false;
    out.memory_overflow_bytes = std::max(out.memory_overflow_bytes, over);
  }
  return out;
}

absl::Status Evaluator::Run(const PipelineProblem& pb, bool times, bool track_pred,
                            bool log_transfers, const std::function<bool()>* should_stop) {
  if (pb.link_contention) return RunEvents(pb, track_pred, log_transfers, should_stop);
  if (track_pred) return RunDag<true, true>(should_stop);
  if (times) return RunDag<true, false>(should_stop);
  return RunDag<false, false>(should_stop);
}

absl::StatusOr<Evaluator::Summary> Evaluator::EvaluateSummary(const PipelineProblem& pb,
                                                              const Schedule& schedule,
                                                              const EvalOptions& options) {
  RETURN_IF_ERROR(Prepare(pb, schedule, options.should_stop));
  absl::Status run = Run(pb, false, false, false, options.should_stop);
  if (absl::IsDeadlineExceeded(run)) return run;
  if (!run.ok()) return CycleError(pb, schedule);
  return Summarize(pb);
}

// Each device's busy time (compute only: an op's tail overlaps the next op), span and memory
// fit, the bubble ratios and the throughput of the last run; r's iteration times are set.
void Evaluator::FillDeviceResults(const PipelineProblem& pb, SimResult* r) const {
  const int P = pb.num_devices;
  r->devices.resize(P);
  double busy_total = 0;
  for (int d = 0; d < P; ++d) {
    DeviceResult& dr = r->devices[d];
    const int32_t lo = device_offset_[d], hi = device_offset_[d + 1];
    for (int32_t f = lo; f < hi; ++f) {  // compute only: an op's tail runs beside it
      dr.busy_s += compute_end_[f] - start_[f];
    }
    if (pb.embed_split) dr.busy_s += pb.embed_prologue_s[d] + pb.embed_epilogue_s[d];
    if (lo < hi) {
      dr.first_start_s = start_[lo];
      dr.last_end_s = end_[hi - 1];
    }
    busy_total += dr.busy_s;
    dr.peak_memory_bytes = peak_[d];
    dr.fits_memory = peak_[d] <= pb.memory_capacity[d] * (1 + kMemorySlack);
  }
  auto ratio = [](double busy, double span) { return span > 0 ? 1.0 - busy / span : 0.0; };
  for (DeviceResult& dr : r->devices) {
    dr.bubble_ratio = ratio(dr.busy_s, r->iteration_time_s);
    dr.steady_state_bubble_ratio = ratio(dr.busy_s, r->steady_state_iteration_time_s);
  }
  r->bubble_ratio = ratio(busy_total, P * r->iteration_time_s);
  r->steady_state_bubble_ratio = ratio(busy_total, P * r->steady_state_iteration_time_s);
  if (r->iteration_time_s > 0) {
    r->tokens_per_s = pb.num_microbatches * pb.tokens_per_microbatch / r->iteration_time_s;
  }
}

// Every op's start and end per device, and the transfers: as served under contention, else
// each cross-device data edge, starting when its producer ends.
void Evaluator::FillTimeline(const PipelineProblem& pb, const Schedule& schedule,
                             SimResult* r) const {
  const int P = pb.num_devices;
  r->op_start_s.resize(P);
  r->op_end_s.resize(P);
  for (int d = 0; d < P; ++d) {
    r->op_start_s[d].assign(start_.begin() + device_offset_[d],
                            start_.begin() + device_offset_[d + 1]);
    r->op_end_s[d].assign(end_.begin() + device_offset_[d], end_.begin() + device_offset_[d + 1]);
  }
  if (pb.link_contention) {
    r->transfers = transfer_log_;
    return;
  }
  const int32_t n = static_cast<int32_t>(ops_.size());
  for (int32_t p = 0; p < n; ++p) {
    const int dp = device_[p];
    ForEachSuccessor(p, [&](int32_t c, int32_t e) {
      const Edge& edge = edges_[e];
      if (!edge.transfer) return;
      const int dc = device_[c];
      TransferRecord t;
      t.from_device = dp;
      t.to_device = dc;
      t.consumer = schedule.ops[dc][c - device_offset_[dc]];
      t.bytes = edge.bytes;
      t.start_s = end_[p];
      t.end_s = end_[p] + pb.transfer_s(dp, dc, edge.bytes);
      r->transfers.push_back(t);
    });
  }
}

// The critical path of the last run (tracked), in time order: from the op that ends last back
// through the predecessor that set each start.
void Evaluator::TraceCriticalPath(const Schedule& schedule, SimResult* r) const {
  int32_t f = 0;
  for (int32_t i = 1; i < static_cast<int32_t>(ops_.size()); ++i) {
    if (end_[i] > end_[f]) f = i;
  }
  std::vector<CriticalPathEntry> path;
  while (f >= 0) {
    const int d = device_[f];
    path.push_back(CriticalPathEntry{d, schedule.ops[d][f - device_offset_[d]], start_[f],
                                     end_[f], pred_transfer_[f] != 0});
    f = pred_[f];
  }
  r->critical_path.assign(path.rbegin(), path.rend());
}

absl::StatusOr<SimResult> Evaluator::Evaluate(const PipelineProblem& pb, const Schedule& schedule,
                                              const EvalOptions& options) {
  RETURN_IF_ERROR(Prepare(pb, schedule, options.should_stop));
  const bool track = options.critical_path;
  absl::Status run = Run(pb, true, track, options.timeline, options.should_stop);
  if (absl::IsDeadlineExceeded(run)) return run;
  if (!run.ok()) return CycleError(pb, schedule);

  const Summary summary = Summarize(pb);
  SimResult r;
  r.iteration_time_s = summary.iteration_time_s;
  r.steady_state_iteration_time_s = summary.steady_state_iteration_time_s;
  r.fits_memory = summary.fits_memory;
  FillDeviceResults(pb, &r);
  if (options.timeline) FillTimeline(pb, schedule, &r);
  if (track && !ops_.empty()) TraceCriticalPath(schedule, &r);
  return r;
}

absl::StatusOr<SimResult> Simulate(const PipelineProblem& problem, const Schedule& schedule,
                                   const EvalOptions& options) {
  Evaluator evaluator;
  return evaluator.Evaluate(problem, schedule, options);
}

}  // namespace octopipe
