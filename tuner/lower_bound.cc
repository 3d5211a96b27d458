#include "tuner/lower_bound.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <utility>

namespace octopipe {
namespace {

// Items rounded down: class k holds count[k] items, each counted as size[k], the smallest of
// them.
struct ItemClasses {
  std::vector<double> size;
  std::vector<int> count;
};

// Groups the sorted items into runs of adjacent values; while the count vectors
// (prod_k (count_k + 1)) number more than `max_states`, merges the two adjacent groups whose
// merged spread (largest - smallest member) is least.
ItemClasses RoundDownToClasses(std::vector<double> items, int64_t max_states) {
  std::sort(items.begin(), items.end());
  std::vector<std::pair<size_t, size_t>> groups;  // [begin, end) in `items`
  for (size_t i = 0; i < items.size(); ++i) {
    if (groups.empty() || items[i] != items[groups.back().first]) {
      groups.push_back({i, i + 1});
    } else {
      groups.back().second = i + 1;
    }
  }
  auto states = [&groups] {
    double n = 1;
    for (const auto& g : groups) n *= static_cast<double>(g.second - g.first + 1);
    return n;
  };
  while (groups.size() > 1 && states() > static_cast<double>(max_states)) {
    size_t best = 0;
    for (size_t k = 1; k + 1 < groups.size(); ++k) {
      const double spread = items[groups[k + 1].second - 1] - items[groups[k].first];
      const double best_spread = items[groups[best + 1].second - 1] - items[groups[best].first];
      if (spread < best_spread) best = k;
    }
    groups[best].second = groups[best + 1].second;
    groups.erase(groups.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  ItemClasses out;
  for (const auto& g : groups) {
    out.size.push_back(items[g.first]);
    out.count.push_back(static_cast<int>(g.second - g.first));
  }
  return out;
}

// Whether every item of `c` fits into bins of the given capacities, non-increasing (exact; see
// the header). The programme fills bins in index order, so a state is (bins opened, fill of the
// last one), kept lexicographically least per multiset; with capacities non-increasing the
// extension stays monotone. Count vectors are numbered in mixed radix (digit k in
// 0..count[k]); removing one item of class k lowers the number by stride[k], so increasing
// numbers visit predecessors first.
bool Packs(const ItemClasses& c, const std::vector<double>& capacity) {
  const size_t K = c.size.size();
  const int num_bins = static_cast<int>(capacity.size());
  const int kNever = num_bins + 1;  // the items so far fit no sequence of the bins
  std::vector<int64_t> stride(K + 1, 1);
  for (size_t k = 0; k < K; ++k) stride[k + 1] = stride[k] * (c.count[k] + 1);
  const int64_t n = stride[K];
  std::vector<int> opened(n);
  std::vector<double> fill(n);
  opened[0] = 0;
  fill[0] = 0;
  std::vector<int> digit(K, 0);
  for (int64_t idx = 1; idx < n; ++idx) {
    for (size_t k = 0; k < K && ++digit[k] > c.count[k]; ++k) digit[k] = 0;
    int best_opened = kNever;
    double best_fill = 0;
    for (size_t k = 0; k < K; ++k) {
      if (digit[k] == 0) continue;
      const int64_t prev = idx - stride[k];
      int b = opened[prev];
      if (b == kNever) continue;
      double f = fill[prev] + c.size[k];
      if (b == 0 || !(f <= capacity[b - 1])) {  // open the next bin
        if (b == num_bins || !(c.size[k] <= capacity[b])) continue;
        b += 1;
        f = c.size[k];
      }
      if (b < best_opened || (b == best_opened && f < best_fill)) {
        best_opened = b;
        best_fill = f;
      }
    }
    opened[idx] = best_opened;
    fill[idx] = best_fill;
  }
  return opened[n - 1] != kNever;
}

// Longest-processing-time-first over equal bins: a feasible assignment, so an upper bound on
// the least largest bin sum.
double LptMakespan(const ItemClasses& c, int num_bins) {
  std::vector<double> load(num_bins, 0.0);
  for (size_t k = c.size.size(); k-- > 0;) {
    for (int i = 0; i < c.count[k]; ++i) {
      *std::min_element(load.begin(), load.end()) += c.size[k];
    }
  }
  return *std::max_element(load.begin(), load.end());
}

// Residual packings (Packs calls) one probe of PrefixPacker may try; more leave the probe
// undecided, counted as feasible (the bound stays certified, only less tight). The set
// partitions of 6 layers number 203.
constexpr int64_t kMaxPacksPerProbe = 256;

// Decides, for a T, whether the first q layers can be placed on the devices (every set
// partition of them, devices numbered in order of their first layer) so that the other
// layers, rounded down to `rest`, fit what is left (see PipelineAssignmentBound).
// `forward_prefix[l]` = S(l), the forward work below layer l. Residual capacity vectors
// already shown not to fit, or dominated bin by bin by one, are not packed again.
class PrefixPacker {
 public:
  PrefixPacker(const std::vector<double>& work, const std::vector<double>& forward_prefix,
               int bins, double multiplier, int q, ItemClasses rest)
      : work_(work), s_(forward_prefix), bins_(bins), mult_(multiplier), q_(q),
        rest_(std::move(rest)) {
    for (size_t k = 0; k < rest_.size.size(); ++k) rest_total_ += rest_.size[k] * rest_.count[k];
  }

  bool Feasible(double t) {
    t_ = t;
    preload_.assign(bins_, 0.0);
    first_.assign(bins_, -1);
    tried_.clear();
    packs_ = 0;
    return Place(0, 0);
  }

 private:
  double Capacity(int lowest_layer) const { return (t_ - s_[lowest_layer]) / mult_; }

  bool Place(int j, int used) {
    if (j == q_) return PackRest(used);
    const double w = work_[j];
    for (int r = 0; r < used; ++r) {
      if (preload_[r] + w <= Capacity(first_[r])) {
        preload_[r] += w;
        const bool ok = Place(j + 1, used);
        preload_[r] -= w;
        if (ok) return true;
      }
    }
    if (used < bins_ && w <= Capacity(j)) {  // layer j opens a device
      first_[used] = j;
      preload_[used] = w;
      const bool ok = Place(j + 1, used + 1);
      preload_[used] = 0;
      first_[used] = -1;
      if (ok) return true;
    }
    return false;
  }

  // The devices holding one of the first q layers have what their lowest layer's start leaves
  // after those layers; the i-th of the others has its lowest layer at q + i or above.
  bool PackRest(int used) {
    std::vector<double> residual;
    const int L = static_cast<int>(work_.size());
    for (int r = 0; r < used; ++r) residual.push_back(Capacity(first_[r]) - preload_[r]);
    for (int i = 0; used + i < bins_ && q_ + i < L; ++i) {
      residual.push_back(std::max(0.0, Capacity(q_ + i)));
    }
    std::sort(residual.begin(), residual.end(), std::greater<double>());
    if (rest_total_ == 0) return true;
    double room = 0;
    for (double x : residual) room += x;
    if (room < rest_total_) return false;
    // Every residual tried so far failed: one no larger, bin by bin, fails too.
    for (const std::vector<double>& f : tried_) {
      bool dominated = true;
      for (size_t i = 0; i < residual.size() && dominated; ++i) {
        dominated = residual[i] <= (i < f.size() ? f[i] : 0.0);
      }
      if (dominated) return false;
    }
    if (packs_ >= kMaxPacksPerProbe) return true;  // undecided: no T is wrongly ruled out
    tried_.push_back(residual);
    ++packs_;
    return Packs(rest_, residual);
  }

  const std::vector<double>& work_;
  const std::vector<double>& s_;
  const int bins_;
  const double mult_;
  const int q_;
  const ItemClasses rest_;
  double rest_total_ = 0;
  double t_ = 0;
  std::vector<double> preload_;
  std::vector<int> first_;
  std::vector<std::vector<double>> tried_;
  int64_t packs_ = 0;
};

}  // namespace

double StaggeredAssignmentBound(const std::vector<double>& items,
                                const std::vector<double>& start, double multiplier,
                                int64_t max_states) {
  const int bins = static_cast<int>(start.size());
  if (items.empty() || bins < 1 || !(multiplier > 0)) return 0;
  const ItemClasses c = RoundDownToClasses(items, std::max<int64_t>(max_states, 2));
  // Closed forms (for the real items, which only raises them): the largest item on the
  // earliest bin; the total over the time after each bin's start, sum_k max(0, T - start[k]) >=
  // multiplier x total, which at T >= start.back() reads T >= (sum_k start[k] + multiplier x
  // total) / n, and else T >= multiplier x total / n as if every bin started at 0.
  double real_total = 0, start_sum = 0;
  for (double x : items) real_total += x;
  for (double s0 : start) start_sum += s0;
  const double staggered = (start_sum + multiplier * real_total) / bins;
  double lo = std::max(start.front() + multiplier * *std::max_element(items.begin(), items.end()),
                       staggered >= start.back() ? staggered : multiplier * real_total / bins);
  // The search decides the rounded items; a lo above their optimum is simply kept.
  // Feasible: the LPT assignment on the latest-starting bins' common capacity.
  double hi = start.back() + multiplier * LptMakespan(c, bins);
  std::vector<double> capacity(bins);
  for (int probe = 0; probe < 40 && hi - lo > 1e-5 * hi; ++probe) {
    const double mid = 0.5 * (lo + hi);
    for (int k = 0; k < bins; ++k) capacity[k] = std::max(0.0, (mid - start[k]) / multiplier);
    if (Packs(c, capacity)) {
      hi = mid;
    } else {
      lo = mid;  // no assignment finishes by mid: the optimum is above it
    }
  }
  return lo;
}

double MinMaxAssignmentBound(const std::vector<double>& items, int bins, int64_t max_states) {
  if (items.empty() || bins < 1) return 0;
  if (static_cast<int>(items.size()) <= bins) {  // one item per bin is optimal
    return *std::max_element(items.begin(), items.end());
  }
  return StaggeredAssignmentBound(items, std::vector<double>(bins, 0.0), 1.0, max_states);
}

double PipelineAssignmentBound(const std::vector<double>& work,
                               const std::vector<double>& forward, int bins, double multiplier,
                               int prefix, int64_t max_states) {
  const int L = static_cast<int>(work.size());
  if (L == 0 || bins < 1 || !(multiplier > 0) || forward.size() != work.size()) return 0;
  std::vector<double> s(L + 1, 0.0);
  for (int l = 0; l < L; ++l) s[l + 1] = s[l] + std::max(0.0, forward[l]);
  const int q = std::clamp(prefix, 0, L);
  const std::vector<double> rest_items(work.begin() + q, work.end());
  PrefixPacker packer(work, s, bins, multiplier, q,
                      rest_items.empty() ? ItemClasses{}
                                         : RoundDownToClasses(rest_items, std::max<int64_t>(max_states, 2)));
  // Closed forms (as in StaggeredAssignmentBound): the largest layer on a device starting at
  // 0; the total over the time after each device's earliest possible start S(k).
  double total = 0, start_sum = 0;
  for (double x : work) total += x;
  for (int k = 0; k < bins; ++k) start_sum += s[std::min(k, L - 1)];
  const double staggered = (start_sum + multiplier * total) / bins;
  double lo = std::max(multiplier * *std::max_element(work.begin(), work.end()),
                       staggered >= s[std::min(bins, L) - 1] ? staggered : multiplier * total / bins);
  // Feasible: every layer on the device of layer 0.
  double hi = std::max(lo, multiplier * total);
  for (int probe = 0; probe < 60 && hi - lo > 1e-5 * hi; ++probe) {
    const double mid = 0.5 * (lo + hi);
    if (packer.Feasible(mid)) {
      hi = mid;
    } else {
      lo = mid;  // no placement of the layers finishes by mid
    }
  }
  return lo;
}

LowerBound PipelineLowerBound(const std::vector<LayerCost>& layers, int num_devices,
                              int num_microbatches, bool steady_state,
                              const LowerBoundOptions& options) {
  LowerBound lb;
  if (layers.empty() || num_devices < 1 || num_microbatches < 1) return lb;
  const double m = num_microbatches;
  double total_work = 0, sum_f = 0, sum_b = 0;
  for (int l = 0; l < static_cast<int>(layers.size()); ++l) {
    const LayerCost& c = layers[l];
    const double work = c.forward_s + c.backward_input_s + c.weight_grad_s;
    total_work += work;
    // sum_f and sum_b hold the layers below l here: the forward must reach l first, and the
    // backward of l must still pass through them.
    double term = m * work;
    if (!steady_state) {
      term = std::max(sum_f + m * work, sum_f + m * (c.forward_s + c.backward_input_s) + sum_b);
    }
    if (term > lb.layer_s) {
      lb.layer_s = term;
      lb.heaviest_layer = l;
    }
    sum_f += c.forward_s;
    sum_b += c.backward_input_s;
  }
  lb.work_s = total_work * m / num_devices;
  std::vector<double> layer_work;
  for (const LayerCost& c : layers) {
    layer_work.push_back(c.forward_s + c.backward_input_s + c.weight_grad_s);
  }
  // The k-th device to start (by first op) holds a layer l >= k, whose first op starts at
  // sum_{j<l} F_j >= sum_{j<k} F_j (not for the steady state).
  std::vector<double> start(num_devices, 0.0);
  if (!steady_state) {
    for (int k = 1; k < num_devices; ++k) {
      const int below = std::min<int>(k, static_cast<int>(layers.size())) - 1;
      start[k] = start[k - 1] + (below == k - 1 ? layers[below].forward_s : 0.0);
    }
  }
  if (steady_state) {
    lb.assignment_s = StaggeredAssignmentBound(layer_work, start, m);
  } else {
    std::vector<double> forward;
    for (const LayerCost& c : layers) forward.push_back(c.forward_s);
    lb.assignment_s = StaggeredAssignmentBound(layer_work, start, m);
    if (options.prefix_layers > 0) {
      lb.assignment_s = std::max(
          lb.assignment_s, PipelineAssignmentBound(layer_work, forward, num_devices, m,
                                                   options.prefix_layers, options.prefix_states));
    }
  }
  if (!steady_state) lb.chain_s = sum_f + sum_b + layers.front().weight_grad_s;
  lb.seconds = lb.work_s;
  lb.binding = "work";
  if (lb.chain_s > lb.seconds) {
    lb.seconds = lb.chain_s;
    lb.binding = "chain";
  }
  if (lb.layer_s > lb.seconds) {
    lb.seconds = lb.layer_s;
    lb.binding = "layer";
  }
  if (lb.assignment_s > lb.seconds) {
    lb.seconds = lb.assignment_s;
    lb.binding = "assignment";
  }
  return lb;
}

std::vector<LayerCost> FastestLayerCosts(const ProblemBuilder& builder) {
  std::vector<LayerCost> out(builder.num_layers());
  for (int l = 0; l < builder.num_layers(); ++l) {
    LayerCost best = builder.layer_cost(l, 0);
    for (int d = 1; d < builder.num_devices(); ++d) {
      const LayerCost& c = builder.layer_cost(l, d);
      best.forward_s = std::min(best.forward_s, c.forward_s);
      best.backward_input_s = std::min(best.backward_input_s, c.backward_input_s);
      best.weight_grad_s = std::min(best.weight_grad_s, c.weight_grad_s);
    }
    out[l] = best;
  }
  return out;
}

double SplitScheduleLowerBound(const PipelineProblem& pb) {
  const int S = pb.num_stages, P = pb.num_devices, M = pb.num_microbatches;
  if (S < 1 || P < 1 || M < 1) return 0;
  std::vector<double> d(S), c(S);
  for (int s = 0; s < S; ++s) {
    d[s] = std::max(0.0, pb.forward_s[s]);
    c[s] = std::max(0.0, pb.backward_input_s[s] - pb.overhead_s(s));
  }
  // Forward heads: sum and max of d over the stages below s.
  std::vector<double> f_sum(S, 0.0), f_max(S, 0.0);
  for (int s = 1; s < S; ++s) {
    f_sum[s] = f_sum[s - 1] + d[s - 1];
    f_max[s] = std::max(f_max[s - 1], d[s - 1]);
  }
  const double all_f = f_sum[S - 1] + d[S - 1];
  const double max_f = std::max(f_max[S - 1], d[S - 1]);
  // Backward heads: sum and max of c over the stages above s.
  std::vector<double> b_sum(S, 0.0), b_max(S, 0.0);
  for (int s = S - 2; s >= 0; --s) {
    b_sum[s] = b_sum[s + 1] + c[s + 1];
    b_max[s] = std::max(b_max[s + 1], c[s + 1]);
  }
  std::vector<std::vector<std::pair<double, double>>> jobs(P);  // (head, seconds) per device
  for (int s = 0; s < S; ++s) {
    const int dev = pb.stage_device[s];
    if (dev < 0 || dev >= P) continue;
    const double w = std::max(0.0, pb.weight_grad_s[s]);
    const double b_rate = std::max(max_f, b_max[s]);
    for (int k = 0; k < M; ++k) {
      jobs[dev].push_back({f_sum[s] + k * f_max[s], d[s]});
      const double b_head = all_f + b_sum[s] + k * b_rate;
      jobs[dev].push_back({b_head, c[s]});
      jobs[dev].push_back({b_head + c[s], w});
    }
  }
  double bound = 0;
  for (auto& j : jobs) {
    std::sort(j.begin(), j.end());
    double t = 0;
    for (const auto& [head, seconds] : j) t = std::max(t, head) + seconds;
    bound = std::max(bound, t);
  }
  return bound;
}

double LowerBoundGap(double predicted_s, const LowerBound& bound) {
  if (!(bound.seconds > 0) || !(predicted_s > bound.seconds)) return 0;
  return (predicted_s - bound.seconds) / predicted_s;
}

}  // namespace octopipe
