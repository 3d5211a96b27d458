#include "simulator/zb_schedules.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "simulator/evaluator.h"

namespace octopipe {
namespace {

constexpr int kF = 0, kB = 1, kW = 2;  // categories, as upstream numbers them
// Upstream recurses while the worst bubble strictly falls; a bound keeps this finite.
constexpr int kMaxRefinements = 64;

// Per-stage inputs of both builders, from the problem.
struct StageCosts {
  std::vector<double> cost[3];  // F, B (+ R under recompute), W
  std::vector<double> mem[3];   // memory delta of F, B (+ R), W
  std::vector<double> comm_f;   // transfer into F(s) from stage s - 1 (0 for s = 0)
  std::vector<double> comm_b;   // transfer into B(s) from stage s + 1 (0 for the last)
  double max_act = 0;           // largest activation an F holds
};

StageCosts Costs(const PipelineProblem& pb) {
  const int S = pb.num_stages;
  bool has_bytes = false;
  for (int s = 0; s < S; ++s) has_bytes |= pb.activation_bytes[s] > 0;
  StageCosts c;
  for (auto& v : c.cost) v.resize(S);
  for (auto& v : c.mem) v.resize(S);
  c.comm_f.assign(S, 0.0);
  c.comm_b.assign(S, 0.0);
  for (int s = 0; s < S; ++s) {
    const bool rc = pb.recompute[s] != 0;
    c.cost[kF][s] = pb.forward_s[s];
    c.cost[kB][s] = pb.backward_input_s[s] + (rc ? pb.recompute_s[s] : 0.0);
    c.cost[kW][s] = pb.weight_grad_s[s];
    if (has_bytes) {
      const double act = pb.activation_bytes[s], act_w = pb.activation_bytes_w[s];
      const double held = rc ? pb.input_bytes[s] : act;
      c.mem[kF][s] = held;
      c.mem[kB][s] = (act - held) - (act - act_w);
      c.mem[kW][s] = -act_w;
    } else {  // one unit per in-flight micro-batch, freed by B
      c.mem[kF][s] = 1.0;
      c.mem[kB][s] = -1.0;
      c.mem[kW][s] = 0.0;
    }
    c.max_act = std::max(c.max_act, c.mem[kF][s]);
    const int d = pb.stage_device[s];
    if (s > 0 && pb.stage_device[s - 1] != d) {
      c.comm_f[s] = pb.transfer_s(pb.stage_device[s - 1], d, pb.output_bytes[s - 1]);
    }
    if (s + 1 < S && pb.stage_device[s + 1] != d) {
      c.comm_b[s] = pb.transfer_s(pb.stage_device[s + 1], d, pb.output_bytes[s]);
    }
  }
  return c;
}

// Buffers reused across a builder's variants: allocating them afresh for each variant costs
// more than building it (large vectors come from fresh, unfaulted pages).
struct Scratch {
  std::vector<double> times;
  Schedule schedule;

  void Reset(int devices, size_t num_times, size_t ops_per_device) {
    times.assign(num_times, -1.0);
    schedule.ops.resize(devices);
    for (auto& ops : schedule.ops) {
      ops.clear();
      ops.reserve(ops_per_device);
    }
  }
};

// Appends the op, preceded by R when the stage recomputes and the op is its B.
void Emit(const PipelineProblem& pb, int cat, int stage, int mb, std::vector<Op>* ops) {
  static constexpr OpKind kKinds[3] = {OpKind::kF, OpKind::kB, OpKind::kW};
  if (cat == kB && pb.recompute[stage]) ops->push_back(Op{OpKind::kR, stage, mb});
  ops->push_back(Op{kKinds[cat], stage, mb});
}

// ---------------------------------------------------------------------------------------------
// ZB-H1 / ZB-H2: upstream's `Graph.manual_order`, one stage per device.

struct HVariant {
  bool allow_bubble_before_first_b;
  bool prioritize_b;
  bool no_bubble_greedy;
};

class HBuilder {
 public:
  HBuilder(const PipelineProblem& pb, const StageCosts& c, double max_mem, HVariant v,
           Scratch* scratch)
      : pb_(pb), c_(c), v_(v), n_(pb.num_stages), nmb_(pb.num_microbatches),
        max_mem_(max_mem), f_(n_), b_(n_), w_(n_), e_(n_), m_(n_), bubble_(n_),
        t_(scratch->times), ops_(scratch->schedule.ops) {
    scratch->Reset(n_, 3 * static_cast<size_t>(n_) * nmb_, 4 * static_cast<size_t>(nmb_));
  }

