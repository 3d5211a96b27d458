#include "cli/simulate_command.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "cli/command_line.h"
#include "cli/inputs.h"
#include "cli/report.h"
#include "cli/report_page.h"
#include "cli/table.h"
#include "core/cost_model.h"
#include "core/json_text.h"
#include "core/status_macros.h"
#include "report/html_report.h"
#include "simulator/classic_pipeline.h"
#include "simulator/problem_builder.h"
#include "simulator/trace.h"
#include "core/convert.h"
#include "proto/plan.pb.h"
#include "tuner/layout_simulation.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace octopipe::cli {
namespace {

struct RunOutput {
  Plan plan;
  PipelineProblem problem;
  SimResult result;
};

absl::Status CheckPositive(const char* flag, int64_t value) {
  if (value >= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("--", flag, " must be >= 1, got ", value));
}

absl::StatusOr<RunOutput> RunPlanFile(const Plan& plan, const SimulateOptions& o,
                                      const ModelGraph& model, const Cluster& cluster,
                                      const CostModel& cost, const EvalOptions& eval) {
  RunOutput run;
  run.plan = plan;
  if (run.plan.schedule_name.empty()) run.plan.schedule_name = "plan";
  ASSIGN_OR_RETURN(run.problem, BuildProblem(model, cluster, cost, run.plan));
  run.problem.link_contention = o.contention;
  ASSIGN_OR_RETURN(run.result, Simulate(run.problem, run.plan.schedule, eval));
  return run;
}

absl::StatusOr<RunOutput> RunClassic(ScheduleKind kind, const SimulateOptions& o,
                                     const ModelGraph& model, const Cluster& cluster,
                                     const CostModel& cost, const EvalOptions& eval) {
  ClassicRequest req;
  req.kind = kind;
  req.devices = static_cast<int>(o.devices);
  req.chunks = static_cast<int>(o.chunks);
  req.microbatches = static_cast<int>(o.microbatches);
  req.link_contention = o.contention;
  req.eval = eval;
  absl::StatusOr<ClassicRun> run = SimulateClassic(model, cluster, cost, req);
  if (!run.ok()) {
    // Name the flag a user would change.
    std::string msg(run.status().message());
    for (const char* flag : {"devices", "chunks", "microbatches"}) {
      if (msg.rfind(flag, 0) == 0) msg = absl::StrCat("--", msg);
    }
    return absl::Status(run.status().code(), msg);
  }
  return RunOutput{std::move(run->plan), std::move(run->problem), std::move(run->result)};
}

int Fail(std::ostream& err, const absl::Status& s, int code = 1) {
  err << "octopipe simulate: error: " << s.message() << "\n";
  return code;
}

void DeclareFlags(CommandLine& flags, SimulateOptions& o, std::string* report) {
  AddModelClusterFlags(flags, &o.model, &o.cluster);
  flags.String("schedule", &o.schedule,
               "gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-v, dualpipev, or all (comparison)");
  flags.Int("devices", &o.devices, "pipeline devices P (the cluster's first P); 0 = all");
  flags.Int("microbatches", &o.microbatches,
            "micro-batches M per iteration; 0 = the model's training.num_microbatches");
  flags.Int("chunks", &o.chunks,
            "chunks V per device; 0 = the schedule's own (interleaved 2, zb-v/dualpipev 2)");
  flags.String("plan", &o.plan,
               "evaluate this plan file (from `octopipe plan --out`) instead of a schedule");
  flags.String("trace", &o.trace,
               "write the timeline as Chrome trace JSON (open in ui.perfetto.dev)");
  flags.String("report", report,
               "write an HTML page of the run: each device's timeline, memory against capacity,\n"
               "stages; for a layout plan every distinct pipeline and its replicas (one\n"
               "self-contained file; open it in a browser). Needs one --schedule or --plan");
  flags.Bool("json", &o.json, "print one JSON object instead of tables");
  flags.Bool("ep_overlap", &o.ep_overlap,
             "the runtime overlaps each MoE layer's expert all-to-alls with other micro-batches'\n"
             "compute (sets the model's training.ep_comm_overlap, as `plan --ep_overlap`; a\n"
             "--plan file made with it records it, and is predicted with it unless\n"
             "--ep_overlap=false)");
  flags.Bool("contention", &o.contention,
             "serve transfers on one link one at a time (otherwise links never contend; a\n"
             "--plan file made with it records it, and is predicted with it unless\n"
             "--contention=false)");
}

// What the flags resolve to: the inputs and the schedules to run (none: the plan file).
struct SimulateInputs {
  ModelGraph model;
  Cluster cluster;
  std::vector<ScheduleKind> kinds;
  CostModel cost;
  EvalOptions eval;
  // The --plan file's plan where it is one pipeline (a layout runs as RunLayoutSimulate).
  std::optional<Plan> plan_file;
  // The iteration the --plan file's writer predicted (`octopipe plan --out` records it; 0 where
  // the file holds none).
  double recorded_iteration_s = 0;
  // What the --plan file recorded that plan changed before planning, as applied here (flags:
  // "--ep_overlap", "--recompute=selective", "--contention"; ApplyPlannedWith).
  std::vector<std::string> planned_with;
};

// Step 1: loads --model/--cluster, fills the defaults that depend on them and checks the
// numbers; every error names the flag.
absl::StatusOr<SimulateInputs> ResolveInputs(SimulateOptions& o, const CommandLine& flags) {
  SimulateInputs in;
  ASSIGN_OR_RETURN(in.model, LoadModelArg(o.model));
  if (o.ep_overlap) in.model.training.ep_comm_overlap = true;
  ASSIGN_OR_RETURN(in.cluster, LoadClusterArg(o.cluster));
  if (!flags.was_set("devices")) o.devices = in.cluster.num_devices();
  if (!flags.was_set("microbatches")) o.microbatches = in.model.training.num_microbatches;
  RETURN_IF_ERROR(CheckPositive("devices", o.devices));
  RETURN_IF_ERROR(CheckPositive("microbatches", o.microbatches));
  RETURN_IF_ERROR(CheckRunFlags(in.model, o.devices, o.chunks, o.microbatches, 1));
  if (o.chunks < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--chunks must be >= 0, got ", o.chunks));
  }
  in.eval.timeline = !o.trace.empty();
  in.eval.critical_path = o.json;
  if (!o.plan.empty()) return in;  // a plan carries its own partition, placement and schedule
  if (o.schedule == "all") {
    if (!o.trace.empty()) {
      return absl::InvalidArgumentError("--trace needs one --schedule (or --plan), not all");
    }
    in.kinds = AllScheduleKinds();
    return in;
  }
  absl::StatusOr<ScheduleKind> kind = ParseScheduleKind(o.schedule);
  if (!kind.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--schedule: ", kind.status().message()));
  }
  in.kinds = {*kind};
  return in;
}

// --report of one run: its timeline (simulated with the timeline on), stages and memory.
absl::Status WriteRunReport(const std::string& path, const SimulateInputs& in,
                            const RunOutput& run) {
  report::Page page;
  page.command = "octopipe simulate";
  page.model = in.model.name;
  page.cluster = in.cluster.name;
  page.iteration_s = run.result.iteration_time_s;
  page.bubble_ratio = run.result.bubble_ratio;
  page.tokens_per_s = run.result.tokens_per_s;
  page.facts = {{"schedule", run.plan.schedule_name},
                {"devices", absl::StrCat(run.plan.num_devices)},
                {"micro-batches", absl::StrCat(run.plan.num_microbatches)}};
  if (!run.result.fits_memory) page.facts.push_back({"memory:", "DOES NOT FIT"});
  page.sections.push_back(
      RunSection(absl::StrCat("Schedule ", run.plan.schedule_name), in.model, run.plan,
                 run.problem, run.result));
  return report::WriteHtmlReport("--report", ResolvePath(path), page);
}

// `recorded`: the iteration the plan file's writer predicted (`octopipe plan --out` records
// it; 0 where the file holds none). Where this run's iteration differs from it by more than
// kRecordedDrift, a warning: the plan was made from other inputs (another model or cluster
// file, or a file written before plan recorded its --ep_overlap, --recompute and --contention
// with the prediction: ApplyPlannedWith), and the figures here are not the ones the planner
// chose it by. Empty where they agree.
constexpr double kRecordedDrift = 0.005;
std::string RecordedDriftWarning(double recorded, double now) {
  if (!(recorded > 0) || std::abs(now / recorded - 1) <= kRecordedDrift) return "";
  return absl::StrFormat(
      "octopipe simulate: warning: the plan file recorded a %s iteration, this run predicts %s "
      "(%+.1f%%): the plan was made from other inputs (another model or cluster file; or, in a "
      "file that does not record them, plan's --ep_overlap, --recompute or --contention: give "
      "--ep_overlap and --contention here as plan had them, or run plan --out again to record "
      "them)\n",
      FormatSeconds(recorded), FormatSeconds(now), 100 * (now / recorded - 1));
}

// Step 1b (--plan): what `octopipe plan` changed before planning, as the plan file records it
// with its prediction (--ep_overlap, --recompute, --contention), applied here too, so that the
// plan is predicted for the model and simulation it was made for; said on `err` unless --json.
// A flag given here wins (`--ep_overlap=false` predicts the plan without the overlap).
absl::Status ApplyPlannedWith(const proto::LayoutPrediction& p, const CommandLine& flags,
                              SimulateOptions* o, SimulateInputs* in, std::ostream& err) {
  std::vector<std::string> applied;
  if (p.ep_comm_overlap() && !flags.was_set("ep_overlap") &&
      !in->model.training.ep_comm_overlap) {
    in->model.training.ep_comm_overlap = true;
    applied.push_back("--ep_overlap");
  }
  if (!p.recompute().empty()) {
    absl::StatusOr<RecomputePolicy> r = ParseRecomputePolicy(p.recompute());
    if (!r.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--plan: file '", o->plan, "': predicted.recompute: ", r.status().message()));
    }
    if (in->model.training.recompute != *r) {
      in->model.training.recompute = *r;
      applied.push_back(absl::StrCat("--recompute=", p.recompute()));
    }
  }
  if (p.contention() && !flags.was_set("contention") && !o->contention) {
    o->contention = true;
    applied.push_back("--contention");
  }
  in->planned_with = applied;
  if (!applied.empty() && !o->json) {
    err << "octopipe simulate: as the plan was made (recorded in " << o->plan
        << "): " << absl::StrJoin(applied, " ") << "\n";
  }
  return absl::OkStatus();
}

// Step 0: --report is checked before any work: one run to draw, and a path that can be written.
absl::Status CheckReportFlag(const SimulateOptions& o, const std::string& report) {
  if (report.empty()) return absl::OkStatus();
  if (o.plan.empty() && o.schedule == "all") {
    return absl::InvalidArgumentError("--report needs one --schedule (or --plan), not all");
  }
  return report::CheckReportPath("--report", ResolvePath(report));
}

// Step 2a: one run (the plan file or one schedule), printed in detail or as JSON.
int RunSingle(const SimulateOptions& o, const std::string& report, const SimulateInputs& in,
              std::ostream& out, std::ostream& err) {
  absl::StatusOr<RunOutput> run =
      o.plan.empty() ? RunClassic(in.kinds[0], o, in.model, in.cluster, in.cost, in.eval)
                     : RunPlanFile(*in.plan_file, o, in.model, in.cluster, in.cost, in.eval);
  if (!run.ok()) return Fail(err, run.status(), 2);
  const double recorded = in.recorded_iteration_s;
  err << RecordedDriftWarning(recorded, run->result.iteration_time_s);
  if (!o.trace.empty()) {
    absl::Status s =
        WriteChromeTrace(ResolvePath(o.trace), run->plan.schedule, run->result,
                         absl::StrCat(in.model.name, " / ", run->plan.schedule_name));
    if (!s.ok()) return Fail(err, s);
  }
  if (!report.empty()) {
    if (absl::Status s = WriteRunReport(report, in, *run); !s.ok()) return Fail(err, s);
  }
  if (o.json) {
    Json j = RunJson(run->plan, run->problem, run->result);
    if (recorded > 0) j["plan_file_iteration_time_s"] = recorded;
    if (!in.planned_with.empty()) j["plan_file_options_applied"] = in.planned_with;
    out << JsonText(j) << "\n";
    return 0;
  }
  out << "model " << in.model.name << " (" << in.model.num_layers() << " layers), cluster "
      << in.cluster.name << "\n"
      << RenderRun(run->plan, run->problem, run->result);
  if (!o.trace.empty()) out << "\ntrace written to " << o.trace << "\n";
  if (!report.empty()) {
    out << (o.trace.empty() ? "\n" : "") << "report written to " << report << "\n";
  }
  return 0;
}

// One schedule of the comparison: its run, or why it could not run.
struct ComparisonRow {
  ScheduleKind kind;
  absl::StatusOr<RunOutput> run;
};

Json ComparisonJson(const SimulateOptions& o, const SimulateInputs& in,
                    const std::vector<ComparisonRow>& rows) {
  Json schedules = Json::array();
  for (const ComparisonRow& row : rows) {
    if (row.run.ok()) {
      schedules.push_back(RunJson(row.run->plan, row.run->problem, row.run->result));
    } else {
      schedules.push_back({{"schedule", std::string(ScheduleKindName(row.kind))},
                           {"error", std::string(row.run.status().message())}});
    }
  }
  return {{"model", in.model.name},
          {"cluster", in.cluster.name},
          {"num_devices", o.devices},
          {"num_microbatches", o.microbatches},
          {"schedules", std::move(schedules)}};
}

std::string ComparisonTable(const SimulateOptions& o, const SimulateInputs& in,
                            const std::vector<ComparisonRow>& rows) {
  TextTable table({"schedule", "stages", "iteration", "steady-state", "bubble", "steady bubble",
                   "tokens/s", "max peak memory", "fits"});
  std::string not_run;
  for (const ComparisonRow& row : rows) {
    const std::string name(ScheduleKindName(row.kind));
    if (!row.run.ok()) {
      table.AddRow({name, "-", "-", "-", "-", "-", "-", "-", "n/a"});
      absl::StrAppend(&not_run, "\nnot run: ", name, ": ", row.run.status().message());
      continue;
    }
    const SimResult& r = row.run->result;
    double peak = 0;
    for (const DeviceResult& d : r.devices) peak = std::max(peak, d.peak_memory_bytes);
    table.AddRow({name, absl::StrCat(row.run->plan.num_stages()),
                  FormatSeconds(r.iteration_time_s),
                  FormatSeconds(r.steady_state_iteration_time_s), FormatPercent(r.bubble_ratio),
                  FormatPercent(r.steady_state_bubble_ratio), FormatCount(r.tokens_per_s),
                  FormatBytes(peak), r.fits_memory ? "yes" : "NO"});
  }
  return absl::StrCat("model ", in.model.name, " (", in.model.num_layers(),
                      " layers), cluster ", in.cluster.name, ", ", o.devices, " devices, ",
                      o.microbatches, " micro-batches; layers split evenly into stages\n\n",
                      table.Render(), not_run, not_run.empty() ? "" : "\n");
}

// Step 2b: every classic schedule side by side; fails only when none could run.
int RunComparison(const SimulateOptions& o, const SimulateInputs& in, std::ostream& out,
                  std::ostream& err) {
  std::vector<ComparisonRow> rows;
  for (ScheduleKind kind : in.kinds) {
    rows.push_back({kind, RunClassic(kind, o, in.model, in.cluster, in.cost, in.eval)});
  }
  const bool any_ran = std::any_of(rows.begin(), rows.end(),
                                   [](const ComparisonRow& row) { return row.run.ok(); });
  if (!any_ran) return Fail(err, rows.front().run.status(), 2);
  out << (o.json ? JsonText(ComparisonJson(o, in, rows)) + "\n"
                 : ComparisonTable(o, in, rows));
  return 0;
}


// --report of a layout: every distinct pipeline re-simulated with the timeline on the cluster
// of its first replica, as SimulateLayout does (the two must agree on its iteration).
absl::StatusOr<report::Page> LayoutReportPage(const SimulateOptions& o, const SimulateInputs& in,
                                              const LayoutPlan& plan,
                                              const LayoutSimulation& sim) {
  report::Page page;
  page.command = "octopipe simulate";
  page.model = in.model.name;
  page.cluster = in.cluster.name;
  page.iteration_s = sim.iteration_time_s;
  page.bubble_ratio = sim.bubble_ratio;
  page.tokens_per_s = sim.tokens_per_s;
  page.facts = {{"layout", plan.layout.ToString()},
                {"ranks", absl::StrCat(plan.num_ranks)},
                {"micro-batches", absl::StrCat(plan.global_microbatches)}};
  if (!sim.fits) page.facts.push_back({"memory:", "DOES NOT FIT"});
  const ModelGraph model = ModelForLayout(in.model, plan.layout, EpRanksPerNode(in.cluster, plan));
  for (size_t p = 0; p < plan.pipelines.size(); ++p) {
    const LayoutPipelinePlan& pipe = plan.pipelines[p];
    const Cluster cluster = PipelineCluster(in.cluster, pipe.replicas[0].device_ranks,
                                            absl::StrCat(in.cluster.name, " pipeline ", p));
    ASSIGN_OR_RETURN(report::Section s,
                     SimulatedSection(absl::StrCat("Pipeline ", p, ": ", pipe.replicas.size(),
                                                   pipe.replicas.size() == 1 ? " replica"
                                                                             : " replicas"),
                                      "plan", model, cluster, in.cost, o.contention, pipe.plan));
    const double want = sim.pipeline_iteration_s[p];
    if (std::abs(s.plan.iteration_s - want) > 1e-9 * std::max(1.0, want)) {
      return absl::InternalError(absl::StrCat("pipeline ", p, " re-simulated to ",
                                              s.plan.iteration_s, " s, not the layout's ", want,
                                              " s"));
    }
    s.replicas = ReplicasOf(plan, static_cast<int>(p));
    LabelLayoutDevices(plan, static_cast<int>(p), &s);
    page.sections.push_back(std::move(s));
  }
  return page;
}

// --plan of a whole layout (core/layout_plan.h): SimulateLayout, as the executor runs it —
// every distinct pipeline, and the gradient all-reduces overlapped with the backward.
int RunLayoutSimulate(const SimulateOptions& o, const std::string& report,
                      const SimulateInputs& in, const LayoutPlan& plan, std::ostream& out,
                      std::ostream& err) {
  absl::StatusOr<LayoutSimulation> sim =
      SimulateLayout(in.model, in.cluster, in.cost, plan, o.contention);
  if (!sim.ok()) {
    return Fail(err, absl::InvalidArgumentError(absl::StrCat("--plan: ", sim.status().message())),
                2);
  }
  const double recorded = in.recorded_iteration_s;
  err << RecordedDriftWarning(recorded, sim->iteration_time_s);
  if (!report.empty()) {
    absl::StatusOr<report::Page> page = LayoutReportPage(o, in, plan, *sim);
    absl::Status s = page.ok() ? report::WriteHtmlReport("--report", ResolvePath(report), *page)
                               : absl::Status(page.status().code(),
                                              absl::StrCat("--report: ", page.status().message()));
    if (!s.ok()) return Fail(err, s);
  }
  if (o.json) {
    Json j = {{"layout", plan.layout.ToString()},
              {"ranks", plan.num_ranks},
              {"pipelines", plan.pipelines.size()},
              {"global_microbatches", plan.global_microbatches},
              {"iteration_time_s", sim->iteration_time_s},
              {"pipeline_time_s", sim->pipeline_time_s},
              {"pipeline_iteration_s", sim->pipeline_iteration_s},
              {"dp_sync_exposed_s", sim->dp_sync_exposed_s},
              {"dp_sync_total_s", sim->dp_sync_total_s},
              {"bubble_ratio", sim->bubble_ratio},
              {"tokens_per_s", sim->tokens_per_s},
              {"fits", sim->fits},
              {"peak_memory_bytes", sim->peak_memory_bytes},
              {"peak_activation_bytes", sim->peak_activation_bytes}};
    if (recorded > 0) j["plan_file_iteration_time_s"] = recorded;
    if (!in.planned_with.empty()) j["plan_file_options_applied"] = in.planned_with;
    out << JsonText(j) << "\n";
    return 0;
  }
  out << "layout " << plan.layout.ToString() << ": " << plan.num_ranks << " ranks, "
      << plan.pipelines.size() << " distinct pipelines, " << plan.num_replicas() << " replicas, "
      << plan.global_microbatches << " micro-batches per iteration\n";
  TextTable t({"pipeline", "replicas", "devices", "micro-batches", "iteration"});
  for (size_t p = 0; p < plan.pipelines.size(); ++p) {
    t.AddRow({absl::StrCat(p), absl::StrCat(plan.pipelines[p].replicas.size()),
              absl::StrCat(plan.pipelines[p].plan.num_devices),
              absl::StrCat(plan.pipelines[p].plan.num_microbatches),
              FormatSeconds(sim->pipeline_iteration_s[p])});
  }
  out << t.Render();
  out << "iteration " << FormatSeconds(sim->iteration_time_s) << " (slowest pipeline "
      << FormatSeconds(sim->pipeline_time_s) << ", gradient all-reduces "
      << FormatSeconds(sim->dp_sync_total_s) << " of which " << FormatSeconds(sim->dp_sync_exposed_s)
      << " not hidden by the backward), bubble " << FormatPercent(sim->bubble_ratio) << ", "
      << absl::StrFormat("%.0f", sim->tokens_per_s) << " tokens/s"
      << (sim->fits ? "" : "; DOES NOT FIT in memory") << "\n";
  if (!report.empty()) out << "report written to " << report << "\n";
  return sim->fits ? 0 : 3;
}

}  // namespace

