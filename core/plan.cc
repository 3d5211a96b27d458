#include "core/plan.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace octopipe {

std::vector<StageAssignment> EvenPartition(int num_layers, int num_stages) {
  std::vector<StageAssignment> stages(num_stages);
  const int base = num_layers / num_stages;
  const int extra = num_layers % num_stages;
  int next = 0;
  for (int s = 0; s < num_stages; ++s) {
    const int size = base + (s < extra ? 1 : 0);
    stages[s].first_layer = next;
    stages[s].last_layer = next + size - 1;
    next += size;
  }
  return stages;
}

absl::Status ValidatePlanShape(const Plan& plan, int num_layers) {
  if (plan.num_devices <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_devices must be > 0, got ", plan.num_devices));
  }
  if (plan.num_microbatches <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_microbatches must be > 0, got ", plan.num_microbatches));
  }
  if (plan.stages.empty()) return absl::InvalidArgumentError("stages: plan has no stages");
  int next = 0;
  for (int s = 0; s < plan.num_stages(); ++s) {
    const StageAssignment& st = plan.stages[s];
    const std::string p = absl::StrCat("stages[", s, "]");
    if (st.first_layer != next) {
      return absl::InvalidArgumentError(absl::StrCat(p, ".first_layer must be ", next,
                                                     " (stages cover the layers in order), got ",
                                                     st.first_layer));
    }
    if (st.last_layer < st.first_layer || st.last_layer >= num_layers) {
      return absl::InvalidArgumentError(absl::StrCat(p, ".last_layer must be in [",
                                                     st.first_layer, ", ", num_layers - 1,
                                                     "], got ", st.last_layer));
    }
    if (st.device < 0 || st.device >= plan.num_devices) {
      return absl::InvalidArgumentError(absl::StrCat(
          p, ".device must be in [0, ", plan.num_devices - 1, "], got ", st.device));
    }
    next = st.last_layer + 1;
  }
  if (next != num_layers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stages cover layers [0, ", next, ") but the model has ", num_layers, " layers"));
  }
  if (plan.vocab_shard_columns.empty()) return absl::OkStatus();
  if (!plan.vocab_parallel) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vocab_shard_columns: ", plan.vocab_shard_columns.size(),
        " entries in a plan without vocab_parallel (must be empty)"));
  }
  if (plan.vocab_shard_columns.size() != static_cast<size_t>(plan.num_devices)) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab_shard_columns has ", plan.vocab_shard_columns.size(),
                     " entries for ", plan.num_devices, " devices (one per device)"));
  }
  for (size_t d = 0; d < plan.vocab_shard_columns.size(); ++d) {
    if (plan.vocab_shard_columns[d] <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("vocab_shard_columns[", d, "] must be > 0 (every device holds a shard), got ",
                       plan.vocab_shard_columns[d]));
    }
  }
  return absl::OkStatus();
}

std::vector<int64_t> VocabShardColumns(int64_t vocab, const std::vector<double>& fractions) {
  const size_t P = fractions.size();
  std::vector<double> f(fractions);
  double total = 0;
  bool usable = true;
  for (double x : f) {
    usable = usable && std::isfinite(x) && x > 0;
    total += x;
  }
  if (!usable || !(total > 0) || !std::isfinite(total)) f.assign(P, 1.0), total = P;
  std::vector<int64_t> columns(P);
  std::vector<double> remainder(P);
  int64_t given = 0;
  for (size_t d = 0; d < P; ++d) {
    const double quota = static_cast<double>(vocab) * (f[d] / total);
    columns[d] = std::min<int64_t>(static_cast<int64_t>(std::floor(quota)), vocab);
    remainder[d] = quota - std::floor(quota);
    given += columns[d];
  }
  std::vector<size_t> order(P);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return remainder[a] > remainder[b]; });
  // Rounding may leave the floors a column over or under `vocab`: the left-over columns go to
  // the largest remainders, an excess comes off the smallest.
  for (size_t i = 0; given < vocab; i = (i + 1) % P, ++given) ++columns[order[i]];
  for (size_t i = P; given > vocab; --given) {
    do {
      i = (i + P - 1) % P;
    } while (columns[order[i]] == 0);
    --columns[order[i]];
  }
  for (size_t d = 0; d < P; ++d) {
    if (columns[d] > 0) continue;
    const size_t widest = static_cast<size_t>(
        std::max_element(columns.begin(), columns.end()) - columns.begin());
    --columns[widest];
    ++columns[d];
  }
  return columns;
}

std::vector<int64_t> EqualVocabShardColumns(int64_t vocab, int shards) {
  return VocabShardColumns(vocab, std::vector<double>(static_cast<size_t>(shards), 1.0));
}

absl::StatusOr<std::vector<int64_t>> PlanVocabShardColumns(const Plan& plan, int64_t vocab) {
  if (!plan.vocab_parallel) {
    return absl::InvalidArgumentError(
        "vocab_shard_columns: the plan does not split the head (vocab_parallel is false)");
  }
  if (plan.vocab_shard_columns.empty()) {
    if (plan.num_devices < 1 || vocab < plan.num_devices) {
      return absl::InvalidArgumentError(absl::StrCat(
          "vocab_shard_columns: equal shards need at least one vocabulary entry per device: "
          "vocabulary ", vocab, ", ", plan.num_devices, " devices"));
    }
    return EqualVocabShardColumns(vocab, plan.num_devices);
  }
  if (plan.vocab_shard_columns.size() != static_cast<size_t>(plan.num_devices)) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab_shard_columns has ", plan.vocab_shard_columns.size(),
                     " entries for ", plan.num_devices, " devices (one per device)"));
  }
  int64_t sum = 0;
  for (size_t d = 0; d < plan.vocab_shard_columns.size(); ++d) {
    if (plan.vocab_shard_columns[d] <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("vocab_shard_columns[", d, "] must be > 0, got ",
                       plan.vocab_shard_columns[d]));
    }
    sum += plan.vocab_shard_columns[d];
  }
  if (sum != vocab) {
    return absl::InvalidArgumentError(absl::StrCat("vocab_shard_columns sum to ", sum,
                                                   " but the model's vocabulary has ", vocab,
                                                   " entries"));
  }
  return plan.vocab_shard_columns;
}

}  // namespace octopipe
