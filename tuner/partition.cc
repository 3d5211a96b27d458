#include "tuner/partition.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"

namespace octopipe {

absl::StatusOr<std::vector<StageAssignment>> MinMaxPartition(
    const ProblemBuilder& builder, const std::vector<int>& stage_device) {
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
    best[0][l] = builder.Work(0, l - 1, stage_device[0]);
    cut[0][l] = 0;
  }
  for (int s = 1; s < S; ++s) {
    const int dev = stage_device[s];
    // Stage s ends at l (exclusive); leaves at least one layer per later stage.
    for (int l = s + 1; l <= L - (S - 1 - s); ++l) {
      double b = kInf;
      int c = -1;
      // Scan the start k downwards: the stage's work grows as k falls, so once it alone
      // exceeds the best found, earlier starts cannot help.
      for (int k = l - 1; k >= s; --k) {
        const double work = builder.Work(k, l - 1, dev);
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

double MaxStageWork(const ProblemBuilder& builder, const std::vector<StageAssignment>& stages) {
  double m = 0;
  for (const StageAssignment& st : stages) {
    m = std::max(m, builder.Work(st.first_layer, st.last_layer, st.device));
  }
  return m;
}

}  // namespace octopipe
