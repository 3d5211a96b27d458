#include "simulator/justify.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <queue>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "simulator/pipeline_rules.h"

namespace octopipe {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The ops as nodes (R folded into its backward), their data edges with lags (v may start at
// end(u) + lag at the earliest), each device's order in the input.
class JustifyGraph {
 public:
  absl::Status Build(const PipelineProblem& pb, const Schedule& schedule);

  int size() const { return static_cast<int>(op_.size()); }
  // The input order's timing (fixed device orders, each op as early as possible): fills
  // `start`; kInvalidArgument on a cycle.
  absl::Status TimeInputOrder(std::vector<double>* start) const;
  // One serial schedule-generation pass with insertion, ops taken in increasing `key` among
  // those whose predecessors (successors when `mirrored`) are placed. Mirrored, times run
  // backwards: a node's time t there is the real interval [-(t + dur), -t]. Fills `start`
  // (in the pass's own time) and `sequence` (the order the nodes were placed).
  void Pass(bool mirrored, const std::vector<double>& key, std::vector<double>* start,
            std::vector<int>* sequence);
  // Each device's nodes by real start time (ties: earlier in `sequence`), R before its
  // backward.
  Schedule Order(const std::vector<double>& real_start, const std::vector<int>& sequence) const;

  double duration(int n) const { return dur_[n]; }

 private:
  // While building: each (kind, stage id, micro-batch)'s node (-1: none yet), and which
  // (stage, micro-batch) have an R (R is folded into its backward, so it has no node).
  struct OpSlots {
    explicit OpSlots(const PipelineProblem& pb)
        : SI(pb.num_stage_ids()),
          M(pb.num_microbatches),
          node(static_cast<size_t>(kNumOpKinds) * SI * M, -1),
          has_r(static_cast<size_t>(SI) * M, 0) {}
    int& at(OpKind k, int s, int m) { return node[(static_cast<int64_t>(k) * SI + s) * M + m]; }
    int at(OpKind k, int s, int m) const {
      return node[(static_cast<int64_t>(k) * SI + s) * M + m];
    }
    int SI, M;
    std::vector<int> node;
    std::vector<uint8_t> has_r;
  };
  // Makes a node of every op but R, in each device's order, rejecting misplaced and duplicate
  // ops; records the Rs in `slots`.
  absl::Status AddNodes(const PipelineProblem& pb, const Schedule& schedule, OpSlots* slots);
  // Completeness: every micro-batch's F, one backward per stage (B with its W, or BW), R under
  // recompute, and the vocabulary passes.
  static absl::Status CheckComplete(const PipelineProblem& pb, const OpSlots& slots);
  // The data edges with their lags, as CSR predecessor and successor lists.
  void BuildEdges(const PipelineProblem& pb, const OpSlots& slots);
  // Packs per-node predecessor lists into pred_/succ_ (CSR, same lag on both sides).
  void FillAdjacency(const std::vector<std::vector<std::pair<int, double>>>& preds);

  int P_ = 0;
  std::vector<Op> op_;            // the backward for a block
  std::vector<int> device_;
  std::vector<double> dur_;       // R + backward for a block
  std::vector<uint8_t> block_;    // 1: R, then the backward
  // CSR: preds (for forward passes) and succs (for mirrored passes), same lag on both.
  std::vector<int> pred_off_, pred_;
  std::vector<double> pred_lag_;
  std::vector<int> succ_off_, succ_;
  std::vector<double> succ_lag_;
  std::vector<std::vector<int>> input_order_;  // per device, node indices
  // Scratch for Pass.
  std::vector<std::vector<std::pair<double, double>>> busy_;
  std::vector<int> count_;
  std::vector<double> est_;
};

absl::Status JustifyGraph::Build(const PipelineProblem& pb, const Schedule& schedule) {
  const int P = pb.num_devices;
  P_ = P;
  if (schedule.num_devices() != P) {
    return absl::InvalidArgumentError(absl::StrCat("justify: schedule has ",
                                                   schedule.num_devices(), " devices, problem ",
                                                   P));
  }
  OpSlots slots(pb);
  RETURN_IF_ERROR(AddNodes(pb, schedule, &slots));
  RETURN_IF_ERROR(CheckComplete(pb, slots));
  BuildEdges(pb, slots);
  busy_.assign(P, {});
  return absl::OkStatus();
}

absl::Status JustifyGraph::AddNodes(const PipelineProblem& pb, const Schedule& schedule,
                                    OpSlots* slots) {
  const int P = pb.num_devices, S = pb.num_stages, M = pb.num_microbatches;
  input_order_.assign(P, {});
  for (int d = 0; d < P; ++d) {
    for (const Op& op : schedule.ops[d]) {
      const bool vocab = IsVocabPass(op.kind);
      if (op.stage < 0 || op.stage >= (vocab ? P : S) || op.microbatch < 0 ||
          op.microbatch >= M || (vocab && !pb.vocab_parallel) ||
          OpDevice(pb, op.kind, op.stage) != d) {
        return absl::InvalidArgumentError(
            absl::StrCat("justify: op ", OpToString(op), " does not belong on device ", d));
      }
      if (op.kind == OpKind::kR) {
        if (!pb.recompute[op.stage] || slots->has_r[op.stage * M + op.microbatch]) {
          return absl::InvalidArgumentError(
              absl::StrCat("justify: unexpected or duplicate ", OpToString(op)));
        }
        slots->has_r[op.stage * M + op.microbatch] = 1;
        continue;
      }
      int& slot = slots->at(op.kind, op.stage, op.microbatch);
      if (slot >= 0) {
        return absl::InvalidArgumentError(absl::StrCat("justify: duplicate ", OpToString(op)));
      }
      slot = static_cast<int>(op_.size());
      input_order_[d].push_back(slot);
      op_.push_back(op);
      device_.push_back(d);
      const bool block = IsBackward(op.kind) && pb.recompute[op.stage];
      block_.push_back(block ? 1 : 0);
      dur_.push_back(OpDuration(pb, op.kind, op.stage) +
                     (block ? OpDuration(pb, OpKind::kR, op.stage) : 0.0));
    }
  }
  return absl::OkStatus();
}

absl::Status JustifyGraph::CheckComplete(const PipelineProblem& pb, const OpSlots& slots) {
  const int P = pb.num_devices, S = pb.num_stages, M = pb.num_microbatches;
  for (int m = 0; m < M; ++m) {
    for (int s = 0; s < S; ++s) {
      const bool b = slots.at(OpKind::kB, s, m) >= 0;
      const bool bw = slots.at(OpKind::kBW, s, m) >= 0;
      const bool w = slots.at(OpKind::kW, s, m) >= 0;
      if (slots.at(OpKind::kF, s, m) < 0 || b == bw || b != w ||
          (pb.recompute[s] != 0) != (slots.has_r[s * M + m] != 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat("justify: stage ", s, " micro-batch ", m, " is missing ops"));
      }
    }
    if (pb.vocab_parallel) {
      for (int d = 0; d < P; ++d) {
        if (slots.at(OpKind::kS, d, m) < 0 || slots.at(OpKind::kT, d, m) < 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("justify: device ", d, " micro-batch ", m, " is missing S or T"));
        }
      }
    }
  }
  return absl::OkStatus();
}

void JustifyGraph::BuildEdges(const PipelineProblem& pb, const OpSlots& slots) {
  const int n = size();
  std::vector<std::vector<std::pair<int, double>>> preds(n);
  for (int u = 0; u < n; ++u) {
    const Op& op = op_[u];
    const int m = op.microbatch;
    auto backward = [&](int s) {
      return slots.at(OpKind::kB, s, m) >= 0 ? OpKind::kB : OpKind::kBW;
    };
    ForEachDataSuccessor(pb, op.kind, op.stage, backward, [&](OpKind k, int s, double bytes) {
      if (k == OpKind::kR) {  // F -> R: the block starts with R
        preds[slots.at(backward(s), s, m)].push_back({u, 0.0});
        return;
      }
      const int v = slots.at(k, s, m);
      double lag = EdgeDelay(pb, bytes, device_[u], device_[v]);
      if (block_[v]) lag -= OpDuration(pb, OpKind::kR, s);  // the backward part waits
      preds[v].push_back({u, lag});
    });
  }
  FillAdjacency(preds);
}

void JustifyGraph::FillAdjacency(const std::vector<std::vector<std::pair<int, double>>>& preds) {
  const int n = size();
  pred_off_.assign(n + 1, 0);
  succ_off_.assign(n + 1, 0);
  for (int v = 0; v < n; ++v) {
    pred_off_[v + 1] = pred_off_[v] + static_cast<int>(preds[v].size());
    for (const auto& [u, lag] : preds[v]) ++succ_off_[u + 1];
  }
  for (int u = 0; u < n; ++u) succ_off_[u + 1] += succ_off_[u];
  pred_.resize(pred_off_[n]);
  pred_lag_.resize(pred_off_[n]);
  succ_.resize(succ_off_[n]);
  succ_lag_.resize(succ_off_[n]);
  std::vector<int> fill(succ_off_.begin(), succ_off_.end() - 1);
  for (int v = 0; v < n; ++v) {
    int i = pred_off_[v];
    for (const auto& [u, lag] : preds[v]) {
      pred_[i] = u;
      pred_lag_[i++] = lag;
      succ_[fill[u]] = v;
      succ_lag_[fill[u]++] = lag;
    }
  }
}

absl::Status JustifyGraph::TimeInputOrder(std::vector<double>* start) const {
  const int n = size();
  std::vector<int> count(n), next_on_device(n, -1);
  std::vector<double> est(n, 0.0);
  for (int v = 0; v < n; ++v) count[v] = pred_off_[v + 1] - pred_off_[v];
  for (const std::vector<int>& order : input_order_) {
    for (size_t i = 0; i + 1 < order.size(); ++i) {
      next_on_device[order[i]] = order[i + 1];
      ++count[order[i + 1]];
    }
  }
  std::vector<int> queue;
  for (int v = 0; v < n; ++v) {
    if (count[v] == 0) queue.push_back(v);
  }
  start->assign(n, 0.0);
  size_t done = 0;
  for (; done < queue.size(); ++done) {
    const int u = queue[done];
    (*start)[u] = est[u];
    const double end = est[u] + dur_[u];
    auto relax = [&](int v, double t) {
      est[v] = std::max(est[v], t);
      if (--count[v] == 0) queue.push_back(v);
    };
    for (int i = succ_off_[u]; i < succ_off_[u + 1]; ++i) relax(succ_[i], end + succ_lag_[i]);
    if (next_on_device[u] >= 0) relax(next_on_device[u], end);
  }
  if (done != static_cast<size_t>(n)) {
    return absl::InvalidArgumentError(
        "justify: the schedule's device orders contradict its data dependencies (a deadlock)");
  }
  return absl::OkStatus();
}

void JustifyGraph::Pass(bool mirrored, const std::vector<double>& key, std::vector<double>* start,
                        std::vector<int>* sequence) {
  const int n = size();
  const std::vector<int>& in_off = mirrored ? succ_off_ : pred_off_;
  const std::vector<int>& out_off = mirrored ? pred_off_ : succ_off_;
  const std::vector<int>& out = mirrored ? pred_ : succ_;
  const std::vector<double>& out_lag = mirrored ? pred_lag_ : succ_lag_;
  count_.resize(n);
  est_.assign(n, 0.0);
  for (int v = 0; v < n; ++v) count_[v] = in_off[v + 1] - in_off[v];
  for (auto& b : busy_) b.clear();
  using Entry = std::pair<double, int>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> eligible;
  for (int v = 0; v < n; ++v) {
    if (count_[v] == 0) eligible.push({key[v], v});
  }
  start->assign(n, 0.0);
  sequence->clear();
  while (!eligible.empty()) {
    const int u = eligible.top().second;
    eligible.pop();
    sequence->push_back(u);
    // The earliest gap of the device at or after est that holds the op. Busy intervals are
    // disjoint and sorted, so their ends are sorted too.
    std::vector<std::pair<double, double>>& busy = busy_[device_[u]];
    const double d = dur_[u];
    double t = est_[u];
    auto it = std::upper_bound(busy.begin(), busy.end(), t,
                               [](double x, const std::pair<double, double>& iv) {
                                 return x < iv.second;
                               });
    for (; it != busy.end(); ++it) {
      if (t + d <= it->first) break;
      t = std::max(t, it->second);
    }
    busy.insert(it, {t, t + d});
    (*start)[u] = t;
    const double end = t + d;
    for (int i = out_off[u]; i < out_off[u + 1]; ++i) {
      const int v = out[i];
      est_[v] = std::max(est_[v], end + out_lag[i]);
      if (--count_[v] == 0) eligible.push({key[v], v});
    }
  }
}

Schedule JustifyGraph::Order(const std::vector<double>& real_start,
                             const std::vector<int>& sequence) const {
  const int n = size();
  std::vector<int> rank(n);
  for (int i = 0; i < n; ++i) rank[sequence[i]] = i;
  std::vector<std::vector<int>> by_device(P_);
  for (int v = 0; v < n; ++v) by_device[device_[v]].push_back(v);
  Schedule out;
  out.ops.resize(P_);
  for (int d = 0; d < P_; ++d) {
    std::vector<int>& nodes = by_device[d];
    std::sort(nodes.begin(), nodes.end(), [&](int a, int b) {
      return real_start[a] != real_start[b] ? real_start[a] < real_start[b] : rank[a] < rank[b];
    });
    for (int v : nodes) {
      if (block_[v]) out.ops[d].push_back(Op{OpKind::kR, op_[v].stage, op_[v].microbatch});
      out.ops[d].push_back(op_[v]);
    }
  }
  return out;
}

double Makespan(const JustifyGraph& g, const std::vector<double>& start) {
  double lo = kInf, hi = -kInf;
  for (int v = 0; v < g.size(); ++v) {
    lo = std::min(lo, start[v]);
    hi = std::max(hi, start[v] + g.duration(v));
  }
  return g.size() == 0 ? 0.0 : hi - lo;
}

}  // namespace

