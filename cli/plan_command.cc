#include "cli/plan_command.h"

#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/command_line.h"
#include "cli/inputs.h"
#include "cli/plan_output.h"
#include "core/clock.h"
#include "cli/plan_remote.h"
#include "cli/planner_client.h"
#include "cli/report_page.h"
#include "cli/table.h"
#include "core/convert.h"
#include "core/file_io.h"
#include "core/json_text.h"
#include "core/limits.h"
#include "core/status_macros.h"
#include "report/html_report.h"
#include "simulator/trace.h"
#include "tuner/constraints.h"
#include "tuner/layout.h"
#include "tuner/tuner.h"
#include "tuner/vocab_choice.h"

namespace octopipe::cli {
namespace {

// --budget_clock=reads: the budget's seconds per read of the search's clock.
constexpr double kSecondsPerBudgetRead = 1e-5;

// One pipeline over the first --devices; otherwise the layout search chooses PP x TP x EP x DP
// over the cluster (also over `octopipe profile`'s executor ranks: the executor runs layouts).
bool OnePipeline(const CommandLine& flags, const Cluster& /*cluster*/) {
  return flags.was_set("devices");
}

void DeclareFlags(CommandLine& flags, PlanOptions& o, std::string* report,
                  PlannerConnection& remote) {
  AddModelClusterFlags(flags, &o.model, &o.cluster);
  flags.Int("devices", &o.devices,
            "one pipeline over the cluster's first P devices; 0 = all. Without it plan chooses\n"
            "a PP x TP x EP x DP layout over every device (--pp/--tp/--ep/--dp fix degrees)");
  flags.Int("microbatches", &o.microbatches,
            "micro-batches M; 0 = the model's training.num_microbatches");
  flags.Double("time_budget", &o.time_budget,
               "seconds of search; the best plan so far is returned when it runs out");
  flags.String("budget_clock", &o.budget_clock,
               "wall: --time_budget is seconds of this machine's time; reads: it is counted in\n"
               "the search's reads of its clock (one read = 10 us), so the same request gives the\n"
               "same plan on any machine and under any load (one evaluation thread: --threads\n"
               "must be 0 or 1; the search takes whatever wall time those reads need, and\n"
               "tuning_wall_s reports the reads as seconds)");
  flags.Int("seed", &o.seed, "random seed (same seed, same plan)");
  flags.Int("threads", &o.threads, "evaluation threads (0: one per core of this machine)");
  flags.String("objective", &o.objective,
               "synchronous (first op start to last op end) or steady-state (overlapped "
               "iterations); both are always reported");
  flags.String("out", &o.out, "write the plan file here (re-evaluate with simulate --plan)");
  flags.String("trace", &o.trace, "write the plan's timeline as Chrome trace JSON");
  flags.String("report", report,
               "write an HTML page of the plan: each device's timeline, the best baseline's\n"
               "on the same axis, memory against capacity, stages; for a layout every distinct\n"
               "pipeline and its replicas (one self-contained file; open it in a browser)");
  flags.Bool("json", &o.json, "print one JSON object instead of tables");
  flags.Bool("contention", &o.contention, "serve transfers on one link one at a time");
  flags.Bool("quiet", &o.quiet, "no progress lines on stderr");
  flags.String("vocab_parallel", &o.vocab_parallel,
               "split the output layer over the devices by vocabulary: auto (try it when the "
               "head is heavy, keep the faster plan), on or off");
  flags.Int("pp", &o.pp,
            "pipeline-parallel degree; 0 = chosen (without --devices the planner chooses PP x TP "
            "x EP x DP over every GPU of the cluster and --microbatches is the global batch)");
  flags.Int("tp", &o.tp, "tensor-parallel degree (1, 2, 4 or 8, inside a node); 0 = chosen");
  flags.Int("ep", &o.ep, "expert-parallel degree of MoE layers (divides DP); 0 = chosen");
  flags.Int("dp", &o.dp, "data-parallel degree (pipeline replicas); 0 = chosen");
  flags.Int("max_layouts", &o.max_layouts,
            "layouts of the best estimates screened: twice this many, each with a share of "
            "half of --time_budget; the fastest is then tuned on with the other half");
  flags.Bool("no_bw_split", &o.no_bw_split,
             "the runtime has no separate weight-gradient op: every backward is one BW op");
  flags.Int("max_stages_per_device", &o.max_stages_per_device,
            "at most this many pipeline stages on a device; 0 = no limit");
  flags.Bool("no_recompute", &o.no_recompute, "the runtime cannot recompute activations");
  flags.Bool("ep_overlap", &o.ep_overlap,
             "the runtime overlaps MoE all-to-alls with another micro-batch's compute\n"
             "(DualPipe, Megatron-Core's A2A overlap; OctoPipe's executor does not): expert-\n"
             "parallel communication is costed on a stream of its own per device, beside the\n"
             "device's next op when that is of the other kind (a forward beside a backward's\n"
             "all-to-all), its kernels taking training.ep_comm_sms (default 20) of the\n"
             "hardware's sm_count SMs from that op's compute (the model's\n"
             "training.ep_comm_overlap)");
  flags.String("recompute", &o.recompute,
               "activation recompute: auto (as the model's training.recompute asks: full =\n"
               "every stage recomputes; selective = the modules the model's\n"
               "training.recompute_modules names, by default the attention core (core_attn;\n"
               "also layernorm, mla_up_proj, moe_act), and the tuner may add full recompute\n"
               "per stage where memory needs it; none = the tuner may add it), none (no\n"
               "recompute at all), selective (no full recompute), full (every stage)");
  flags.String("fixed_partition", &o.fixed_partition,
               "keep this partition: each stage's FIRST-LAST layers, e.g. 0-13,14-27,28-53");
  flags.String("fixed_placement", &o.fixed_placement,
               "with --fixed_partition, each stage's device, e.g. 0,1,0 (else the tuner places)");
  remote.AddFlags(flags);
}

// Step 0: --report is checked before any work: a path that cannot be written, or a remote
// plan (the planner returns figures, not timelines).
absl::Status CheckReportFlag(const std::string& report, const PlannerConnection& remote) {
  if (report.empty()) return absl::OkStatus();
  if (!remote.address.empty()) {
    return absl::InvalidArgumentError(
        "--report needs a local plan, not --planner (the planner returns figures, not "
        "timelines); write the plan with --out and run `octopipe simulate --plan=FILE "
        "--report=PAGE.html`");
  }
  return report::CheckReportPath("--report", ResolvePath(report));
}

// Step 1: the tuner's options from the flags, the model and the cluster (errors name the flag).
absl::StatusOr<TunerOptions> ResolveTunerOptions(const PlanOptions& o, const CommandLine& flags,
                                                 const ModelGraph& model,
                                                 const Cluster& cluster) {
  TunerOptions t;
  const int64_t devices = flags.was_set("devices") ? o.devices : cluster.num_devices();
  // Without one pipeline the layout search's pipelines are at most as deep as the model, and
  // the limit on micro-batches holds per pipeline: the global batch over the most replicas
  // the layout can have (--dp, else one per GPU; the search skips layouts above the limit).
  const bool one_pipeline = OnePipeline(flags, cluster);
  const int64_t global =
      flags.was_set("microbatches") ? o.microbatches : model.training.num_microbatches;
  const int64_t replicas = one_pipeline ? 1 : o.dp > 0 ? o.dp : std::max(1, cluster.num_devices());
  const int64_t limit = octopipe::SizeLimits().max_microbatches;
  if (replicas > 1 && global > 0 && (global + replicas - 1) / replicas > limit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--microbatches: ", global, " exceeds the limit of ", limit,
        " (max_microbatches) per pipeline: ", (global + replicas - 1) / replicas,
        " each over at most ", replicas, " replicas"));
  }
  RETURN_IF_ERROR(CheckRunFlags(
      model,
      one_pipeline ? devices
                   : std::min<int64_t>(cluster.num_devices(), std::max(1, model.num_layers())),
      t.max_chunks, global > 0 ? (global + replicas - 1) / replicas : global,
      o.threads > 0 ? o.threads : t.threads));
  t.num_devices = static_cast<int>(devices);
  t.num_microbatches = static_cast<int>(flags.was_set("microbatches")
                                            ? o.microbatches
                                            : model.training.num_microbatches);
  if (t.num_microbatches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--microbatches must be >= 1, got ", t.num_microbatches));
  }
  absl::StatusOr<Objective> objective = ParseObjective(o.objective);
  if (!objective.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", objective.status().message()));
  }
  t.objective = *objective;
  if (o.threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--threads must be >= 0 (0: one per core), got ", o.threads));
  }
  t.time_budget_s = o.time_budget;
  t.seed = static_cast<uint64_t>(o.seed);
  if (o.threads > 0) t.threads = static_cast<int>(o.threads);
  if (o.budget_clock == "reads") {
    if (o.threads > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--budget_clock=reads needs one evaluation thread (--threads=1), got --threads=",
          o.threads));
    }
    t.threads = 1;
    t.clock = std::make_shared<ReadCountingClock>(kSecondsPerBudgetRead);
  } else if (o.budget_clock != "wall") {
    return absl::InvalidArgumentError(
        absl::StrCat("--budget_clock must be wall or reads, got '", o.budget_clock, "'"));
  }
  t.link_contention = o.contention;
  absl::StatusOr<VocabParallelMode> vocab = ParseVocabParallelMode(o.vocab_parallel);
  if (!vocab.ok()) return absl::InvalidArgumentError(absl::StrCat("--", vocab.status().message()));
  t.vocab_parallel = *vocab;
  t.constraints.allow_bw_split = !o.no_bw_split;
  t.constraints.allow_recompute = !o.no_recompute;
  if (o.max_stages_per_device < 0 || o.max_stages_per_device > t.max_chunks * 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_stages_per_device must be in [0, ", t.max_chunks * 4, "], got ",
        o.max_stages_per_device));
  }
  t.constraints.max_stages_per_device = static_cast<int>(o.max_stages_per_device);
  if (!o.fixed_placement.empty() && o.fixed_partition.empty()) {
    return absl::InvalidArgumentError("--fixed_placement needs --fixed_partition");
  }
  ASSIGN_OR_RETURN(t.constraints.fixed_stages,
                   ParseFixedStages(o.fixed_partition, o.fixed_placement));
  t.constraints.fixed_placement = !o.fixed_placement.empty();
  return t;
}