  // The order is left in the scratch's schedule.
  absl::Status Run();

 private:
  double& T(int cat, int j, int mb) {
    return t_[(static_cast<size_t>(cat) * n_ + j) * nmb_ + mb];
  }
  double T(int cat, int j, int mb) const {
    return t_[(static_cast<size_t>(cat) * n_ + j) * nmb_ + mb];
  }
  double MaxBubble() const { return max_bubble_; }  // bubbles only grow: a running max
  void Put(int j, int cat);
  void WarmUp();
  // W ops until `mem` more fits on stage j; kResourceExhausted when no W is left to free any.
  absl::Status MakeRoom(int j, double mem);
  // Fills stage j's wait for a dependency arriving at `arrive` with W ops (upstream's rule).
  void FillBefore(int j, double arrive);

  const PipelineProblem& pb_;
  const StageCosts& c_;
  const HVariant v_;
  const int n_, nmb_;
  const double max_mem_;
  std::vector<int> f_, b_, w_;
  std::vector<double> e_, m_, bubble_;
  std::vector<double>& t_;  // end times, [cat][stage][micro-batch], -1 until placed
  std::vector<std::vector<Op>>& ops_;
  bool broken_ = false;
  double max_bubble_ = 0;
};

void HBuilder::Put(int j, int cat) {
  // With unequal per-stage costs a variant can leave a stage short of forwards (a later
  // stage's warm-up outruns it); it then places a B before its F and is discarded (upstream,
  // which reads unplaced ops as ending at 0, would emit a broken order).
  if (cat == kB && b_[j] >= f_[j]) broken_ = true;
  int& count = cat == kF ? f_[j] : cat == kB ? b_[j] : w_[j];
  const int mb = count;
  const double cost = c_.cost[cat][j];
  const double no_bubble = e_[j] + cost;
  double end = no_bubble;
  if (cat == kF && j > 0) end = std::max(end, T(kF, j - 1, mb) + c_.comm_f[j] + cost);
  if (cat == kB && j + 1 < n_) end = std::max(end, T(kB, j + 1, mb) + c_.comm_b[j] + cost);
  if (f_[j] > 0) {
    bubble_[j] += end - no_bubble;
    max_bubble_ = std::max(max_bubble_, bubble_[j]);
  }
  e_[j] = end;
  T(cat, j, mb) = end;
  m_[j] += c_.mem[cat][j];
  ++count;
  Emit(pb_, cat, j, mb, &ops_[j]);
}

absl::Status HBuilder::MakeRoom(int j, double mem) {
  while (m_[j] + mem > max_mem_) {
    if (w_[j] >= b_[j]) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "stage ", j, ": memory limit ", max_mem_, " leaves no room and no W is pending"));
    }
    Put(j, kW);
  }
  return absl::OkStatus();
}

void HBuilder::FillBefore(int j, double arrive) {
  while (w_[j] < b_[j] && e_[j] + c_.cost[kW][j] <= arrive) Put(j, kW);
  if (w_[j] < b_[j] && e_[j] < arrive) {
    if (arrive - e_[j] <= MaxBubble() - bubble_[j]) {
      if (v_.no_bubble_greedy) Put(j, kW);
    } else {
      Put(j, kW);
    }
  }
}

