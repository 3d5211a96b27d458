#include "simulator/evaluator_reference.h"

#include <algorithm>
#include <limits>
#include <queue>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "simulator/pipeline_rules.h"
#include "simulator/vocab_parallel.h"

namespace octopipe {
namespace evaluator_reference {
namespace {

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

}  // namespace

absl::Status ReferenceEvaluator::Prepare(const PipelineProblem& pb, const Schedule& schedule) {
  S_ = pb.num_stages;
  M_ = pb.num_microbatches;
  const int P = pb.num_devices;
  if (schedule.num_devices() != P) {
    return absl::InvalidArgumentError(absl::StrCat("schedule has orders for ",
                                                   schedule.num_devices(),
                                                   " devices but the problem has ", P));
  }
  RETURN_IF_ERROR(ValidateVocabParallel(pb));
  const size_t num_ids = static_cast<size_t>(kNumOpKinds) * pb.num_stage_ids() * M_;
  pos_.assign(num_ids, -1);
  const size_t n = schedule.total_ops();
  ops_.resize(n);
  device_.resize(n);
  device_offset_.resize(P + 1);
  int32_t flat = 0;
  for (int d = 0; d < P; ++d) {
    device_offset_[d] = flat;
    for (const Op& op : schedule.ops[d]) {
      if (IsVocabPass(op.kind)) {
        RETURN_IF_ERROR(CheckVocabPass(pb, op, d));
      } else if (op.stage < 0 || op.stage >= S_) {
        return absl::InvalidArgumentError(absl::StrCat("op ", OpAt(op, d), ": stage must be in [0, ",
                                                       S_ - 1, "]"));
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
  device_offset_[P] = flat;
  // Every micro-batch of every stage needs F, a backward (BW, or B and W), and R iff recompute.
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
  return CheckVocabPassesPresent(pb);
}

absl::Status ReferenceEvaluator::CheckVocabPassesPresent(const PipelineProblem& pb) const {
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

namespace {

// Calls fn(consumer_flat_position, bytes) for every data successor of `op` (the rule is
// ForEachDataSuccessor); bytes < 0 marks a same-stage edge (never a transfer). A stage's
// backward is B when the schedule has it, else BW.
template <typename Fn>
inline void ForEachSuccessorPosition(const PipelineProblem& pb, const std::vector<int32_t>& pos,
                                     int M, const Op& op, Fn&& fn) {
  const int m = op.microbatch;
  auto backward = [&](int st) { return pos[IdOf(kB, st, m, M)] >= 0 ? OpKind::kB : OpKind::kBW; };
  ForEachDataSuccessor(pb, op.kind, op.stage, backward, [&](OpKind kind, int st, double bytes) {
    fn(pos[IdOf(static_cast<int>(kind), st, m, M)], bytes);
  });
}

}  // namespace

// Longest path in topological order over a worklist of devices: a device runs its own order
// from its cursor while the next op's data predecessors are done, and a device whose next op
// becomes ready joins the worklist. Each device walks its order sequentially and the
// successors of consecutive ops lie near each other in the next device's order, so the pass is
// O(ops) and cache-friendly at thousands of devices. An empty worklist with ops left means the
// device orders form a cycle.
void ReferenceEvaluator::ResetTiming(bool track_pred) {
  const size_t n = ops_.size();
  pending_.resize(n);
  ready_.assign(n, 0.0);
  start_.resize(n);
  end_.resize(n);
  compute_end_.resize(n);
  comm_free_.assign(device_offset_.empty() ? 0 : device_offset_.size() - 1, 0.0);
  if (track_pred) {
    pred_.assign(n, -1);
    pred_transfer_.assign(n, 0);
  }
}

absl::Status ReferenceEvaluator::RunDag(const PipelineProblem& pb, bool track_pred) {
  const int32_t n = static_cast<int32_t>(ops_.size());
  const int P = pb.num_devices;
  ResetTiming(track_pred);
  for (int32_t f = 0; f < n; ++f) pending_[f] = DataPredecessorCount(pb, ops_[f].kind, ops_[f].stage);
  cursor_.assign(device_offset_.begin(), device_offset_.end() - 1);
  queued_.assign(P, 1);
  worklist_.resize(P);
  for (int d = 0; d < P; ++d) worklist_[d] = d;
  size_t head = 0;
  int32_t processed = 0;
  while (head < worklist_.size()) {
    const int d = worklist_[head++];
    queued_[d] = 0;
    const int32_t stop = device_offset_[d + 1];
    int32_t p = cursor_[d];
    double device_free = p > device_offset_[d] ? FreeAfter(pb, p - 1) : 0.0;
    for (; p < stop && pending_[p] == 0; ++p) {
      double start = ready_[p];
      if (device_free >= start) {
        if (track_pred && p > device_offset_[d] && (device_free > start || pred_[p] < 0)) {
          pred_[p] = p - 1;
          pred_transfer_[p] = 0;
        }
        start = device_free;
      }
      // The compute (slower beside the previous op's tail), then an overlapped all-to-all on
      // the device's communication stream.
      const double compute_end =
          start + ComputeBesideTail(OpDuration(pb, ops_[p].kind, ops_[p].stage), start,
                                    WindowBefore(pb, p));
      const double tail = OpTail(pb, ops_[p].kind, ops_[p].stage);
      double end = compute_end;
      if (tail > 0) {
        end = std::max(compute_end, comm_free_[d]) + tail;
        comm_free_[d] = end;
      }
      start_[p] = start;
      end_[p] = end;
      compute_end_[p] = compute_end;
      device_free = p + 1 < stop ? FreeAfter(pb, p) : compute_end;
      ForEachSuccessorPosition(pb, pos_, M_, ops_[p], [&](int32_t c, double bytes) {
        const int dc = device_[c];
        const bool transfer = IsTransferEdge(bytes, d, dc);
        const double t = end + EdgeDelay(pb, bytes, d, dc);
        if (t > ready_[c] || (track_pred && pred_[c] < 0)) {
          ready_[c] = std::max(ready_[c], t);
          if (track_pred) {
            pred_[c] = p;
            pred_transfer_[c] = transfer;
          }
        }
        if (--pending_[c] == 0 && dc != d && c == cursor_[dc] && !queued_[dc]) {
          queued_[dc] = 1;
          worklist_.push_back(dc);
        }
      });
    }
    processed += p - cursor_[d];
    cursor_[d] = p;
    if (head > 4096 && head * 2 > worklist_.size()) {  // keep the queue compact
      worklist_.erase(worklist_.begin(), worklist_.begin() + head);
      head = 0;
    }
  }
  if (processed != n) {
    // Mark everything not run as pending so CycleError can tell it from what ran.
    for (int d = 0; d < P; ++d) {
      for (int32_t f = cursor_[d]; f < device_offset_[d + 1]; ++f) {
        pending_[f] = std::max(pending_[f], 1);
      }
    }
    return absl::FailedPreconditionError("cycle");
  }
  return absl::OkStatus();
}

absl::Status ReferenceEvaluator::RunEvents(const PipelineProblem& pb, bool track_pred,
                                    bool log_transfers) {
  transfer_log_.clear();
  const int32_t n = static_cast<int32_t>(ops_.size());
  const int P = pb.num_devices;
  ResetTiming(track_pred);
  struct Event {
    double time;
    int64_t seq;
    int32_t producer;  // for transfers; -1 for op starts
    int32_t op;
    bool operator>(const Event& o) const {
      return time != o.time ? time > o.time : seq > o.seq;
    }
  };
  std::vector<Event> storage;
  storage.reserve(n);
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> heap(
      std::greater<Event>(), std::move(storage));
  int64_t seq = 0;
  std::vector<double> link_free(static_cast<size_t>(P) * P, 0.0);
  for (int d = 0; d < P; ++d) {
    for (int32_t f = device_offset_[d]; f < device_offset_[d + 1]; ++f) {
      pending_[f] = DataPredecessorCount(pb, ops_[f].kind, ops_[f].stage) + (f > device_offset_[d] ? 1 : 0);
      if (pending_[f] == 0) heap.push(Event{0.0, seq++, -1, f});
    }
  }
  auto resolve = [&](int32_t c, double t, int32_t p, bool transfer) {
    if (t > ready_[c] || (track_pred && pred_[c] < 0)) {
      ready_[c] = std::max(ready_[c], t);
      if (track_pred) {
        pred_[c] = p;
        pred_transfer_[c] = transfer;
      }
    }
    if (--pending_[c] == 0) heap.push(Event{ready_[c], seq++, -1, c});
  };
  int32_t processed = 0;
  while (!heap.empty()) {
    const Event e = heap.top();
    heap.pop();
    if (e.producer >= 0) {  // a transfer became ready: serve it on its link in FIFO order
      const int a = device_[e.producer];
      const int b = device_[e.op];
      const size_t link = static_cast<size_t>(a) * P + b;
      double bytes = 0;
      ForEachSuccessorPosition(pb, pos_, M_, ops_[e.producer], [&](int32_t c, double by) {
        if (c == e.op) bytes = by;
      });
      const double start = std::max(e.time, link_free[link]);
      const double end = start + pb.transfer_s(a, b, bytes);
      link_free[link] = end;
      if (log_transfers) {
        TransferRecord t;
        t.from_device = a;
        t.to_device = b;
        t.consumer = ops_[e.op];
        t.bytes = bytes;
        t.start_s = start;
        t.end_s = end;
        transfer_log_.push_back(t);
      }
      resolve(e.op, end, e.producer, true);
      continue;
    }
    const int32_t p = e.op;
    ++processed;
    start_[p] = e.time;
    const int dp = device_[p];
    compute_end_[p] = e.time + ComputeBesideTail(OpDuration(pb, ops_[p].kind, ops_[p].stage),
                                                 e.time, WindowBefore(pb, p));
    end_[p] = compute_end_[p];
    if (const double tail = OpTail(pb, ops_[p].kind, ops_[p].stage); tail > 0) {
      end_[p] = std::max(compute_end_[p], comm_free_[dp]) + tail;
      comm_free_[dp] = end_[p];
    }
    if (p + 1 < device_offset_[dp + 1]) resolve(p + 1, FreeAfter(pb, p), p, false);
    ForEachSuccessorPosition(pb, pos_, M_, ops_[p], [&](int32_t c, double bytes) {
      if (IsTransferEdge(bytes, dp, device_[c])) {
        heap.push(Event{end_[p], seq++, p, c});
      } else {
        resolve(c, end_[p] + EdgeDelay(pb, bytes, dp, device_[c]), p, false);
      }
    });
  }
  if (processed != n) return absl::FailedPreconditionError("cycle");
  return absl::OkStatus();
}

absl::Status ReferenceEvaluator::CycleError(const PipelineProblem& pb, const Schedule& schedule) const {
  const int32_t n = static_cast<int32_t>(ops_.size());
  auto op_of = [&](int32_t f) {
    const int d = device_[f];
    return schedule.ops[d][f - device_offset_[d]];
  };
  // Unresolved predecessors of f: its device predecessor and its data predecessors.
  auto blocked_pred = [&](int32_t f) -> int32_t {
    const int d = device_[f];
    if (f > device_offset_[d] && pending_[f - 1] > 0) return f - 1;
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
      if (pending_[q] > 0) return q;
    }
    return f > device_offset_[d] ? f - 1 : -1;
  };
  int32_t start = -1;
  for (int32_t f = 0; f < n && start < 0; ++f) {
    if (pending_[f] > 0) start = f;
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

void ReferenceEvaluator::ComputeMemory(const PipelineProblem& pb, const Schedule& schedule,
                              std::vector<double>* peak) const {
  peak->assign(pb.num_devices, 0.0);
  for (int d = 0; d < pb.num_devices; ++d) {
    double live = 0, max_live = 0;
    for (const Op& op : schedule.ops[d]) {
      live += ActivationDelta(pb, op.kind, op.stage);
      max_live = std::max(max_live, live);
    }
    (*peak)[d] = pb.static_bytes[d] + max_live;
  }
}

double ReferenceEvaluator::FreeAfter(const PipelineProblem& pb, int32_t q) const {
  const double tail = OpTail(pb, ops_[q].kind, ops_[q].stage);
  if (tail > 0 && !TailOverlapsNext(ops_[q].kind, ops_[q + 1].kind)) return end_[q];
  return compute_end_[q];
}

TailWindow ReferenceEvaluator::WindowBefore(const PipelineProblem& pb, int32_t p) const {
  if (p == device_offset_[device_[p]]) return {};
  const int32_t q = p - 1;
  const double tail = OpTail(pb, ops_[q].kind, ops_[q].stage);
  if (!(tail > 0) || !TailOverlapsNext(ops_[q].kind, ops_[p].kind)) return {};
  return {end_[q] - tail, end_[q], TailComputeShare(pb, ops_[q].stage)};
}

ReferenceEvaluator::Summary ReferenceEvaluator::Summarize(const PipelineProblem& pb, const Schedule& schedule) {
  Summary out;
  double first = std::numeric_limits<double>::infinity(), last = 0;
  for (int d = 0; d < pb.num_devices; ++d) {
    const int32_t lo = device_offset_[d], hi = device_offset_[d + 1];
    if (lo == hi) continue;
    first = std::min(first, start_[lo]);
    const double done = std::max(end_[hi - 1], comm_free_[d]);
    last = std::max(last, done);
    out.steady_state_iteration_time_s =
        std::max(out.steady_state_iteration_time_s, done - start_[lo]);
  }
  out.iteration_time_s = ops_.empty() ? 0 : last - first;
  ComputeMemory(pb, schedule, &peak_);
  for (int d = 0; d < pb.num_devices; ++d) {
    const double over = peak_[d] - pb.memory_capacity[d];
    if (peak_[d] > pb.memory_capacity[d] * (1 + kMemorySlack)) out.fits_memory = false;
    out.memory_overflow_bytes = std::max(out.memory_overflow_bytes, over);
  }
  return out;
}

absl::StatusOr<ReferenceEvaluator::Summary> ReferenceEvaluator::EvaluateSummary(const PipelineProblem& pb,
                                                              const Schedule& schedule) {
  RETURN_IF_ERROR(Prepare(pb, schedule));
  absl::Status run = pb.link_contention ? RunEvents(pb, false, false) : RunDag(pb, false);
  if (!run.ok()) return CycleError(pb, schedule);
  return Summarize(pb, schedule);
}

absl::StatusOr<SimResult> ReferenceEvaluator::Evaluate(const PipelineProblem& pb, const Schedule& schedule,
                                              const EvalOptions& options) {
  RETURN_IF_ERROR(Prepare(pb, schedule));
  const bool track = options.critical_path;
  absl::Status run = pb.link_contention ? RunEvents(pb, track, options.timeline) : RunDag(pb, track);
  if (!run.ok()) return CycleError(pb, schedule);

  const int P = pb.num_devices;
  const Summary summary = Summarize(pb, schedule);
  SimResult r;
  r.iteration_time_s = summary.iteration_time_s;
  r.steady_state_iteration_time_s = summary.steady_state_iteration_time_s;
  r.fits_memory = summary.fits_memory;
  r.devices.resize(P);
  double busy_total = 0;
  for (int d = 0; d < P; ++d) {
    DeviceResult& dr = r.devices[d];
    const int32_t lo = device_offset_[d], hi = device_offset_[d + 1];
    for (int32_t f = lo; f < hi; ++f) dr.busy_s += compute_end_[f] - start_[f];
    if (lo < hi) {
      dr.first_start_s = start_[lo];
      dr.last_end_s = end_[hi - 1];
    }
    busy_total += dr.busy_s;
    dr.peak_memory_bytes = peak_[d];
    dr.fits_memory = peak_[d] <= pb.memory_capacity[d] * (1 + kMemorySlack);
  }
  auto ratio = [](double busy, double span) { return span > 0 ? 1.0 - busy / span : 0.0; };
  for (DeviceResult& dr : r.devices) {
    dr.bubble_ratio = ratio(dr.busy_s, r.iteration_time_s);
    dr.steady_state_bubble_ratio = ratio(dr.busy_s, r.steady_state_iteration_time_s);
  }
  r.bubble_ratio = ratio(busy_total, P * r.iteration_time_s);
  r.steady_state_bubble_ratio = ratio(busy_total, P * r.steady_state_iteration_time_s);
  if (r.iteration_time_s > 0) {
    r.tokens_per_s = pb.num_microbatches * pb.tokens_per_microbatch / r.iteration_time_s;
  }

  if (options.timeline) {
    r.op_start_s.resize(P);
    r.op_end_s.resize(P);
    for (int d = 0; d < P; ++d) {
      r.op_start_s[d].assign(start_.begin() + device_offset_[d],
                             start_.begin() + device_offset_[d + 1]);
      r.op_end_s[d].assign(end_.begin() + device_offset_[d], end_.begin() + device_offset_[d + 1]);
    }
    if (pb.link_contention) {
      r.transfers = transfer_log_;
    } else {
      // Transfers: each cross-device data edge, starting when its producer ends.
      const int32_t n = static_cast<int32_t>(ops_.size());
      for (int32_t p = 0; p < n; ++p) {
        const int dp = device_[p];
        ForEachSuccessorPosition(pb, pos_, M_, ops_[p], [&](int32_t c, double bytes) {
          const int dc = device_[c];
          if (!IsTransferEdge(bytes, dp, dc)) return;
          TransferRecord t;
          t.from_device = dp;
          t.to_device = dc;
          t.consumer = schedule.ops[dc][c - device_offset_[dc]];
          t.bytes = bytes;
          t.start_s = end_[p];
          t.end_s = end_[p] + pb.transfer_s(dp, dc, bytes);
          r.transfers.push_back(t);
        });
      }
    }
  }

  if (track && !ops_.empty()) {
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
    r.critical_path.assign(path.rbegin(), path.rend());
  }
  return r;
}

}  // namespace evaluator_reference
}  // namespace octopipe