// The layout the flags fix (0: chosen). --devices asks for one pipeline and excludes them.
absl::StatusOr<LayoutRequest> ResolveLayoutRequest(const PlanOptions& o,
                                                   const CommandLine& flags) {
  LayoutRequest req;
  for (const auto& [name, value] : {std::pair{"pp", o.pp}, std::pair{"tp", o.tp},
                                    std::pair{"ep", o.ep}, std::pair{"dp", o.dp}}) {
    if (value < 0 || value > 4096) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " must be in [0, 4096] (0: chosen), got ", value));
    }
    if (value > 0 && flags.was_set("devices")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", name, ": --devices asks for one pipeline over the first devices; leave it out to "
          "choose or fix the PP x TP x EP x DP layout"));
    }
  }
  if (o.max_layouts < 1 || o.max_layouts > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_layouts must be in [1, 64], got ", o.max_layouts));
  }
  req.pp = static_cast<int>(o.pp);
  req.tp = static_cast<int>(o.tp);
  req.ep = static_cast<int>(o.ep);
  req.dp = static_cast<int>(o.dp);
  req.max_tuned = static_cast<int>(o.max_layouts);
  req.max_microbatches_per_pipeline = static_cast<int>(octopipe::SizeLimits().max_microbatches);
  return req;
}

