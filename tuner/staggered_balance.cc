#include "tuner/staggered_balance.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

namespace octopipe {
namespace {

// A split as a device per layer, its stages the runs of one device, and the per-device costs
// needed to judge it; `Times` reuses its scratch so the search allocates nothing per trial.
class LayerSplit {
 public:
  LayerSplit(const ProblemBuilder& b, int M) : M_(M), P_(b.num_devices()), L_(b.num_layers()) {
    f_.assign(static_cast<size_t>(P_) * L_, 0.0);
    work_.assign(f_.size(), 0.0);
    r_.assign(f_.size(), 0.0);
    for (int d = 0; d < P_; ++d) {
      for (int l = 0; l < L_; ++l) {
        const LayerCost& c = b.layer_cost(l, d);
        f_[At(l, d)] = c.forward_s;
        r_[At(l, d)] = c.recompute_s;
        work_[At(l, d)] = b.Work(l, l, d);
      }
    }
  }

  // Per device start_d + M x load_d (-inf for a device without layers) into `t`; false (t
  // unset) when a device would hold more than `max_chunks` stages.
  bool Times(const std::vector<int>& dev, const std::vector<char>& rec, int max_chunks,
             std::vector<double>* t) {
    load_.assign(P_, 0.0);
    start_.assign(P_, -1.0);
    chunks_.assign(P_, 0);
    double f = 0;
    for (int l = 0; l < L_; ++l) {
      const int d = dev[l];
      if (l == 0 || dev[l - 1] != d) {
        if (++chunks_[d] > max_chunks) return false;
        if (start_[d] < 0) start_[d] = f;
      }
      load_[d] += work_[At(l, d)] + (rec[l] ? r_[At(l, d)] : 0.0);
      f += f_[At(l, d)];
    }
    t->assign(P_, -std::numeric_limits<double>::infinity());
    for (int d = 0; d < P_; ++d) {
      if (start_[d] >= 0) (*t)[d] = start_[d] + M_ * load_[d];
    }
    return true;
  }

 private:
  size_t At(int l, int d) const { return static_cast<size_t>(d) * L_ + l; }