// Micro-batch 0: every stage's first F, then as many extra forwards per stage as fit before
// its first B can start (memory permitting), non-increasing along the pipeline, then B0.
void HBuilder::WarmUp() {
  for (int j = 0; j < n_; ++j) Put(j, kF);
  std::vector<int> req(n_, 0);
  double last_t = 0;
  for (int j = n_ - 1; j >= 0; --j) {
    if (j == n_ - 1) {
      last_t = T(kF, j, 0) + c_.cost[kB][j];
      continue;
    }
    double mem = m_[j], cost = e_[j];
    const double comm = c_.comm_b[j];
    while (f_[j] + req[j] < nmb_ && mem + c_.mem[kF][j] <= max_mem_) {
      if (v_.allow_bubble_before_first_b) {
        if (cost + c_.cost[kF][j] > last_t + comm) break;
      } else if (cost >= last_t + comm) {
        break;
      }
      mem += c_.mem[kF][j];
      cost += c_.cost[kF][j];
      ++req[j];
    }
    last_t = std::max(cost, last_t + comm) + c_.cost[kB][j];
  }
  for (int j = 1; j < n_; ++j) {
    while (req[j] > 0 && req[j] >= req[j - 1] && f_[j] + req[j] < nmb_) --req[j];
  }
  for (int j = 0; j < n_; ++j) {
    for (int k = 0; k < req[j]; ++k) Put(j, kF);
  }
  for (int j = n_ - 1; j >= 0; --j) Put(j, kB);
}