// The tuner names its option ("time_budget_s must be > 0"); the user sees the flag.
absl::Status NameTheFlag(const absl::Status& s) {
  std::string msg(s.message());
  for (const auto& [option, flag] : {std::pair{"devices", "devices"},
                                     std::pair{"microbatches", "microbatches"},
                                     std::pair{"time_budget_s", "time_budget"},
                                     std::pair{"layout.pp", "pp"}, std::pair{"layout.tp", "tp"},
                                     std::pair{"layout.ep", "ep"}, std::pair{"layout.dp", "dp"},
                                     std::pair{"fixed_stages", "fixed_partition"},
                                     std::pair{"max_stages_per_device",
                                               "max_stages_per_device"}}) {
    if (absl::StartsWith(msg, option)) {
      msg = absl::StrCat("--", flag, msg.substr(std::string(option).size()));
      break;
    }
  }
  return absl::Status(s.code(), msg);
}

// Step 3a: --out, the plan file with its prediction (what `simulate --plan` re-evaluates and
// `train --plan` runs): a LayoutPlan (core/layout_plan.h), each pipeline's plan with its own
// prediction.
proto::Prediction PredictionOf(const TuneResult& r) {
  proto::Prediction pred;
  pred.set_iteration_time_s(r.predicted.iteration_time_s);
  pred.set_steady_state_iteration_time_s(r.predicted.steady_state_iteration_time_s);
  pred.set_bubble_ratio(r.predicted.bubble_ratio);
  pred.set_steady_state_bubble_ratio(r.predicted.steady_state_bubble_ratio);
  pred.set_tokens_per_s(r.predicted.tokens_per_s);
  for (const DeviceResult& d : r.predicted.devices) {
    pred.add_peak_memory_bytes(d.peak_memory_bytes);
  }
  return pred;
}

}  // namespace

