#include "cli/simulate_command.h"

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "cli/flags.h"
#include "cli/inputs.h"
#include "cli/report.h"
#include "cli/table.h"
#include "core/cost_model.h"
#include "core/json_writer.h"
#include "core/status_macros.h"
#include "simulator/classic_pipeline.h"
#include "simulator/problem_builder.h"
#include "simulator/trace.h"

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

absl::StatusOr<RunOutput> RunPlanFile(const SimulateOptions& o, const ModelGraph& model,
                                      const Cluster& cluster, const CostModel& cost,
                                      const EvalOptions& eval) {
  RunOutput run;
  ASSIGN_OR_RETURN(run.plan, LoadPlanArg(o.plan));
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

}  // namespace

int RunSimulate(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  SimulateOptions o;
  FlagSet flags("simulate",
                "Evaluates pipeline schedules on a model and cluster with the DAG simulator and\n"
                "reports iteration time (synchronous and steady-state), bubble ratios,\n"
                "throughput and peak memory per device. With no flags it compares every\n"
                "classic schedule for Nemotron-H 8B on one 8 x H100 node.");
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
  flags.Bool("json", &o.json, "print one JSON object instead of tables");
  flags.Bool("contention", &o.contention,
             "serve transfers on one link one at a time (default: links never contend)");
  if (absl::Status s = flags.Parse(args); !s.ok()) return Fail(err, s, 2);
  if (flags.help_requested()) {
    out << flags.Usage();
    return 0;
  }

  absl::StatusOr<ModelGraph> model = LoadModelArg(o.model);
  if (!model.ok()) return Fail(err, model.status(), 2);
  absl::StatusOr<Cluster> cluster = LoadClusterArg(o.cluster);
  if (!cluster.ok()) return Fail(err, cluster.status(), 2);
  if (!flags.was_set("devices")) o.devices = cluster->num_devices();
  if (!flags.was_set("microbatches")) o.microbatches = model->training.num_microbatches;
  for (const auto& [flag, value] : {std::pair{"devices", o.devices},
                                    std::pair{"microbatches", o.microbatches}}) {
    if (absl::Status s = CheckPositive(flag, value); !s.ok()) return Fail(err, s, 2);
  }
  if (absl::Status s = CheckRunFlags(*model, o.devices, o.chunks, o.microbatches, 1); !s.ok()) {
    return Fail(err, s, 2);
  }
  if (o.chunks < 0) {
    return Fail(err, absl::InvalidArgumentError(
                         absl::StrCat("--chunks must be >= 0, got ", o.chunks)), 2);
  }
  const CostModel cost;
  EvalOptions eval;
  eval.timeline = !o.trace.empty();
  eval.critical_path = o.json;

  std::vector<ScheduleKind> kinds;
  if (!o.plan.empty()) {
    // A plan carries its own partition, placement and schedule.
  } else if (o.schedule == "all") {
    if (!o.trace.empty()) {
      return Fail(err, absl::InvalidArgumentError(
                           "--trace needs one --schedule (or --plan), not all"), 2);
    }
    kinds = AllScheduleKinds();
  } else {
    absl::StatusOr<ScheduleKind> kind = ParseScheduleKind(o.schedule);
    if (!kind.ok()) {
      return Fail(err, absl::InvalidArgumentError(
                           absl::StrCat("--schedule: ", kind.status().message())), 2);
    }
    kinds = {*kind};
  }

  // Single run: the plan file or one schedule.
  if (kinds.size() <= 1) {
    absl::StatusOr<RunOutput> run =
        o.plan.empty() ? RunClassic(kinds[0], o, *model, *cluster, cost, eval)
                       : RunPlanFile(o, *model, *cluster, cost, eval);
    if (!run.ok()) return Fail(err, run.status(), 2);
    if (!o.trace.empty()) {
      absl::Status s = WriteChromeTrace(ResolvePath(o.trace), run->plan.schedule, run->result,
                                        absl::StrCat(model->name, " / ", run->plan.schedule_name));
      if (!s.ok()) return Fail(err, s);
    }
    if (o.json) {
      JsonWriter w;
      WriteRunJson(w, run->plan, run->problem, run->result);
      out << w.str() << "\n";
    } else {
      out << "model " << model->name << " (" << model->num_layers() << " layers), cluster "
          << cluster->name << "\n"
          << RenderRun(run->plan, run->problem, run->result);
      if (!o.trace.empty()) out << "\ntrace written to " << o.trace << "\n";
    }
    return 0;
  }

  // Comparison of every classic schedule.
  JsonWriter w;
  w.BeginObject().Field("model", model->name).Field("cluster", cluster->name);
  w.Field("num_devices", static_cast<int64_t>(o.devices));
  w.Field("num_microbatches", static_cast<int64_t>(o.microbatches));
  w.Key("schedules").BeginArray();
  TextTable table({"schedule", "stages", "iteration", "steady-state", "bubble", "steady bubble",
                   "tokens/s", "max peak memory", "fits"});
  std::vector<std::string> not_run;
  absl::Status first_error;
  for (ScheduleKind kind : kinds) {
    absl::StatusOr<RunOutput> run = RunClassic(kind, o, *model, *cluster, cost, eval);
    if (!run.ok()) {
      w.BeginObject().Field("schedule", ScheduleKindName(kind));
      w.Field("error", run.status().message()).EndObject();
      table.AddRow({std::string(ScheduleKindName(kind)), "-", "-", "-", "-", "-", "-", "-",
                    "n/a"});
      not_run.push_back(absl::StrCat(ScheduleKindName(kind), ": ", run.status().message()));
      if (first_error.ok()) first_error = run.status();
      continue;
    }
    WriteRunJson(w, run->plan, run->problem, run->result);
    double peak = 0;
    for (const DeviceResult& d : run->result.devices) peak = std::max(peak, d.peak_memory_bytes);
    const SimResult& r = run->result;
    table.AddRow({std::string(ScheduleKindName(kind)), absl::StrCat(run->plan.num_stages()),
                  FormatSeconds(r.iteration_time_s),
                  FormatSeconds(r.steady_state_iteration_time_s), FormatPercent(r.bubble_ratio),
                  FormatPercent(r.steady_state_bubble_ratio), FormatCount(r.tokens_per_s),
                  FormatBytes(peak), r.fits_memory ? "yes" : "NO"});
  }
  w.EndArray().EndObject();
  if (not_run.size() == kinds.size()) return Fail(err, first_error, 2);
  if (o.json) {
    out << w.str() << "\n";
  } else {
    out << "model " << model->name << " (" << model->num_layers() << " layers), cluster "
        << cluster->name << ", " << o.devices << " devices, " << o.microbatches
        << " micro-batches; layers split evenly into stages\n\n"
        << table.Render();
    for (const std::string& line : not_run) out << "\nnot run: " << line;
    if (!not_run.empty()) out << "\n";
  }
  return 0;
}

}  // namespace octopipe::cli