absl::Status HBuilder::Run() {
  WarmUp();
  for (int i = 1; i < nmb_; ++i) {
    if (broken_) return absl::InternalError("zb-h: a variant placed a B before its F");
    std::vector<int> req(n_, 0);
    for (int j = 0; j < n_; ++j) {
      if (f_[j] >= nmb_) continue;
      if (v_.prioritize_b && j + 1 < n_ && f_[j] >= f_[j + 1] + 2) {
        const double next_plus_fw =
            e_[j + 1] + c_.cost[kF][j + 1] + c_.cost[kB][j + 1] + c_.comm_b[j];
        if (e_[j] >= next_plus_fw) continue;
        double w_cost = 0, mem_with_w = m_[j] + c_.mem[kF][j];
        for (int k = 0; mem_with_w > max_mem_ && w_[j] + k < b_[j]; ++k) {
          w_cost += c_.cost[kW][j];
          mem_with_w += c_.mem[kW][j];
        }
        if (e_[j] + c_.cost[kF][j] + w_cost <= next_plus_fw) {
          req[j] = 1;
          continue;
        }
        if (next_plus_fw - e_[j] <= MaxBubble() - bubble_[j]) continue;
      }
      req[j] = 1;
    }
    for (int j = n_ - 2; j >= 0; --j) req[j] = std::min(req[j], req[j + 1]);
    for (int j = 0; j < n_; ++j) {
      if (req[j] == 0) continue;
      if (absl::Status st = MakeRoom(j, c_.mem[kF][j]); !st.ok()) return st;
      if (j > 0) FillBefore(j, T(kF, j - 1, f_[j]) + c_.comm_f[j]);
      Put(j, kF);
    }
    for (int j = n_ - 1; j >= 0; --j) {
      if (absl::Status st = MakeRoom(j, c_.mem[kB][j]); !st.ok()) return st;
      if (j + 1 < n_) FillBefore(j, T(kB, j + 1, i) + c_.comm_b[j]);
      if (j == 0 && f_[j] == nmb_) {
        while (w_[j] < b_[j]) Put(j, kW);
      }
      Put(j, kB);
    }
  }
  for (int j = 0; j < n_; ++j) {
    while (w_[j] < nmb_) Put(j, kW);
  }
  if (broken_) return absl::InternalError("zb-h: a variant placed a B before its F");
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// ZB-V: upstream's `try_v_schedule`. Device i holds chunk 0 = stage i and chunk 1 = stage
// 2P - 1 - i. As upstream indexes them, F chunk k is model chunk k, while B and W chunk k are
// model chunk 1 - k (B chunk 0 is the backward that starts at the loss, on device 0).

struct VVariant {
  bool fill_f;
  bool fill_b;
};

class VBuilder {
 public:
  VBuilder(const PipelineProblem& pb, const StageCosts& c, double max_mem, VVariant v,
           const std::vector<double>& approved, Scratch* scratch)
      : pb_(pb), c_(c), v_(v), n_(pb.num_devices), nmb_(pb.num_microbatches),
        max_mem_(max_mem), approved_(approved), cur_(n_), mem_(n_), bubble_(n_),
        count_(n_, std::array<int, 6>{}), pending_w_(n_), end_(scratch->times),
        ops_(scratch->schedule.ops) {
    scratch->Reset(n_, 6 * static_cast<size_t>(n_) * nmb_, 8 * static_cast<size_t>(nmb_));
    max_approved_ = approved_.empty() ? -1.0
                                      : *std::max_element(approved_.begin(), approved_.end());
  }

  absl::Status Run();
  double MaxBubble() const { return MaxStageBubble(-1); }
  const std::vector<double>& bubbles() const { return bubble_; }

 private:
  int Stage(int cat, int chunk, int i) const {
    const int model_chunk = cat == kF ? chunk : 1 - chunk;
    return model_chunk == 0 ? i : 2 * n_ - 1 - i;
  }
  double& End(int cat, int chunk, int i, int mb) {
    return end_[((static_cast<size_t>(cat) * 2 + chunk) * n_ + i) * nmb_ + mb];
  }
  double End(int cat, int chunk, int i, int mb) const {
    return end_[((static_cast<size_t>(cat) * 2 + chunk) * n_ + i) * nmb_ + mb];
  }
  double Cost(int cat, int chunk, int i) const { return c_.cost[cat][Stage(cat, chunk, i)]; }
  double Mem(int cat, int chunk, int i) const { return c_.mem[cat][Stage(cat, chunk, i)]; }
  // Transfer into (cat, chunk) on device i from its neighbour device.
  double Comm(int cat, int chunk, int i) const {
    const int s = Stage(cat, chunk, i);
    return cat == kF ? c_.comm_f[s] : c_.comm_b[s];
  }
  double MaxStageBubble(int stage) const;
  absl::Status Put(int cat, int chunk, int i);
  absl::Status PutW(int i);
  // Upstream's gap filling before (cat, chunk) on device i whose cross-device input is the
  // op with end time `dep_end` (< 0: none); `fill` enables its bubble-budget W.
  absl::Status FillBefore(int cat, int chunk, int i, double dep_end, bool fill);
  absl::Status WarmUp();
  absl::Status Round();

  const PipelineProblem& pb_;
  const StageCosts& c_;
  const VVariant v_;
  const int n_, nmb_;
  const double max_mem_;
  const std::vector<double> approved_;
  double max_approved_ = -1;
  double max_bubble_ = 0;  // running max of bubble_ (bubbles only grow)
  std::vector<double> cur_, mem_, bubble_;
  std::vector<std::array<int, 6>> count_;
  std::vector<std::deque<int>> pending_w_;  // chunk of each pending W, FIFO
  std::vector<double>& end_;  // [cat][chunk][device][micro-batch], -1 until placed
  std::vector<std::vector<Op>>& ops_;
};

double VBuilder::MaxStageBubble(int stage) const {
  double best = max_bubble_;
  if (stage >= 0 && !approved_.empty()) {
    best = std::max(best, max_approved_ - approved_[stage]);
  }
  return best;
}

absl::Status VBuilder::Put(int cat, int chunk, int i) {
  int& cnt = count_[i][cat * 2 + chunk];
  const int mb = cnt;
  if (mb >= nmb_) return absl::InternalError("v-schedule: too many ops of one kind");
  if (mem_[i] + Mem(cat, chunk, i) > max_mem_ * (1 + 1e-9)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("device ", i, ": over the v-schedule memory limit ", max_mem_));
  }
  const double cost = Cost(cat, chunk, i);
  const double no_bubble = cur_[i] + cost;
  double end = no_bubble;
  if (cat < kW) {
    const bool up = chunk == 1;  // depends on device i + 1, else on device i - 1
    const int nb = up ? i + 1 : i - 1;
    if (nb >= 0 && nb < n_) {
      const double dep = End(cat, chunk, nb, mb);
      if (dep < 0) return absl::InternalError("v-schedule: dependency not placed");
      end = std::max(end, dep + Comm(cat, chunk, i) + cost);
    }
  }
  if (count_[i][0] > 0) {
    bubble_[i] += end - no_bubble;
    max_bubble_ = std::max(max_bubble_, bubble_[i]);
  }
  End(cat, chunk, i, mb) = end;
  cur_[i] = end;
  mem_[i] += Mem(cat, chunk, i);
  ++cnt;
  if (cat == kB) pending_w_[i].push_back(chunk);
  Emit(pb_, cat, Stage(cat, chunk, i), mb, &ops_[i]);
  return absl::OkStatus();
}

