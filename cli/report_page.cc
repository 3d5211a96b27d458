#include "cli/report_page.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/table.h"
#include "core/schedule.h"
#include "core/status_macros.h"
#include "simulator/problem_builder.h"

namespace octopipe::cli {

std::string StageKinds(const ModelGraph& model, const StageAssignment& stage) {
  std::vector<std::pair<std::string, int>> counts;
  for (int l = stage.first_layer; l <= stage.last_layer; ++l) {
    const std::string k(LayerKindName(model.layers[l].kind));
    auto it = std::find_if(counts.begin(), counts.end(), [&](auto& p) { return p.first == k; });
    if (it == counts.end()) {
      counts.push_back({k, 1});
    } else {
      ++it->second;
    }
  }
  std::vector<std::string> parts;
  for (const auto& [k, n] : counts) parts.push_back(n > 1 ? absl::StrCat(k, " x", n) : k);
  return absl::StrJoin(parts, ", ");
}

report::Timeline ReportTimeline(const std::string& title, const Schedule& schedule,
                                const SimResult& result) {
  report::Timeline t;
  t.title = title;
  t.iteration_s = result.iteration_time_s;
  t.devices.resize(schedule.num_devices());
  for (int d = 0; d < schedule.num_devices() && d < static_cast<int>(result.op_start_s.size());
       ++d) {
    for (size_t i = 0; i < schedule.ops[d].size(); ++i) {
      const Op& op = schedule.ops[d][i];
      t.devices[d].push_back({std::string(OpKindName(op.kind)), OpToString(op),
                              result.op_start_s[d][i], result.op_end_s[d][i]});
    }
  }
  return t;
}

report::Section RunSection(const std::string& title, const ModelGraph& model, const Plan& plan,
                           const PipelineProblem& problem, const SimResult& result) {
  report::Section s;
  s.title = title;
  s.plan = ReportTimeline(plan.schedule_name.empty() ? "plan" : plan.schedule_name,
                          plan.schedule, result);
  for (const StageAssignment& st : plan.stages) {
    s.stages.push_back(
        {st.first_layer, st.last_layer, st.device, st.recompute, StageKinds(model, st)});
  }
  for (size_t d = 0; d < result.devices.size(); ++d) {
    const double capacity =
        d < problem.memory_capacity.size() ? problem.memory_capacity[d] : 0.0;
    s.memory.push_back(
        {absl::StrCat("device ", d), result.devices[d].peak_memory_bytes, capacity});
  }
  return s;
}

absl::StatusOr<report::Section> SimulatedSection(const std::string& title,
                                                 const std::string& timeline_title,
                                                 const ModelGraph& model, const Cluster& cluster,
                                                 const CostModel& cost, bool contention,
                                                 const Plan& plan) {
  ASSIGN_OR_RETURN(PipelineProblem problem, BuildProblem(model, cluster, cost, plan));
  problem.link_contention = contention;
  ASSIGN_OR_RETURN(SimResult result,
                   Simulate(problem, plan.schedule, EvalOptions{.timeline = true}));
  report::Section s = RunSection(title, model, plan, problem, result);
  s.plan.title = timeline_title;
  return s;
}

absl::StatusOr<report::Section> TunedSection(const std::string& title, const ModelGraph& model,
                                             const Cluster& cluster, const CostModel& cost,
                                             bool contention, const TuneResult& tune) {
  ASSIGN_OR_RETURN(report::Section s,
                   SimulatedSection(title, "plan", model, cluster, cost, contention, tune.plan));
  for (const BaselineResult& b : tune.baselines) {
    if (!b.ran || b.name != tune.best_baseline) continue;
    ASSIGN_OR_RETURN(report::Section base, SimulatedSection(title, b.name, model, cluster, cost,
                                                            contention, b.plan));
    s.baseline = std::move(base.plan);
    const double ours = tune.predicted.iteration_time_s, theirs = b.result.iteration_time_s;
    s.baseline_caption = absl::StrCat(
        "Best fitting baseline: ", b.name, ", iteration ", FormatSeconds(theirs), " (the plan's ",
        FormatSeconds(ours), ours > 0 ? absl::StrFormat(": %.3fx", theirs / ours) : "", ")");
  }
  return s;
}

std::vector<report::IterationBar> BaselineBars(const TuneResult& tune) {
  std::vector<report::IterationBar> bars = {
      {"plan", tune.predicted.iteration_time_s, tune.predicted.fits_memory, true}};
  for (const BaselineResult& b : tune.baselines) {
    if (b.ran) bars.push_back({b.name, b.result.iteration_time_s, b.fits, false});
  }
  return bars;
}

std::vector<report::Replica> ReplicasOf(const LayoutPlan& plan, int p) {
  std::vector<report::Replica> out;
  const int tp = plan.layout.tp;
  for (const PipelineReplica& r : plan.pipelines[p].replicas) {
    std::vector<std::string> groups;
    for (int first : r.device_ranks) {
      groups.push_back(tp > 1 ? absl::StrCat(first, "-", first + tp - 1) : absl::StrCat(first));
    }
    out.push_back({absl::StrCat("DP rank ", r.dp_rank),
                   absl::StrCat(tp > 1 ? "TP groups of ranks " : "ranks ",
                                absl::StrJoin(groups, ", "), " (micro-batches ",
                                r.first_microbatch, "..",
                                r.first_microbatch + plan.pipelines[p].plan.num_microbatches - 1,
                                ")")});
  }
  return out;
}

void LabelLayoutDevices(const LayoutPlan& plan, int p, report::Section* section) {
  const std::vector<PipelineReplica>& replicas = plan.pipelines[p].replicas;
  if (replicas.empty()) return;
  const int tp = plan.layout.tp;
  std::vector<std::string> labels;
  for (int first : replicas[0].device_ranks) {
    labels.push_back(tp > 1 ? absl::StrCat("GPUs ", first, "-", first + tp - 1)
                            : absl::StrCat("GPU ", first));
  }
  section->plan.device_labels = labels;
  if (section->baseline.has_value()) section->baseline->device_labels = labels;
  for (size_t d = 0; d < section->memory.size() && d < labels.size(); ++d) {
    section->memory[d].device = labels[d];
  }
}

}  // namespace octopipe::cli
