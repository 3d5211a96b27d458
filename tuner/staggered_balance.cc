#include "tuner/staggered_balance.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace octopipe {
namespace {

// Per device, prefix sums over layers of F and of R (recompute) on that device.
struct Prefix {
  std::vector<std::vector<double>> f, r;
};

Prefix BuildPrefix(const ProblemBuilder& b) {
  const int L = b.num_layers(), P = b.num_devices();
  Prefix p;
  p.f.assign(P, std::vector<double>(L + 1, 0.0));
  p.r.assign(P, std::vector<double>(L + 1, 0.0));
  for (int d = 0; d < P; ++d) {
    for (int l = 0; l < L; ++l) {
      p.f[d][l + 1] = p.f[d][l] + b.layer_cost(l, d).forward_s;
      p.r[d][l + 1] = p.r[d][l] + b.layer_cost(l, d).recompute_s;
    }
  }
  return p;
}

// Per-device finish bound start_d + M x load_d of a split; devices without a layer get -inf.
void DeviceTimes(const ProblemBuilder& b, const Prefix& pre, const std::vector<StageAssignment>& st,
                 int M, std::vector<double>* t) {
  const int P = b.num_devices();
  t->assign(P, -std::numeric_limits<double>::infinity());
  std::vector<double> load(P, 0.0), start(P, -1.0);
  double f = 0;
  for (const StageAssignment& s : st) {
    const int d = s.device;
    if (start[d] < 0) start[d] = f;
    load[d] += b.Work(s.first_layer, s.last_layer, d);
    if (s.recompute) load[d] += pre.r[d][s.last_layer + 1] - pre.r[d][s.first_layer];
    f += pre.f[d][s.last_layer + 1] - pre.f[d][s.first_layer];
  }
  for (int d = 0; d < P; ++d) {
    if (start[d] >= 0) (*t)[d] = start[d] + M * load[d];
  }
}

double MaxOf(const std::vector<double>& t) {
  double m = 0;
  for (double x : t) m = std::max(m, x);
  return m;
}

// sum_d (t_d / ref)^16: a smooth maximum; devices without layers count as infinitely bad so
// that no move empties a device.
double Smooth(const std::vector<double>& t, double ref) {
  double s = 0;
  for (double x : t) {
    if (!std::isfinite(x)) return std::numeric_limits<double>::infinity();
    double y = x / ref;
    y *= y;  // ^2
    y *= y;  // ^4
    y *= y;  // ^8
    s += y * y;
  }
  return s;
}

// Merges adjacent stages on one device and drops empty ones.
void Normalize(std::vector<StageAssignment>* st) {
  std::vector<StageAssignment> out;
  out.reserve(st->size());
  for (const StageAssignment& s : *st) {
    if (s.last_layer < s.first_layer) continue;
    if (!out.empty() && out.back().device == s.device) {
      out.back().last_layer = s.last_layer;
      out.back().recompute = out.back().recompute || s.recompute;
    } else {
      out.push_back(s);
    }
  }
  *st = std::move(out);
}

bool WithinChunks(const std::vector<StageAssignment>& st, int P, int max_chunks) {
  std::vector<int> n(P, 0);
  for (const StageAssignment& s : st) {
    if (++n[s.device] > max_chunks) return false;
  }
  return true;
}

}  // namespace

double StaggeredObjective(const ProblemBuilder& builder, const std::vector<StageAssignment>& stages,
                          int num_microbatches) {
  const Prefix pre = BuildPrefix(builder);
  std::vector<double> t;
  DeviceTimes(builder, pre, stages, num_microbatches, &t);
  return MaxOf(t);
}

std::vector<StageAssignment> StaggeredRebalance(const ProblemBuilder& builder,
                                                std::vector<StageAssignment> stages,
                                                int num_microbatches, int max_chunks,
                                                int max_moves,
                                                const std::function<bool()>* should_stop) {
  const int P = builder.num_devices();
  const int L = builder.num_layers();
  const int M = num_microbatches;
  if (stages.empty() || P < 2 || M < 1) return stages;
  max_chunks = std::max(1, max_chunks);
  Normalize(&stages);
  // Per layer: its device and recompute flag; the stages are the runs of one device.
  std::vector<int> dev(L, 0);
  std::vector<char> rec(L, 0);
  for (const StageAssignment& s : stages) {
    for (int l = s.first_layer; l <= s.last_layer; ++l) {
      dev[l] = s.device;
      rec[l] = s.recompute ? 1 : 0;
    }
  }
  auto runs = [&](const std::vector<int>& d) {
    std::vector<StageAssignment> st;
    for (int l = 0; l < L; ++l) {
      if (st.empty() || st.back().device != d[l]) {
        st.push_back({l, l, d[l], rec[l] != 0});
      } else {
        st.back().last_layer = l;
        st.back().recompute = st.back().recompute || rec[l];
      }
    }
    return st;
  };
  const Prefix pre = BuildPrefix(builder);
  std::vector<double> t;
  DeviceTimes(builder, pre, stages, M, &t);
  if (!std::isfinite(Smooth(t, 1.0))) return stages;  // a device without layers: leave it
  std::vector<StageAssignment> best = stages;
  double best_max = MaxOf(t);
  std::vector<int> trial_dev;
  for (int move = 0; move < max_moves; ++move) {
    if (should_stop != nullptr && (*should_stop)()) break;
    const double ref = MaxOf(t);
    if (!(ref > 0)) break;
    double best_smooth = Smooth(t, ref) * (1 - 1e-12);
    std::vector<int> chosen;
    auto consider = [&] {
      const std::vector<StageAssignment> st = runs(trial_dev);
      if (!WithinChunks(st, P, max_chunks)) return;
      std::vector<double> tt;
      DeviceTimes(builder, pre, st, M, &tt);
      const double s = Smooth(tt, ref);
      if (s < best_smooth) {
        best_smooth = s;
        chosen = trial_dev;
      }
    };
    // One layer to another device (a boundary shift when it sits at a stage's end).
    for (int l = 0; l < L; ++l) {
      for (int d = 0; d < P; ++d) {
        if (d == dev[l]) continue;
        trial_dev = dev;
        trial_dev[l] = d;
        consider();
      }
    }
    // Two layers of two devices exchanged (each single move may worsen the maximum).
    for (int i = 0; i < L; ++i) {
      for (int j = i + 1; j < L; ++j) {
        if (dev[i] == dev[j]) continue;
        trial_dev = dev;
        std::swap(trial_dev[i], trial_dev[j]);
        consider();
      }
    }
    // Two stages' devices exchanged.
    const std::vector<StageAssignment> st = runs(dev);
    for (size_t i = 0; i < st.size(); ++i) {
      for (size_t j = i + 1; j < st.size(); ++j) {
        if (st[i].device == st[j].device) continue;
        trial_dev = dev;
        for (int l = st[i].first_layer; l <= st[i].last_layer; ++l) trial_dev[l] = st[j].device;
        for (int l = st[j].first_layer; l <= st[j].last_layer; ++l) trial_dev[l] = st[i].device;
        consider();
      }
    }
    if (chosen.empty()) break;
    dev = std::move(chosen);
    stages = runs(dev);
    DeviceTimes(builder, pre, stages, M, &t);
    const double m = MaxOf(t);
    if (m < best_max) {
      best_max = m;
      best = stages;
    }
  }
  return best;
}

}  // namespace octopipe