absl::Status VBuilder::PutW(int i) {
  if (pending_w_[i].empty()) return absl::ResourceExhaustedError("v-schedule: no W pending");
  const int chunk = pending_w_[i].front();
  pending_w_[i].pop_front();
  return Put(kW, chunk, i);
}

absl::Status VBuilder::FillBefore(int cat, int chunk, int i, double dep_end, bool fill) {
  if (dep_end < 0) return absl::OkStatus();
  const double comm = Comm(cat, chunk, i);
  while (!pending_w_[i].empty() && dep_end + comm >= cur_[i] + Cost(kW, pending_w_[i].front(), i)) {
    if (absl::Status st = PutW(i); !st.ok()) return st;
  }
  if (!pending_w_[i].empty() && dep_end + comm - cur_[i] > MaxStageBubble(i) - bubble_[i] &&
      fill) {
    return PutW(i);
  }
  return absl::OkStatus();
}

absl::Status VBuilder::WarmUp() {
  for (int i = 0; i < n_; ++i) {
    if (absl::Status st = Put(kF, 0, i); !st.ok()) return st;
  }
  for (int i = n_ - 1; i >= 0; --i) {
    if (i < n_ - 1) {
      const double arrive = End(kF, 1, i + 1, 0) + Comm(kF, 1, i);
      while (mem_[i] + Mem(kF, 0, i) * (2 + i * 2) <= max_mem_ &&
             cur_[i] + Cost(kF, 0, i) <= arrive && count_[i][0] < nmb_) {
        for (int j = 0; j <= i; ++j) {
          if (absl::Status st = Put(kF, 0, j); !st.ok()) return st;
        }
      }
    }
    if (absl::Status st = Put(kF, 1, i); !st.ok()) return st;
  }
  int iter_chunk = 0;
  for (int i = 1; i < n_; ++i) {
    auto& c = count_[i];
    auto& p = count_[i - 1];
    while (c[0] + c[1] < p[0] + p[1] || (c[1] <= p[1] && p[1] < nmb_)) {
      for (int j = n_ - 1; j >= i; --j) {
        if (count_[j][iter_chunk] < nmb_) {
          if (absl::Status st = Put(kF, iter_chunk, j); !st.ok()) return st;
        }
      }
      iter_chunk = 1 - iter_chunk;
    }
  }
  return absl::OkStatus();
}

