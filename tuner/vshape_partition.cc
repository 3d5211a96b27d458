#include "tuner/vshape_partition.h"

#include <algorithm>
#include <optional>
#include <utility>

namespace octopipe {

namespace {

using Grid = std::vector<std::vector<char>>;

// least[l]: layers 0..l-1 each at its fastest device, a lower bound on their work anywhere.
std::vector<double> LeastPrefixWork(const ProblemBuilder& b) {
  const int L = b.num_layers(), P = b.num_devices();
  std::vector<double> least(L + 1, 0.0);
  for (int l = 0; l < L; ++l) {
    double w = b.Work(l, l, 0);
    for (int d = 1; d < P; ++d) w = std::min(w, b.Work(l, l, d));
    least[l + 1] = least[l] + w;
  }
  return least;
}

// One level of the peel: from each interval [i, j) of `level`, device d takes [i, a) and
// [e, j) within `cap`; marks in `next` the intervals [a, e) left. False when none is left.
bool PeelDevice(const ProblemBuilder& b, const std::vector<double>& least, double cap, int d,
                const Grid& level, Grid* next) {
  const int L = b.num_layers(), P = b.num_devices();
  // For each a the feasible e form a range [e_min, j - 1] (the right stage's work falls as e
  // grows), marked in a difference row.
  std::vector<std::vector<int>> diff(L + 1, std::vector<int>(L + 2, 0));
  for (int i = 0; i < L; ++i) {
    for (int j = i + 2; j <= L; ++j) {
      if (!level[i][j]) continue;
      for (int a = i + 1; a + 1 < j && b.Work(i, a - 1, d) <= cap; ++a) {
        const double room = cap - b.Work(i, a - 1, d);
        if (b.Work(j - 1, j - 1, d) > room) continue;
        int lo_e = a + 1, hi_e = j - 1;  // smallest e with Work(e, j - 1) <= room
        while (lo_e < hi_e) {
          const int mid = (lo_e + hi_e) / 2;
          if (b.Work(mid, j - 1, d) <= room) {
            hi_e = mid;
          } else {
            lo_e = mid + 1;
          }
        }
        // The devices after d take at most `cap` each, so the layers [a, e) left to them
        // must weigh at most (P - 1 - d) cap even at their fastest: the largest such e.
        const double rest = (P - 1 - d) * cap;
        if (least[lo_e] - least[a] > rest) continue;
        int top = std::upper_bound(least.begin() + lo_e, least.begin() + j, least[a] + rest) -
                  least.begin() - 1;
        ++diff[a][lo_e];
        --diff[a][top + 1];
      }
    }
  }
  next->assign(L + 1, std::vector<char>(L + 1, 0));
  bool any = false;
  for (int a = 0; a <= L; ++a) {
    for (int e = 0, run = 0; e <= L; ++e) {
      run += diff[a][e];
      if (run > 0) {
        (*next)[a][e] = 1;
        any = true;
      }
    }
  }
  return any;
}

// Whether capacity `cap` is feasible. levels[d]: the intervals left after devices 0..d-1
// (levels[0] = the whole chain); the last device must take one of the last level's whole.
bool Peel(const ProblemBuilder& b, const std::vector<double>& least, double cap,
          std::vector<Grid>* levels) {
  const int L = b.num_layers(), P = b.num_devices();
  levels->assign(1, Grid(L + 1, std::vector<char>(L + 1, 0)));
  (*levels)[0][0][L] = 1;
  for (int d = 0; d + 1 < P; ++d) {
    Grid next;
    if (!PeelDevice(b, least, cap, d, levels->back(), &next)) return false;
    levels->push_back(std::move(next));
  }
  for (int i = 0; i < L; ++i) {
    for (int j = i + 2; j <= L; ++j) {
      if (levels->back()[i][j] && b.Work(i, j - 1, P - 1) <= cap) return true;
    }
  }
  return false;
}

// The least feasible capacity (relative 1e-4), with `levels` peeled at it; nullopt when even
// the slowest whole-chain load is infeasible.
std::optional<double> LeastCapacity(const ProblemBuilder& b, const std::vector<double>& least,
                                    std::vector<Grid>* levels) {
  const int L = b.num_layers(), P = b.num_devices();
  // Bracket: no split beats the whole chain at the fastest speed over P devices; grow the
  // capacity from there until it is feasible.
  double lo = least[L] / P, hi = lo;
  double slowest_all = 0;
  for (int d = 0; d < P; ++d) slowest_all = std::max(slowest_all, b.Work(0, L - 1, d));
  for (double step = 0.02; !Peel(b, least, hi, levels); step *= 2) {
    lo = hi;
    hi = std::min(slowest_all, lo * (1 + step));
    if (hi == slowest_all && !Peel(b, least, hi, levels)) return std::nullopt;
  }
  while (hi - lo > 1e-4 * hi) {
    const double mid = 0.5 * (lo + hi);
    (Peel(b, least, mid, levels) ? hi : lo) = mid;
  }
  Peel(b, least, hi, levels);
  return hi;
}

// Walk back: the last device's interval, then each level's interval that peels to it.
// Fills [left[d], right[d]), the interval before device d; false when none is found.
bool WalkBack(const ProblemBuilder& b, const std::vector<Grid>& levels, double cap,
              std::vector<int>* left, std::vector<int>* right) {
  const int L = b.num_layers(), P = b.num_devices();
  bool found = false;
  for (int i = 0; i < L && !found; ++i) {
    for (int j = i + 2; j <= L && !found; ++j) {
      if (levels[P - 1][i][j] && b.Work(i, j - 1, P - 1) <= cap) {
        (*left)[P - 1] = i;
        (*right)[P - 1] = j;
        found = true;
      }
    }
  }
  if (!found) return false;
  for (int d = P - 2; d >= 0; --d) {
    found = false;
    const int inner_left = (*left)[d + 1], inner_right = (*right)[d + 1];
    for (int i = 0; i < inner_left && !found; ++i) {
      for (int j = inner_right + 1; j <= L && !found; ++j) {
        if (levels[d][i][j] &&
            b.Work(i, inner_left - 1, d) + b.Work(inner_right, j - 1, d) <= cap) {
          (*left)[d] = i;
          (*right)[d] = j;
          found = true;
        }
      }
    }
    if (!found) return false;
  }
  return true;
}

// The 2P stages from each device's interval: device d's stages are its interval's two ends
// around the next device's; the last device's interval splits into its two stages where
// their larger half is least.
std::vector<StageAssignment> StagesFromIntervals(const ProblemBuilder& b,
                                                 const std::vector<int>& left,
                                                 const std::vector<int>& right) {
  const int P = b.num_devices();
  std::vector<StageAssignment> stages(2 * P);
  for (int d = 0; d < P; ++d) {
    StageAssignment& down = stages[d];
    StageAssignment& up = stages[2 * P - 1 - d];
    down.device = up.device = d;
    down.first_layer = left[d];
    up.last_layer = right[d] - 1;
    if (d + 1 < P) {
      down.last_layer = left[d + 1] - 1;
      up.first_layer = right[d + 1];
    }
  }
  const int i = left[P - 1], j = right[P - 1];
  int best_k = i + 1;
  for (int k = i + 1; k < j; ++k) {
    if (std::max(b.Work(i, k - 1, P - 1), b.Work(k, j - 1, P - 1)) <
        std::max(b.Work(i, best_k - 1, P - 1), b.Work(best_k, j - 1, P - 1))) {
      best_k = k;
    }
  }
  stages[P - 1].last_layer = best_k - 1;
  stages[P].first_layer = best_k;
  return stages;
}

}  // namespace

std::vector<StageAssignment> VShapeMinMaxPartition(const ProblemBuilder& b) {
  const int L = b.num_layers(), P = b.num_devices();
  if (P < 2 || L < 2 * P || static_cast<double>(L) * L * L * P > 2e7) return {};
  const std::vector<double> least = LeastPrefixWork(b);
  std::vector<Grid> levels;
  const std::optional<double> cap = LeastCapacity(b, least, &levels);
  if (!cap.has_value()) return {};
  std::vector<int> left(P + 1), right(P + 1);  // interval [left[d], right[d]) before device d
  if (!WalkBack(b, levels, *cap, &left, &right)) return {};
  return StagesFromIntervals(b, left, right);
}

}  // namespace octopipe