void RecordPlannedWith(const PlanOptions& o, proto::LayoutPrediction* predicted) {
  predicted->set_ep_comm_overlap(o.ep_overlap);
  if (o.recompute != "auto") predicted->set_recompute(o.recompute);
  predicted->set_contention(o.contention);
}

namespace {

absl::Status WriteLayoutFile(const std::string& path, const LayoutPlan& layout,
                             const std::vector<const TuneResult*>& tuned,
                             proto::LayoutPrediction predicted, const PlanOptions& o) {
  proto::LayoutPlan p = LayoutPlanToProto(layout);
  for (size_t i = 0; i < tuned.size() && i < static_cast<size_t>(p.pipelines_size()); ++i) {
    *p.mutable_pipelines(static_cast<int>(i))->mutable_plan()->mutable_predicted() =
        PredictionOf(*tuned[i]);
  }
  RecordPlannedWith(o, &predicted);
  *p.mutable_predicted() = predicted;
  LayoutPlanFileForm(&p);
  absl::Status s = WriteStringToFile(ResolvePath(path), ProtoToJson(p) + "\n");
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat("--out: ", s.message()));
  return absl::OkStatus();
}

absl::Status WritePlanFile(const std::string& path, const TuneResult& r, const PlanOptions& o) {
  proto::LayoutPrediction predicted;
  predicted.set_iteration_time_s(r.predicted.iteration_time_s);
  predicted.set_pipeline_time_s(r.predicted.iteration_time_s);
  predicted.set_tokens_per_s(r.predicted.tokens_per_s);
  for (const DeviceResult& d : r.predicted.devices) {
    predicted.add_peak_memory_bytes(d.peak_memory_bytes);
  }
  return WriteLayoutFile(path, SinglePipelineLayout(r.plan), {&r}, predicted, o);
}