// One B per device (chunk chosen by what is ready), then at most one F per device.
absl::Status VBuilder::Round() {
  for (int i = 0; i < n_; ++i) {
    while (mem_[i] + std::max(Mem(kB, 0, i), Mem(kB, 1, i)) > max_mem_) {
      if (absl::Status st = PutW(i); !st.ok()) return st;
    }
  }
  std::vector<int> b0, b1;
  for (int i = 0; i < n_; ++i) {
    if (count_[i][3] >= count_[i][2]) {
      b0.push_back(i);
    } else if (i == n_ - 1 || End(kB, 1, i + 1, count_[i][3]) >= 0 || count_[i][2] >= nmb_) {
      b1.push_back(i);
    } else {
      b0.push_back(i);
    }
  }
  std::vector<std::pair<int, int>> order;
  for (auto it = b1.rbegin(); it != b1.rend(); ++it) order.push_back({*it, 1});
  for (int i : b0) order.push_back({i, 0});
  for (auto [i, chunk] : order) {
    double dep = -1;
    if (chunk == 1 && i < n_ - 1) dep = End(kB, 1, i + 1, count_[i][3]);
    if (chunk == 0 && i > 0) dep = End(kB, 0, i - 1, count_[i][2]);
    if (absl::Status st = FillBefore(kB, chunk, i, dep, chunk == 1 || v_.fill_b); !st.ok()) {
      return st;
    }
    if (absl::Status st = Put(kB, chunk, i); !st.ok()) return st;
  }
  for (int i = 0; i < n_; ++i) {
    auto& c = count_[i];
    if (c[1] >= nmb_) continue;
    int item = -1;
    if (c[1] >= c[0]) {
      item = 0;
    } else if (i == n_ - 1 || End(kF, 1, i + 1, c[1]) >= 0) {
      item = 1;
    } else if (c[0] < nmb_ && (i == 0 || End(kF, 0, i - 1, c[0]) >= 0)) {
      item = 0;
    }
    if (item < 0) continue;
    while (mem_[i] + Mem(kF, item, i) > max_mem_) {
      if (absl::Status st = PutW(i); !st.ok()) return st;
    }
    double dep = -1;
    if (item == 0 && i > 0) dep = End(kF, 0, i - 1, c[0]);
    if (item == 1 && i < n_ - 1) dep = End(kF, 1, i + 1, c[1]);
    if (absl::Status st = FillBefore(kF, item, i, dep, v_.fill_f); !st.ok()) return st;
    if (absl::Status st = Put(kF, item, i); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status VBuilder::Run() {
  if (absl::Status st = WarmUp(); !st.ok()) return st;
  for (int r = 0; r < 2 * nmb_; ++r) {
    if (absl::Status st = Round(); !st.ok()) return st;
  }
  for (int i = 0; i < n_; ++i) {
    while (!pending_w_[i].empty()) {
      if (absl::Status st = PutW(i); !st.ok()) return st;
    }
  }
  return absl::OkStatus();
}

// The cost sets each builder runs with: the problem's own per-stage costs and transfer times;
// upstream's runtime reduction (every stage at the median stage's F, B, W, one median
// transfer time), which its heuristics were tuned on; and unit costs (upstream's schedule
// before profiling). Memory is the problem's in all three.
std::vector<StageCosts> CostSets(const StageCosts& own) {
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  std::vector<StageCosts> sets = {own, own, own};
  std::vector<double> comm;
  for (double c : own.comm_f) {
    if (c > 0) comm.push_back(c);
  }
  const double mid_comm = median(comm);
  for (int cat = 0; cat < 3; ++cat) {
    const double mid = median(own.cost[cat]);
    for (double& x : sets[1].cost[cat]) x = mid;
    for (double& x : sets[2].cost[cat]) x = 1.0;
  }
  for (auto* v : {&sets[1].comm_f, &sets[1].comm_b}) {
    for (double& x : *v) x = x > 0 ? mid_comm : 0.0;
  }
  for (auto* v : {&sets[2].comm_f, &sets[2].comm_b}) {
    for (double& x : *v) x = 0.0;
  }
  return sets;
}

// FNV-1a over the ops: variants often build the same order, which is evaluated once.
uint64_t Fingerprint(const Schedule& schedule) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t x) { h = (h ^ x) * 1099511628211ull; };
  for (const auto& ops : schedule.ops) {
    mix(ops.size());
    for (const Op& op : ops) {
      mix((static_cast<uint64_t>(op.kind) << 56) ^ (static_cast<uint64_t>(op.stage) << 28) ^
          static_cast<uint64_t>(op.microbatch));
    }
  }
  return h;
}

// Keeps `schedule` in *best when the Evaluator accepts it (complete, deadlock-free) and its
// longest per-device span, upstream's objective, is strictly the smallest so far. `seen`
// holds the fingerprints of the orders already considered.
void Consider(const PipelineProblem& problem, const Schedule& schedule, Evaluator* evaluator,
              std::vector<uint64_t>* seen, absl::StatusOr<ZbScheduleResult>* best) {
  const uint64_t fp = Fingerprint(schedule);
  if (std::find(seen->begin(), seen->end(), fp) != seen->end()) return;
  seen->push_back(fp);
  absl::StatusOr<Evaluator::Summary> sum = evaluator->EvaluateSummary(problem, schedule);
  if (!sum.ok()) return;
  if (best->ok() && !(sum->steady_state_iteration_time_s < (*best)->longest_span_s - 1e-12)) {
    return;
  }
  *best = ZbScheduleResult{schedule, sum->steady_state_iteration_time_s,
                           sum->iteration_time_s};
}

}  // namespace

