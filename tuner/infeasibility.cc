#include "tuner/infeasibility.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tuner/partition.h"

namespace octopipe {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Worst (peak + reserve) / capacity over the devices.
double WorstMemoryRatio(const SimResult& sim, const Cluster& cluster) {
  double ratio = 0;
  for (size_t d = 0; d < sim.devices.size(); ++d) {
    ratio = std::max(ratio, (sim.devices[d].peak_memory_bytes + cluster.memory_reserve_bytes) /
                                cluster.device_hardware(static_cast<int>(d)).memory_bytes);
  }
  return ratio;
}

// The pool plus every seed placement's exact min-max partition.
std::vector<Candidate> LeastMemoryPool(const ProblemBuilder& builder,
                                       const std::vector<Candidate>& pool, int max_chunks) {
  std::vector<Candidate> out = pool;
  for (const std::vector<int>& placement :
       SeedPlacements(builder.num_devices(), builder.num_layers(), max_chunks)) {
    absl::StatusOr<std::vector<StageAssignment>> st = MinMaxPartition(builder, placement);
    if (st.ok()) out.push_back(Candidate{*st, Policy{}});
  }
  return out;
}

std::string Reason(const Cluster& cluster, const std::vector<double>& required) {
  const int P = static_cast<int>(required.size());
  int worst = 0;
  double worst_ratio = 0;
  for (int d = 0; d < P; ++d) {
    const double ratio = required[d] / cluster.device_hardware(d).memory_bytes;
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = d;
    }
  }
  return absl::StrCat(
      "the model does not fit on ", P,
      " devices: even with full recompute and 1F1B's "
      "in-flight budget, device ",
      worst, " needs ", absl::StrFormat("%.1f", required[worst] / 1e9), " GB but has ",
      absl::StrFormat("%.1f", cluster.device_hardware(worst).memory_bytes / 1e9), " GB (",
      absl::StrFormat("%.1f", cluster.memory_reserve_bytes / 1e9), " GB of it reserved)");
}

}  // namespace

absl::StatusOr<InfeasibleAnswer> ExplainInfeasible(const ProblemBuilder& builder,
                                                   const Cluster& cluster,
                                                   const ClassicOrders* classic,
                                                   int num_microbatches, bool link_contention,
                                                   int max_chunks,
                                                   const std::vector<Candidate>& pool,
                                                   const Candidate* shown) {
  CandidateEvaluator unlimited(builder, num_microbatches, link_contention, classic);
  unlimited.set_ignore_memory(true);
  Candidate least;
  Schedule least_schedule;
  absl::StatusOr<SimResult> need = absl::InternalError("tuner: no candidate could be scheduled");
  double least_ratio = kInf;
  for (const Candidate& base : LeastMemoryPool(builder, pool, max_chunks)) {
    for (bool split : {false, true}) {
      Candidate c = base;
      for (StageAssignment& s : c.stages) s.recompute = true;
      c.policy = Policy{};
      c.policy.split_backward = split;
      c.policy.inflight_scale = 1;
      Schedule schedule;
      if (!unlimited.Evaluate(c, &schedule).scheduled) continue;
      absl::StatusOr<SimResult> sim = unlimited.Simulate(c, schedule);
      if (!sim.ok()) continue;
      const double ratio = WorstMemoryRatio(*sim, cluster);
      if (ratio < least_ratio) {
        least_ratio = ratio;
        least = c;
        least_schedule = std::move(schedule);
        need = std::move(sim);
      }
    }
  }
  if (!need.ok()) return need.status();
  InfeasibleAnswer out;
  for (const DeviceResult& d : need->devices) {
    out.required_memory_bytes.push_back(d.peak_memory_bytes + cluster.memory_reserve_bytes);
  }
  out.reason = Reason(cluster, out.required_memory_bytes);
  const Candidate& show = shown != nullptr ? *shown : least;
  Schedule schedule;
  if (unlimited.Evaluate(show, &schedule).scheduled) {
    out.plan.stages = show.stages;
    out.plan.schedule = std::move(schedule);
  } else {
    out.plan.stages = least.stages;
    out.plan.schedule = std::move(least_schedule);
  }
  return out;
}

}  // namespace octopipe