absl::Status WritePlanFile(const std::string& path, const LayoutResult& r,
                           const PlanOptions& o) {
  // The layout as the executor runs it (tuner/layout_simulation.h: gradient all-reduces
  // overlapped with the backward), or the search's estimate when it could not be simulated.
  proto::LayoutPrediction predicted;
  const bool simulated = r.simulation_error.empty() && r.simulated.iteration_time_s > 0;
  predicted.set_iteration_time_s(simulated ? r.simulated.iteration_time_s : r.iteration_time_s);
  predicted.set_pipeline_time_s(simulated ? r.simulated.pipeline_time_s : r.pipeline_time_s);
  predicted.set_dp_sync_s(simulated ? r.simulated.dp_sync_exposed_s : r.dp_sync_s);
  predicted.set_tokens_per_s(simulated ? r.simulated.tokens_per_s : r.tokens_per_s);
  if (simulated) {
    for (double b : r.simulated.peak_memory_bytes) predicted.add_peak_memory_bytes(b);
  }
  std::vector<const TuneResult*> tuned;
  for (const LayoutPipeline& p : r.pipelines) tuned.push_back(&p.tune);
  return WriteLayoutFile(path, ToLayoutPlan(r), tuned, predicted, o);
}

// Step 3b: --trace, the plan's timeline re-simulated with timeline recording on.
absl::Status WritePlanTrace(const std::string& path, const ModelGraph& model,
                            const Cluster& cluster, const CostModel& cost, bool contention,
                            const Plan& plan) {
  ASSIGN_OR_RETURN(PipelineProblem pb, BuildProblem(model, cluster, cost, plan));
  pb.link_contention = contention;
  ASSIGN_OR_RETURN(SimResult timeline, Simulate(pb, plan.schedule, EvalOptions{.timeline = true}));
  return WriteChromeTrace(ResolvePath(path), plan.schedule, timeline,
                          absl::StrCat(model.name, " / octopipe plan"));
}

// Step 3c: --report, the HTML page (report/html_report.h): the plan's timeline re-simulated as
// for --trace, the best fitting baseline's under it, and every baseline's iteration as a bar.
report::Page PlanPageHeader(const std::string& model, const std::string& cluster,
                            const TuneResult& t) {
  report::Page page;
  page.command = "octopipe plan";
  page.model = model;
  page.cluster = cluster;
  page.iteration_s = t.predicted.iteration_time_s;
  page.bubble_ratio = t.predicted.bubble_ratio;
  page.tokens_per_s = t.predicted.tokens_per_s;
  if (!t.feasible) page.facts.push_back({"INFEASIBLE:", t.infeasible_reason});
  page.facts.push_back({"origin", PlanOriginText(t)});
  if (!t.best_baseline.empty()) {
    page.facts.push_back({"speed-up", absl::StrFormat("%.3fx over %s", t.speedup_vs_best_baseline,
                                                      t.best_baseline)});
  }
  page.bars = BaselineBars(t);
  return page;
}

// The page's errors (a simulation that fails, input it cannot draw) name --report.
absl::Status WriteReport(const std::string& path, absl::StatusOr<report::Page> page) {
  if (!page.ok()) {
    return absl::Status(page.status().code(), absl::StrCat("--report: ", page.status().message()));
  }
  return report::WriteHtmlReport("--report", ResolvePath(path), *page);
}

absl::StatusOr<report::Page> PlanPage(const ModelGraph& model, const Cluster& cluster,
                                      const CostModel& cost, bool contention,
                                      const TuneResult& t) {
  report::Page page = PlanPageHeader(model.name, cluster.name, t);
  page.facts.push_back({"devices", absl::StrCat(t.plan.num_devices)});
  page.facts.push_back({"micro-batches", absl::StrCat(t.plan.num_microbatches)});
  page.bars_title = "Iteration time against the baselines (same simulator, same costs)";
  ASSIGN_OR_RETURN(report::Section s,
                   TunedSection("Plan", model, cluster, cost, contention, t));
  page.sections.push_back(std::move(s));
  return page;
}