absl::StatusOr<ZbScheduleResult> ZeroBubbleH(const PipelineProblem& problem, int pending) {
  const int P = problem.num_devices;
  if (pending < 1) {
    return absl::InvalidArgumentError(absl::StrCat("pending must be >= 1, got ", pending));
  }
  if (problem.num_stages != P) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_stages must equal num_devices (", P, ") for zb-h, got ", problem.num_stages));
  }
  for (int s = 0; s < P; ++s) {
    if (problem.stage_device[s] != s) {
      return absl::InvalidArgumentError(absl::StrCat("stage_device[", s, "] must be ", s,
                                                     " for zb-h, got ",
                                                     problem.stage_device[s]));
    }
  }
  const StageCosts own = Costs(problem);
  const double max_mem = pending * P * own.max_act;
  absl::StatusOr<ZbScheduleResult> best =
      absl::ResourceExhaustedError(absl::StrCat(
          "zb-h: no variant fits the memory limit of ", pending, " x ", P, " activations"));
  Evaluator evaluator;
  Scratch scratch;
  std::vector<uint64_t> seen;
  for (const StageCosts& c : CostSets(own)) {
    for (bool allow : {true, false}) {
      for (bool prio : {true, false}) {
        for (bool greedy : {true, false}) {
          HBuilder h(problem, c, max_mem, HVariant{allow, prio, greedy}, &scratch);
          if (!h.Run().ok()) continue;
          Consider(problem, scratch.schedule, &evaluator, &seen, &best);
        }
      }
    }
  }
  return best;
}

absl::StatusOr<ZbScheduleResult> ZeroBubbleV(const PipelineProblem& problem) {
  const int P = problem.num_devices;
  if (problem.num_stages != 2 * P) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_stages must be 2 x num_devices (", 2 * P, ") for zb-v, got ", problem.num_stages));
  }
  for (int s = 0; s < 2 * P; ++s) {
    const int want = s < P ? s : 2 * P - 1 - s;
    if (problem.stage_device[s] != want) {
      return absl::InvalidArgumentError(absl::StrCat("stage_device[", s, "] must be ", want,
                                                     " for zb-v (V shape), got ",
                                                     problem.stage_device[s]));
    }
  }
  const StageCosts own = Costs(problem);
  // Upstream's limit is 1F1B's memory: 2P chunk activations. Its rules (the warm-up and the
  // F-after-B rounds) fit that exactly when every chunk holds the same activation; with unequal
  // chunks (a heavy MoE chunk next to a light one) every variant can run out of W to free. Then
  // the limit is raised in steps, so ZB-V stays a baseline (with more memory, which only helps
  // it) rather than vanishing from the comparison.
  absl::StatusOr<ZbScheduleResult> best = absl::ResourceExhaustedError(absl::StrCat(
      "zb-v: no variant fits the memory limit of 2 x ", P, " activations (nor 2x that)"));
  Evaluator evaluator;
  Scratch scratch;
  std::vector<uint64_t> seen;
  for (double raise : {1.0, 1.25, 1.5, 2.0}) {
    const double max_mem = raise * 2.0 * P * own.max_act;
    for (const StageCosts& c : CostSets(own)) {
      for (bool fill_b : {true, false}) {
        for (bool fill_f : {true, false}) {
          // Upstream re-runs with the last run's bubbles approved while that lowers the worst
          // one, and keeps the last improving run.
          std::vector<double> approved;
          double variant_bubble = std::numeric_limits<double>::infinity();
          Schedule variant;
          for (int refine = 0; refine < kMaxRefinements; ++refine) {
            VBuilder v(problem, c, max_mem, VVariant{fill_f, fill_b}, approved, &scratch);
            if (!v.Run().ok()) break;
            const double bubble = v.MaxBubble();
            if (!(bubble < variant_bubble)) break;
            variant_bubble = bubble;
            approved = v.bubbles();
            variant.ops.swap(scratch.schedule.ops);  // the scratch keeps the old buffers
          }
          if (!variant.ops.empty()) Consider(problem, variant, &evaluator, &seen, &best);
        }
      }
    }
    if (best.ok()) break;
  }
  return best;
}

}  // namespace octopipe