int RunSimulate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  SimulateOptions o;
  std::string report;  // --report (not in SimulateOptions, which simulate_command.h holds)
  CommandLine flags("simulate",
                    "Evaluates pipeline schedules on a model and cluster with the DAG simulator "
                    "and reports iteration time (synchronous and steady-state), bubble ratios, "
                    "throughput and peak memory per device. With no flags it compares every "
                    "classic schedule for Nemotron-H 8B on one 8 x H100 node.");
  DeclareFlags(flags, o, &report);
  if (absl::Status s = flags.Parse(args); !s.ok()) return Fail(err, s, 2);
  if (flags.help_requested()) {
    out << flags.Usage();
    return 0;
  }
  if (absl::Status s = CheckReportFlag(o, report); !s.ok()) return Fail(err, s, 2);
  absl::StatusOr<SimulateInputs> in = ResolveInputs(o, flags);
  if (!in.ok()) return Fail(err, in.status(), 2);
  in->eval.timeline = in->eval.timeline || !report.empty();
  if (!o.plan.empty()) {
    proto::LayoutPrediction predicted;
    absl::StatusOr<LayoutPlan> layout = LoadLayoutPlanArg(o.plan, &predicted);
    if (!layout.ok()) return Fail(err, layout.status(), 2);
    in->recorded_iteration_s = predicted.iteration_time_s();
    if (absl::Status s = ApplyPlannedWith(predicted, flags, &o, &*in, err); !s.ok()) {
      return Fail(err, s, 2);
    }
    if (!layout->single_pipeline()) return RunLayoutSimulate(o, report, *in, *layout, out, err);
    in->plan_file = std::move(layout->pipelines[0].plan);
  }
  return in->kinds.size() <= 1 ? RunSingle(o, report, *in, out, err)
                               : RunComparison(o, *in, out, err);
}

}  // namespace octopipe::cli