// A layout: every distinct pipeline with the replicas and ranks that run it; the header's
// figures are the layout's as the executor runs it (or the search's estimate).
absl::StatusOr<report::Page> LayoutPage(const Cluster& cluster, const CostModel& cost,
                                        bool contention, const LayoutResult& r) {
  const LayoutPipeline& slowest = r.pipelines.front();
  report::Page page = PlanPageHeader(r.model.name, cluster.name, slowest.tune);
  const bool simulated = r.simulation_error.empty() && r.simulated.iteration_time_s > 0;
  page.iteration_s = simulated ? r.simulated.iteration_time_s : r.iteration_time_s;
  page.bubble_ratio = simulated ? r.simulated.bubble_ratio : slowest.tune.predicted.bubble_ratio;
  page.tokens_per_s = simulated ? r.simulated.tokens_per_s : r.tokens_per_s;
  page.facts.insert(page.facts.begin(),
                    {{"layout", r.layout.ToString()},
                     {"ranks", absl::StrCat(r.layout.gpus())},
                     {"micro-batches", absl::StrCat(r.global_microbatches, " (",
                                                    r.microbatches, " per replica)")}});
  page.bars_title = "Pipeline 0 (the slowest) against its baselines (same simulator, same costs)";
  const LayoutPlan plan = ToLayoutPlan(r);
  for (size_t i = 0; i < r.pipelines.size(); ++i) {
    const LayoutPipeline& p = r.pipelines[i];
    const std::string title =
        absl::StrCat("Pipeline ", i, i == 0 ? " (the slowest)" : "", ": ", p.replicas.size(),
                     p.replicas.size() == 1 ? " replica" : " replicas");
    ASSIGN_OR_RETURN(report::Section s,
                     TunedSection(title, r.model, p.cluster, cost, contention, p.tune));
    if (i < plan.pipelines.size()) {
      s.replicas = ReplicasOf(plan, static_cast<int>(i));
      LabelLayoutDevices(plan, static_cast<int>(i), &s);
    }
    page.sections.push_back(std::move(s));
  }
  return page;
}

// Step 2 (local): tune, write the requested files, print; exit 3 when infeasible.
int RunLocalPlan(const ModelGraph& model, const Cluster& cluster, const TunerOptions& t,
                 const PlanOptions& o, const std::string& report, std::ostream& out,
                 std::ostream& err) {
  const CostModel cost;
  absl::StatusOr<TuneResult> r = Tune(model, cluster, cost, t);
  if (!r.ok()) return FailPlan(err, NameTheFlag(r.status()), 2);
  if (!o.out.empty()) {
    if (absl::Status s = WritePlanFile(o.out, *r, o); !s.ok()) return FailPlan(err, s, 1);
  }
  if (!o.trace.empty()) {
    absl::Status s = WritePlanTrace(o.trace, model, cluster, cost, o.contention, r->plan);
    if (!s.ok()) return FailPlan(err, s, 1);
  }
  if (!report.empty()) {
    absl::Status s = WriteReport(report, PlanPage(model, cluster, cost, o.contention, *r));
    if (!s.ok()) return FailPlan(err, s, 1);
  }
  if (o.json) {
    out << JsonText(TuneResultJson(model, *r)) << "\n";
  } else {
    WriteTables(out, model, cluster, *r, t.objective == Objective::kSteadyState);
    if (!o.out.empty()) out << "\nplan written to " << o.out << "\n";
    if (!report.empty()) out << "report written to " << report << "\n";
  }
  return r->feasible ? 0 : 3;
}