  const int M_, P_, L_;
  std::vector<double> f_, r_, work_;  // [device][layer]
  std::vector<double> load_, start_;
  std::vector<int> chunks_;
};

void ToLayers(const std::vector<StageAssignment>& stages, int L, std::vector<int>* dev,
              std::vector<char>* rec) {
  dev->assign(L, 0);
  rec->assign(L, 0);
  for (const StageAssignment& s : stages) {
    for (int l = s.first_layer; l <= s.last_layer; ++l) {
      (*dev)[l] = s.device;
      (*rec)[l] = s.recompute ? 1 : 0;
    }
  }
}

std::vector<StageAssignment> Runs(const std::vector<int>& dev, const std::vector<char>& rec) {
  std::vector<StageAssignment> st;
  for (int l = 0; l < static_cast<int>(dev.size()); ++l) {
    if (st.empty() || st.back().device != dev[l]) {
      st.push_back({l, l, dev[l], rec[l] != 0});
    } else {
      st.back().last_layer = l;
      st.back().recompute = st.back().recompute || rec[l];
    }
  }
  return st;
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

// Simulated annealing over a device per layer: each trial moves one layer to another device or
// exchanges two layers of different devices, accepted by Metropolis at a temperature cooling
// geometrically from `hot` x the input's score to 1e-6 of it over `iterations` trials;
// `should_stop` is polled every `poll` trials. `judge(dev, &score)` returns the energy (+inf:
// the split is ruled out, never accepted) and sets the score the best split is kept by (the
// energy may add a tie-break to it). Returns the best device per layer seen, the input when
// nothing beat it or its own energy is not finite.
template <typename Judge>
std::vector<int> AnnealDevices(std::vector<int> dev, int P, uint64_t seed, int64_t iterations,
                               double hot, int64_t poll, Judge& judge,
                               const std::function<bool()>* should_stop) {
  double score = 0;
  double e = judge(dev, &score);
  if (!std::isfinite(e)) return dev;
  std::vector<int> best = dev;
  double best_score = score;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const int L = static_cast<int>(dev.size());
  const double t_hot = hot * score, t_cold = 1e-6 * score;
  const double cool = std::pow(t_cold / t_hot, 1.0 / static_cast<double>(iterations));
  double temp = t_hot;
  for (int64_t it = 0; it < iterations; ++it, temp *= cool) {
    if (it % poll == 0 && should_stop != nullptr && (*should_stop)()) break;
    const int i = static_cast<int>(rng() % L);
    const int old_i = dev[i];
    int j = -1;
    if (rng() & 1) {
      const int d = static_cast<int>(rng() % (P - 1));
      dev[i] = d >= old_i ? d + 1 : d;
    } else {
      j = static_cast<int>(rng() % L);
      if (dev[j] == old_i) continue;
      std::swap(dev[i], dev[j]);
    }
    const double ne = judge(dev, &score);
    if (!(ne <= e || (std::isfinite(ne) && unit(rng) < std::exp((e - ne) / temp)))) {
      if (j >= 0) {
        std::swap(dev[i], dev[j]);
      } else {
        dev[i] = old_i;
      }
      continue;
    }
    e = ne;
    if (score < best_score) {
      best_score = score;
      best = dev;
    }
  }
  return best;
}

}  // namespace

double StaggeredObjective(const ProblemBuilder& builder, const std::vector<StageAssignment>& stages,
                          int num_microbatches) {
  std::vector<int> dev;
  std::vector<char> rec;
  ToLayers(stages, builder.num_layers(), &dev, &rec);
  LayerSplit split(builder, num_microbatches);
  std::vector<double> t;
  split.Times(dev, rec, std::numeric_limits<int>::max(), &t);
  return MaxOf(t);
}

std::vector<StageAssignment> StaggeredRebalance(const ProblemBuilder& builder,
                                                std::vector<StageAssignment> stages,
                                                int num_microbatches, int max_chunks,
                                                int max_moves,
                                                const std::function<bool()>* should_stop) {
  const int P = builder.num_devices();
  const int L = builder.num_layers();
  if (stages.empty() || P < 2 || num_microbatches < 1) return stages;
  max_chunks = std::max(1, max_chunks);
  std::vector<int> dev;
  std::vector<char> rec;
  ToLayers(stages, L, &dev, &rec);
  LayerSplit split(builder, num_microbatches);
  std::vector<double> t;
  split.Times(dev, rec, std::numeric_limits<int>::max(), &t);
  if (!std::isfinite(Smooth(t, 1.0))) return stages;  // a device without layers: leave it
  std::vector<int> best = dev;
  double best_max = MaxOf(t);
  std::vector<int> trial = dev, chosen;
  std::vector<double> tt;
  for (int move = 0; move < max_moves; ++move) {
    if (should_stop != nullptr && (*should_stop)()) break;
    const double ref = MaxOf(t);
    if (!(ref > 0)) break;
    double best_smooth = Smooth(t, ref) * (1 - 1e-12);
    bool found = false;
    // `trial` equals `dev` before and after each call.
    auto consider = [&] {
      if (!split.Times(trial, rec, max_chunks, &tt)) return;
      const double s = Smooth(tt, ref);
      if (s < best_smooth) {
        best_smooth = s;
        chosen = trial;
        found = true;
      }
    };
    // One layer to another device (a boundary shift when it sits at a stage's end).
    for (int l = 0; l < L; ++l) {
      for (int d = 0; d < P; ++d) {
        if (d == dev[l]) continue;
        trial[l] = d;
        consider();
        trial[l] = dev[l];
      }
    }
    // Two layers of two devices exchanged (each single move may worsen the maximum).
    for (int i = 0; i < L; ++i) {
      for (int j = i + 1; j < L; ++j) {
        if (dev[i] == dev[j]) continue;
        std::swap(trial[i], trial[j]);
        consider();
        std::swap(trial[i], trial[j]);
      }
    }
    // Two stages' devices exchanged.
    const std::vector<StageAssignment> st = Runs(dev, rec);
    for (size_t i = 0; i < st.size(); ++i) {
      for (size_t j = i + 1; j < st.size(); ++j) {
        if (st[i].device == st[j].device) continue;
        for (int l = st[i].first_layer; l <= st[i].last_layer; ++l) trial[l] = st[j].device;
        for (int l = st[j].first_layer; l <= st[j].last_layer; ++l) trial[l] = st[i].device;
        consider();
        for (int l = st[i].first_layer; l <= st[i].last_layer; ++l) trial[l] = st[i].device;
        for (int l = st[j].first_layer; l <= st[j].last_layer; ++l) trial[l] = st[j].device;
      }
    }
    if (!found) break;
    dev = chosen;
    trial = dev;
    split.Times(dev, rec, max_chunks, &t);
    const double m = MaxOf(t);
    if (m < best_max) {
      best_max = m;
      best = dev;
    }
  }
  // The input's own runs when no move helped (its stages merged where adjacent on one device).
  return Runs(best, rec);
}


std::vector<StageAssignment> StaggeredAnneal(const ProblemBuilder& builder,
                                             const std::vector<StageAssignment>& stages,
                                             int num_microbatches, int max_chunks,
                                             uint64_t seed, int64_t iterations,
                                             const std::function<bool()>* should_stop) {
  const int P = builder.num_devices();
  const int L = builder.num_layers();
  if (stages.empty() || P < 2 || L < 2 || num_microbatches < 1 || iterations < 1) return stages;
  max_chunks = std::max(1, max_chunks);
  std::vector<int> dev;
  std::vector<char> rec;
  ToLayers(stages, L, &dev, &rec);
  LayerSplit split(builder, num_microbatches);
  std::vector<double> t;
  // The maximum decides (the score); the mean breaks its plateaus (a move that relieves the
  // second busiest device is progress towards lowering the maximum). A device without layers
  // (-inf) or too many stages rules the split out.
  auto judge = [&](const std::vector<int>& d, double* score) {
    if (!split.Times(d, rec, max_chunks, &t)) return std::numeric_limits<double>::infinity();
    double m = 0, sum = 0;
    for (double v : t) {
      if (!std::isfinite(v)) return std::numeric_limits<double>::infinity();
      m = std::max(m, v);
      sum += v;
    }
    *score = m;
    return m + 1e-3 * sum / P;
  };
  return Runs(AnnealDevices(std::move(dev), P, seed, iterations, 1e-2, 1024, judge, should_stop),
              rec);
}

std::vector<StageAssignment> AnnealSplit(
    const ProblemBuilder& builder, const std::vector<StageAssignment>& stages, int max_chunks,
    uint64_t seed, int64_t iterations,
    const std::function<double(const std::vector<StageAssignment>&)>& energy,
    const std::function<bool()>* should_stop) {
  const int P = builder.num_devices();
  const int L = builder.num_layers();
  if (stages.empty() || P < 2 || L < 2 || iterations < 1) return stages;
  max_chunks = std::max(1, max_chunks);
  std::vector<int> dev;
  std::vector<char> rec;
  ToLayers(stages, L, &dev, &rec);
  std::vector<int> chunks(P);
  // Every device keeps a layer and at most max_chunks stages.
  auto judge = [&](const std::vector<int>& d, double* score) {
    std::fill(chunks.begin(), chunks.end(), 0);
    bool ok = true;
    for (int l = 0; l < L && ok; ++l) {
      if (l == 0 || d[l - 1] != d[l]) ok = ++chunks[d[l]] <= max_chunks;
    }
    for (int k = 0; k < P && ok; ++k) ok = chunks[k] > 0;
    *score = ok ? energy(Runs(d, rec)) : std::numeric_limits<double>::infinity();
    return *score;
  };
  return Runs(AnnealDevices(std::move(dev), P, seed, iterations, 3e-3, 64, judge, should_stop),
              rec);
}

}  // namespace octopipe
