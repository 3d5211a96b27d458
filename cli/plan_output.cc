#include "cli/plan_output.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/report.h"
#include "cli/report_page.h"
#include "cli/table.h"
#include "core/schedule.h"
#include "simulator/evaluator.h"
#include "simulator/vocab_parallel.h"

namespace octopipe::cli {
namespace {

double PeakMax(const SimResult& r) {
  double m = 0;
  for (const DeviceResult& d : r.devices) m = std::max(m, d.peak_memory_bytes);
  return m;
}

Json PlanJson(const ModelGraph& model, const Plan& plan) {
  Json partition = Json::array(), placement = Json::array(), schedule = Json::array();
  for (const StageAssignment& st : plan.stages) {
    partition.push_back({{"first_layer", st.first_layer},
                         {"last_layer", st.last_layer},
                         {"recompute", st.recompute},
                         {"kinds", StageKinds(model, st)}});
    placement.push_back(st.device);
  }
  for (const auto& ops : plan.schedule.ops) {
    Json device = Json::array();
    for (const Op& op : ops) device.push_back(OpToString(op));
    schedule.push_back(std::move(device));
  }
  Json j = {{"num_devices", plan.num_devices},
            {"num_microbatches", plan.num_microbatches},
            {"vocab_parallel", plan.vocab_parallel},
            {"partition", std::move(partition)},
            {"placement", std::move(placement)},
            {"schedule", std::move(schedule)}};
  // The split head's shards (vocabulary columns per device) the plan was costed with.
  if (plan.vocab_parallel) j["vocab_shard_columns"] = plan.vocab_shard_columns;
  return j;
}

Json PredictedJson(const SimResult& p) {
  Json peaks = Json::array();
  for (const DeviceResult& d : p.devices) peaks.push_back(d.peak_memory_bytes);
  return {{"iteration_time_s", p.iteration_time_s},
          {"bubble_ratio", p.bubble_ratio},
          {"steady_state_iteration_time_s", p.steady_state_iteration_time_s},
          {"steady_state_bubble_ratio", p.steady_state_bubble_ratio},
          {"tokens_per_s", p.tokens_per_s},
          {"peak_memory_bytes", std::move(peaks)}};
}

Json BaselinesJson(const std::vector<BaselineResult>& baselines) {
  Json out = Json::object();
  for (const BaselineResult& b : baselines) {
    if (!b.ran) {
      out[b.name] = {{"error", b.error}, {"fits", false}};
      continue;
    }
    out[b.name] = {{"iteration_time_s", b.result.iteration_time_s},
                   {"bubble_ratio", b.result.bubble_ratio},
                   {"steady_state_iteration_time_s", b.result.steady_state_iteration_time_s},
                   {"steady_state_bubble_ratio", b.result.steady_state_bubble_ratio},
                   {"peak_memory_bytes", PeakMax(b.result)},
                   {"fits", b.fits}};
  }
  return out;
}

// "GPUs 0-1 (H100-SXM)" for a pipeline device's TP group.
std::string GpusText(const Cluster& physical, const std::vector<int>& gpus) {
  const std::string range = gpus.size() == 1
                                ? absl::StrCat(gpus[0])
                                : absl::StrCat(gpus.front(), "-", gpus.back());
  return absl::StrCat(range, " (", physical.device_hardware(gpus.front()).name, ")");
}

}  // namespace

int FailPlan(std::ostream& err, const absl::Status& s, int code) {
  err << "octopipe plan: error: " << s.message() << "\n";
  return code;
}

Json TuneResultJson(const ModelGraph& model, const TuneResult& t) {
  Json j = {{"feasible", t.feasible}};
  if (!t.feasible) {
    j["infeasible_reason"] = t.infeasible_reason;
    j["required_memory_bytes"] = t.required_memory_bytes;
  }
  j["origin"] = PlanOriginText(t);
  j["plan"] = PlanJson(model, t.plan);
  j["predicted"] = PredictedJson(t.predicted);
  j["baselines"] = BaselinesJson(t.baselines);
  j["best_baseline"] = t.best_baseline;
  j["speedup_vs_best_baseline"] =
      t.best_baseline.empty() ? Json(nullptr) : Json(t.speedup_vs_best_baseline);
  j["lower_bound"] = {{"seconds", t.lower_bound.seconds},
                      {"binding", t.lower_bound.binding},
                      {"work_s", t.lower_bound.work_s},
                      {"chain_s", t.lower_bound.chain_s},
                      {"layer_s", t.lower_bound.layer_s},
                      {"assignment_s", t.lower_bound.assignment_s},
                      {"heaviest_layer", t.lower_bound.heaviest_layer},
                      {"gap", t.lower_bound_gap}};
  j["vocab_parallel"] = {{"used", t.vocab_parallel}, {"tried", t.vocab_parallel_tried}};
  j["tuning_wall_s"] = t.tuning_wall_s;
  j["evaluations"] = t.evaluations;
  Json log = Json::array();
  for (const TuneLogEntry& e : t.log) {
    log.push_back({{"phase", e.phase},
                   {"before_s", e.before_s},
                   {"after_s", e.after_s},
                   {"evaluations", e.evaluations},
                   {"wall_s", e.wall_s},
                   {"detail", e.detail}});
  }
  j["log"] = std::move(log);
  return j;
}

void WriteTables(std::ostream& out, const ModelGraph& model, const Cluster& cluster,
                 const TuneResult& t, bool steady, bool planner) {
  out << "model " << model.name << " (" << model.num_layers() << " layers), cluster "
      << cluster.name << ", " << t.plan.num_devices << " devices, " << t.plan.num_microbatches
      << " micro-batches\n\n";
  if (!t.feasible) {
    out << "INFEASIBLE: " << t.infeasible_reason << "\nmemory needed per device:";
    for (double b : t.required_memory_bytes) out << " " << FormatBytes(b);
    out << "\n\nfastest plan ignoring memory (for reference):\n";
  }
  TextTable stages({"stage", "layers", "kinds", "device", "recompute"});
  for (int s = 0; s < t.plan.num_stages(); ++s) {
    const StageAssignment& st = t.plan.stages[s];
    stages.AddRow({absl::StrCat(s), absl::StrCat(st.first_layer, "-", st.last_layer),
                   StageKinds(model, st), absl::StrCat(st.device), st.recompute ? "yes" : "no"});
  }
  out << "plan (" << PlanOriginText(t) << (planner ? ", computed by the planner" : "") << "):\n"
      << stages.Render({false, false, true, false, true});
  out << VocabParallelLine(t.vocab_parallel, t.vocab_parallel_tried, t.plan.num_devices,
                           SplitsEmbedding(model))
      << "\n";
  out << "\npredicted iteration " << FormatSeconds(t.predicted.iteration_time_s)
      << " synchronous / " << FormatSeconds(t.predicted.steady_state_iteration_time_s)
      << " steady-state; bubble " << FormatPercent(t.predicted.bubble_ratio) << " / "
      << FormatPercent(t.predicted.steady_state_bubble_ratio) << "; "
      << FormatCount(t.predicted.tokens_per_s) << " tokens/s\n";
  TextTable devices({"device", "busy", "bubble", "peak memory", "fits"});
  for (size_t d = 0; d < t.predicted.devices.size(); ++d) {
    const DeviceResult& dr = t.predicted.devices[d];
    devices.AddRow({absl::StrCat(d), FormatSeconds(dr.busy_s), FormatPercent(dr.bubble_ratio),
                    FormatBytes(dr.peak_memory_bytes), dr.fits_memory ? "yes" : "NO"});
  }
  out << "\n" << devices.Render();
  const double ours = steady ? t.predicted.steady_state_iteration_time_s
                             : t.predicted.iteration_time_s;
  TextTable base({"baseline", "iteration", "steady-state", "bubble", "max peak memory", "fits",
                  "ours is"});
  for (const BaselineResult& b : t.baselines) {
    if (!b.ran) {
      base.AddRow({b.name, "-", "-", "-", "-", "n/a", b.error});
      continue;
    }
    const double theirs = steady ? b.result.steady_state_iteration_time_s
                                 : b.result.iteration_time_s;
    base.AddRow({b.name, FormatSeconds(b.result.iteration_time_s),
                 FormatSeconds(b.result.steady_state_iteration_time_s),
                 FormatPercent(b.result.bubble_ratio), FormatBytes(PeakMax(b.result)),
                 b.fits ? "yes" : "NO", absl::StrFormat("%.3fx", theirs / ours)});
  }
  out << "\nbaselines (same simulator, same costs):\n"
      << base.Render({true, false, false, false, false, false, true});
  if (!t.best_baseline.empty()) {
    out << "\nspeed-up over the best fitting baseline (" << t.best_baseline
        << "): " << absl::StrFormat("%.3fx", t.speedup_vs_best_baseline) << "\n";
  }
  if (t.lower_bound.seconds > 0) {
    out << "lower bound on any plan: " << FormatSeconds(t.lower_bound.seconds) << " ("
        << t.lower_bound.binding
        << (t.lower_bound.binding == "layer" ? absl::StrCat(" ", t.lower_bound.heaviest_layer)
                                             : std::string())
        << "); this plan is " << FormatPercent(t.lower_bound_gap) << " above it\n";
  }
  if (planner) {
    out << "tuned in " << absl::StrFormat("%.2f s", t.tuning_wall_s) << " on the planner\n";
    return;
  }
  out << "tuned in " << absl::StrFormat("%.2f s", t.tuning_wall_s) << " (" << t.evaluations
      << " candidates" << (t.budget_exhausted ? ", time budget exhausted" : "") << ")\n";
  out << "\nsearch log:\n";
  for (const TuneLogEntry& e : t.log) {
    out << absl::StrFormat("  %-10s %10s -> %-10s %6d evals  %6.2f s  %s\n", e.phase,
                           FormatSeconds(e.before_s), FormatSeconds(e.after_s), e.evaluations,
                           e.wall_s, e.detail);
  }
}

Json LayoutJson(const Cluster& physical, const LayoutResult& r) {
  Json pipelines = Json::array();
  for (const LayoutPipeline& p : r.pipelines) {
    Json stage_gpus = Json::array(), hardware = Json::array();
    for (const auto& g : p.device_gpus) {
      stage_gpus.push_back(g);
      hardware.push_back(physical.device_hardware(g.front()).name);
    }
    pipelines.push_back({{"replicas", p.replicas},
                         {"device_gpus", std::move(stage_gpus)},
                         {"device_hardware", std::move(hardware)},
                         {"feasible", p.tune.feasible},
                         {"iteration_time_s", p.tune.predicted.iteration_time_s},
                         {"dp_sync_s", p.dp_sync_s}});
  }
  Json considered = Json::array();
  for (const LayoutConsidered& c : r.considered) {
    considered.push_back({{"layout", c.layout.ToString()},
                          {"microbatches", c.microbatches},
                          {"outcome", c.outcome},
                          {"bound_s", c.bound_s},
                          {"estimate_s", c.estimate_s},
                          {"iteration_time_s", c.iteration_s}});
  }
  // The layout as the executor runs it (gradient all-reduces overlapped with the backward; what
  // the search ranks by and `--out` writes as the prediction), or why it could not be
  // simulated.
  Json simulated = Json::object();
  if (r.simulation_error.empty() && r.simulated.iteration_time_s > 0) {
    simulated = {{"iteration_time_s", r.simulated.iteration_time_s},
                 {"pipeline_time_s", r.simulated.pipeline_time_s},
                 {"dp_sync_exposed_s", r.simulated.dp_sync_exposed_s},
                 {"tokens_per_s", r.simulated.tokens_per_s}};
  } else if (!r.simulation_error.empty()) {
    simulated = {{"error", r.simulation_error}};
  }
  return {{"pp", r.layout.pp},
          {"tp", r.layout.tp},
          {"ep", r.layout.ep},
          {"dp", r.layout.dp},
          {"rank_order", r.layout.pp_outer ? "tp-dp-pp" : "tp-pp-dp"},
          {"gpus", r.layout.gpus()},
          {"microbatches_per_pipeline", r.microbatches},
          {"global_microbatches", r.global_microbatches},
          {"pipeline_time_s", r.pipeline_time_s},
          {"dp_sync_s", r.dp_sync_s},
          {"iteration_time_s", r.iteration_time_s},
          {"tokens_per_s", r.tokens_per_s},
          {"simulated", std::move(simulated)},
          {"pipelines", std::move(pipelines)},
          {"considered", std::move(considered)},
          {"tuning_wall_s", r.tuning_wall_s}};
}

void WriteLayoutTables(std::ostream& out, const Cluster& physical, const LayoutResult& r,
                       int tuned, int considered) {
  out << "layout " << r.layout.ToString() << " on " << r.layout.gpus() << " GPUs of "
      << physical.name << ": " << r.microbatches << " micro-batches per pipeline ("
      << r.global_microbatches << " per iteration over " << r.layout.dp << " replicas)\n"
      << "iteration " << FormatSeconds(r.iteration_time_s) << " = pipeline "
      << FormatSeconds(r.pipeline_time_s) << " + DP gradient all-reduce "
      << FormatSeconds(r.dp_sync_s) << "; " << FormatCount(r.tokens_per_s)
      << " tokens/s over all GPUs\n\n";
  TextTable pipes({"pipeline", "replicas", "GPUs of each pipeline device (first replica)",
                   "iteration", "DP sync"});
  for (size_t i = 0; i < r.pipelines.size(); ++i) {
    const LayoutPipeline& p = r.pipelines[i];
    std::vector<std::string> devices;
    for (const auto& g : p.device_gpus) devices.push_back(GpusText(physical, g));
    pipes.AddRow({absl::StrCat(i), absl::StrCat(p.replicas.size()), absl::StrJoin(devices, ", "),
                  FormatSeconds(p.tune.predicted.iteration_time_s), FormatSeconds(p.dp_sync_s)});
  }
  out << "pipelines (each device is one TP group; the table below is pipeline 0, the slowest):\n"
      << pipes.Render({false, false, true, false, false});
  if (r.considered.empty()) {
    out << "\n" << tuned << " of " << considered << " layouts tuned in full, on the planner\n\n";
    return;
  }
  TextTable cons({"layout", "M", "outcome", "lower bound", "estimate", "iteration"});
  constexpr size_t kShown = 12;
  for (size_t i = 0; i < r.considered.size() && i < kShown; ++i) {
    const LayoutConsidered& c = r.considered[i];
    cons.AddRow({c.layout.ToString(), absl::StrCat(c.microbatches), c.outcome,
                 FormatSeconds(c.bound_s), FormatSeconds(c.estimate_s),
                 std::isfinite(c.iteration_s) ? FormatSeconds(c.iteration_s) : "-"});
  }
  out << "\nlayouts considered (best estimate first; " << r.considered.size() << " in all"
      << (r.considered.size() > kShown ? absl::StrCat(", ", kShown, " shown") : "") << "):\n"
      << cons.Render({true, false, true, false, false, false}) << "\n";
}

}  // namespace octopipe::cli
