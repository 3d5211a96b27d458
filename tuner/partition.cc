#include "tuner/partition.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"

namespace octopipe {

absl::StatusOr<std::vector<StageAssignment>> MinMaxPartition(
    const ProblemBuilder& builder, const std::vector<int>& stage_device) {
  return WeightedMinMaxPartition(builder, stage_device,
                                 std::vector<double>(builder.num_devices(), 1.0));
}

absl::StatusOr<std::vector<StageAssignment>> WeightedMinMaxPartition(
    const ProblemBuilder& builder, const std::vector<int>& stage_device,
    const std::vector<double>& device_weight) {
  const int L = builder.num_layers();
  const int S = static_cast<int>(stage_device.size());
  if (S < 1 || S > L) {
    return absl::InvalidArgumentError(
        absl::StrCat("partition: ", S, " stages cannot split ", L, " layers (need 1..", L, ")"));
  }
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // best[s][l]: the smallest possible max work when stages 0..s cover layers [0, l).
  // cut[s][l]: where stage s starts in that optimum.
  std::vector<std::vector<double>> best(S, std::vector<double>(L + 1, kInf));
  std::vector<std::vector<int>> cut(S, std::vector<int>(L + 1, -1));
  for (int l = 1; l <= L - (S - 1); ++l) {
    best[0][l] = device_weight[stage_device[0]] * builder.Work(0, l - 1, stage_device[0]);
    cut[0][l] = 0;
  }
  for (int s = 1; s < S; ++s) {
    const int dev = stage_device[s];
    const double weight = device_weight[dev];
    // Stage s ends at l (exclusive); leaves at least one layer per later stage.
    for (int l = s + 1; l <= L - (S - 1 - s); ++l) {
      double b = kInf;
      int c = -1;
      // Scan the start k downwards: the stage's work grows as k falls, so once it alone
      // exceeds the best found, earlier starts cannot help.
      for (int k = l - 1; k >= s; --k) {
        const double work = weight * builder.Work(k, l - 1, dev);
        if (work >= b) break;
        const double v = std::max(best[s - 1][k], work);
        if (v < b) {
          b = v;
          c = k;
        }
      }
      best[s][l] = b;
      cut[s][l] = c;
    }
  }
  std::vector<StageAssignment> stages(S);
  int end = L;
  for (int s = S - 1; s >= 0; --s) {
    const int start = cut[s][end];
    stages[s].first_layer = start;
    stages[s].last_layer = end - 1;
    stages[s].device = stage_device[s];
    end = start;
  }
  return stages;
}

std::vector<StageAssignment> BalanceDeviceLoads(const ProblemBuilder& builder,
                                                std::vector<StageAssignment> stages,
                                                const std::vector<double>& device_weight) {
  const int S = static_cast<int>(stages.size());
  const int P = builder.num_devices();
  std::vector<double> load(P, 0.0);
  auto stage_work = [&](const StageAssignment& st) {
    return device_weight[st.device] * builder.Work(st.first_layer, st.last_layer, st.device);
  };
  for (const StageAssignment& st : stages) load[st.device] += stage_work(st);
  double mean = 0;
  for (double l : load) mean += l;
  mean /= P;
  if (!(mean > 0)) return stages;
  auto term = [&](double l) {
    const double x = l / mean;
    const double x2 = x * x, x4 = x2 * x2;
    return x4 * x4;
  };
  for (int iter = 0; iter < 100000; ++iter) {
    double best_gain = 1e-12;
    int best_k = -1, best_delta = 0;
    // Boundary k sits between stage k-1 and stage k; delta -1 moves the last layer of k-1 into
    // k, +1 moves the first layer of k into k-1.
    for (int k = 1; k < S; ++k) {
      const StageAssignment& a = stages[k - 1];
      const StageAssignment& b = stages[k];
      if (a.device == b.device) continue;
      for (int delta : {-1, 1}) {
        if (delta < 0 && a.first_layer == a.last_layer) continue;
        if (delta > 0 && b.first_layer == b.last_layer) continue;
        const int moved = delta < 0 ? a.last_layer : b.first_layer;
        const double wa = device_weight[a.device] * builder.Work(moved, moved, a.device);
        const double wb = device_weight[b.device] * builder.Work(moved, moved, b.device);
        const double la = load[a.device], lb = load[b.device];
        const double na = delta < 0 ? la - wa : la + wa;
        const double nb = delta < 0 ? lb + wb : lb - wb;
        const double gain = term(la) + term(lb) - term(na) - term(nb);
        if (gain > best_gain) {
          best_gain = gain;
          best_k = k;
          best_delta = delta;
        }
      }
    }
    if (best_k < 0) break;
    StageAssignment& a = stages[best_k - 1];
    StageAssignment& b = stages[best_k];
    load[a.device] -= stage_work(a);
    load[b.device] -= stage_work(b);
    if (best_delta < 0) {
      --a.last_layer;
      --b.first_layer;
    } else {
      ++a.last_layer;
      ++b.first_layer;
    }
    load[a.device] += stage_work(a);
    load[b.device] += stage_work(b);
  }
  return stages;
}

double MaxStageWork(const ProblemBuilder& builder, const std::vector<StageAssignment>& stages) {
  double m = 0;
  for (const StageAssignment& st : stages) {
    m = std::max(m, builder.Work(st.first_layer, st.last_layer, st.device));
  }
  return m;
}

}  // namespace octopipe