// Step 2 (local, no --devices): choose the layout, tune its pipelines, print; exit 3 when
// infeasible. --out and --trace are the slowest pipeline's (devices numbered in the pipeline).
int RunLocalLayoutPlan(const ModelGraph& model, const Cluster& cluster, const TunerOptions& t,
                       LayoutRequest req, const PlanOptions& o, const std::string& report,
                       std::ostream& out, std::ostream& err) {
  const CostModel cost;
  req.global_microbatches = t.num_microbatches;
  absl::StatusOr<LayoutResult> r = TuneLayout(model, cluster, cost, t, req);
  if (!r.ok()) return FailPlan(err, NameTheFlag(r.status()), 2);
  const LayoutPipeline& slowest = r->pipelines.front();
  if (!o.out.empty()) {
    if (absl::Status s = WritePlanFile(o.out, *r, o); !s.ok()) return FailPlan(err, s, 1);
  }
  if (!o.trace.empty()) {
    absl::Status s =
        WritePlanTrace(o.trace, r->model, slowest.cluster, cost, o.contention, slowest.tune.plan);
    if (!s.ok()) return FailPlan(err, s, 1);
  }
  if (!report.empty()) {
    absl::Status s = WriteReport(report, LayoutPage(cluster, cost, o.contention, *r));
    if (!s.ok()) return FailPlan(err, s, 1);
  }
  if (o.json) {
    Json j = TuneResultJson(r->model, slowest.tune);
    j["layout"] = LayoutJson(cluster, *r);
    j["feasible"] = r->feasible;
    out << JsonText(j) << "\n";
  } else {
    WriteLayoutTables(out, cluster, *r);
    WriteTables(out, r->model, slowest.cluster, slowest.tune,
                t.objective == Objective::kSteadyState);
    if (!o.out.empty()) {
      out << "\nlayout plan written to " << o.out << " (" << r->pipelines.size()
          << " distinct pipelines, " << r->layout.dp << " replicas, " << r->layout.gpus()
          << " ranks; run it with `octopipe train --plan=" << o.out << " --ranks="
          << r->layout.gpus() << "` where the model allows)\n";
    }
    if (!report.empty()) out << "report written to " << report << "\n";
  }
  return r->feasible ? 0 : 3;
}

}  // namespace

int RunPlan(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  PlanOptions o;
  std::string report;  // --report (not in PlanOptions, which plan_command.h holds)
  PlannerConnection remote;
  CommandLine flags("plan",
                    "Tunes partition, placement and schedule together (the bubble-aware tuner), "
                    "reports the plan, its predicted iteration time, bubble and memory, and "
                    "every baseline's figures in the same simulator.");
  DeclareFlags(flags, o, &report, remote);
  if (absl::Status s = flags.Parse(args); !s.ok()) return FailPlan(err, s, 2);
  if (flags.help_requested()) {
    out << flags.Usage();
    return 0;
  }
  if (absl::Status s = CheckReportFlag(report, remote); !s.ok()) return FailPlan(err, s, 2);
  absl::StatusOr<ModelGraph> model = LoadModelArg(o.model);
  if (!model.ok()) return FailPlan(err, model.status(), 2);
  if (o.ep_overlap) model->training.ep_comm_overlap = true;
  absl::StatusOr<Cluster> cluster = LoadClusterArg(o.cluster);
  if (!cluster.ok()) return FailPlan(err, cluster.status(), 2);
  absl::StatusOr<TunerOptions> t = ResolveTunerOptions(o, flags, *model, *cluster);
  if (!t.ok()) return FailPlan(err, t.status(), 2);
  if (absl::Status s = ApplyRecomputeChoice(o.recompute, "--recompute", &*model, &t->constraints);
      !s.ok()) {
    return FailPlan(err, s, 2);
  }
  if (!o.quiet && !o.json) {
    t->progress = [&err](const TuneLogEntry& e) {
      err << absl::StrFormat("[%6.2f s] %-10s best %s (%d candidates)\n", e.wall_s, e.phase,
                             FormatSeconds(e.after_s), e.evaluations);
    };
  }
  absl::StatusOr<LayoutRequest> layout = ResolveLayoutRequest(o, flags);
  if (!layout.ok()) return FailPlan(err, layout.status(), 2);
  if (!remote.address.empty()) {
    return RunRemotePlan(remote, *model, *cluster, *t, *layout, !OnePipeline(flags, *cluster), o,
                         flags, out, err);
  }
  if (!OnePipeline(flags, *cluster)) {
    return RunLocalLayoutPlan(*model, *cluster, *t, *layout, o, report, out, err);
  }
  return RunLocalPlan(*model, *cluster, *t, o, report, out, err);
}

}  // namespace octopipe::cli