absl::StatusOr<JustifyResult> JustifySchedule(const PipelineProblem& pb, const Schedule& schedule,
                                              const JustifyOptions& options) {
  JustifyGraph g;
  if (absl::Status s = g.Build(pb, schedule); !s.ok()) return s;
  const int n = g.size();
  std::vector<double> real_start;
  if (absl::Status s = g.TimeInputOrder(&real_start); !s.ok()) return s;
  JustifyResult result;
  result.input_time_s = Makespan(g, real_start);
  result.iteration_time_s = result.input_time_s;
  std::vector<int> sequence(n);
  for (int v = 0; v < n; ++v) sequence[v] = v;
  // The input order, R moved before its backward (the same timing when it already is).
  std::vector<double> best_start = real_start;
  std::vector<int> best_sequence = sequence;
  std::vector<double> key(n), pass_start;
  double last = result.input_time_s;
  for (int pass = 0; pass < options.max_passes; ++pass) {
    if (options.should_stop != nullptr && (*options.should_stop)()) break;
    // Backward: latest finishing first.
    for (int v = 0; v < n; ++v) key[v] = -(real_start[v] + g.duration(v));
    g.Pass(/*mirrored=*/true, key, &pass_start, &sequence);
    for (int v = 0; v < n; ++v) key[v] = -(pass_start[v] + g.duration(v));  // real start
    // Forward: in the order of the backward pass's starts.
    g.Pass(/*mirrored=*/false, key, &real_start, &sequence);
    const double t = Makespan(g, real_start);
    ++result.passes;
    if (t < result.iteration_time_s) {
      result.iteration_time_s = t;
      best_start = real_start;
      best_sequence = sequence;
    }
    if (!(t < last * (1 - 1e-9))) break;
    last = t;
  }
  result.schedule = g.Order(best_start, best_sequence);
  return result;
}

}  // namespace octopipe
