#include "cli/train_command.h"

#include <cmath>
#include <cstdlib>
#include <functional>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "core/status_macros.h"
#include "cli/command_line.h"
#include "cli/inputs.h"
#include "cli/planner_client.h"
#include "cli/report_page.h"
#include "core/convert.h"
#include "cli/table.h"
#include "cli/train_layout_output.h"
#include "core/json_text.h"
#include "executor/transport_factory.h"
#include "executor/host_probe.h"
#include "executor/model_spec.h"
#include "executor/layout_trainer.h"
#include "executor/trainer.h"
#include "worker_agent/local_run.h"
#include "simulator/classic_pipeline.h"
#include "simulator/evaluator.h"
#include "simulator/problem.h"
#include "simulator/problem_builder.h"
#include "report/html_report.h"
#include "simulator/trace.h"
#include "tuner/layout_simulation.h"
#include "calibration/host_speed.h"
#include "calibration/layer_calibration.h"
#include "core/cost_model.h"

namespace octopipe::cli {
namespace {

using executor::ModelSpec;

int Fail(std::ostream& err, const absl::Status& s, int code) {
  err << "octopipe train: error: " << s.message() << "\n";
  return code;
}

// --host_probe's default: probe when --profile has a host-speed reference to compare with, this
// many times (~0.3-0.5 s on measured_win's models; 5 let one transient phase move the median).
constexpr int64_t kAutoHostProbe = -1;
constexpr int64_t kAutoHostProbeRepeats = 9;

// The flags of `octopipe train`, with their defaults.
struct TrainFlags {
  // Big enough that compute, not loopback messaging, dominates an op (~10 ms).
  std::string model = "ref:pattern=M*-EM*-E,hidden=128,heads=4,ffn=256,experts=4,top_k=2,"
                      "moe_ffn=128,state=8,expand=2,seq=128,vocab=256";
  std::string plan_file, schedule = "1f1b", transport = "gloo", job, profile, calibrated_model,
      trace, report;
  int64_t ranks = 2, iterations = 3, microbatches = 0, chunks = 0, host_probe = -1;
  double lr = 1e-3, timeout = 60, rotate_cores_ms = 0;
  bool json = false;
  PlannerConnection planner;
};

void DeclareFlags(CommandLine& flags, TrainFlags& o) {
  flags.String("model", &o.model,
               "ref:pattern=LETTERS,hidden=..,... (M scan, * attention, - MLP, E MoE; see\n"
               "executor/model_spec.h for every key)");
  flags.String("plan", &o.plan_file,
               "plan file (from `octopipe plan --model=ref:... --out`; not with --job)");
  flags.String("schedule", &o.schedule,
               "classic schedule when no --plan: gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-v,\n"
               "dualpipev (layers split evenly)");
  flags.Int("chunks", &o.chunks, "chunks per rank for --schedule; 0 = the schedule's own");
  flags.String("profile", &o.profile,
               "with --schedule: PREFIX of `octopipe profile --out=PREFIX`; the schedule's order\n"
               "is built for the measured costs, the same order `octopipe simulate\n"
               "--model=PREFIX.model.json --cluster=PREFIX.cluster.json` predicts (without it\n"
               "the ZB schedules use their unit-cost orders)");
  flags.String("calibrated_model", &o.calibrated_model,
               "with --profile: after the run, write PREFIX.model.json calibrated to this run's\n"
               "measured per-layer times (one factor per layer) to this file, at this run's host\n"
               "speed, its host-speed reference the probe's workload by those times; re-plan\n"
               "with --model=FILE --cluster=PREFIX.cluster.json");
  flags.Int("host_probe", &o.host_probe,
            "time this many host-speed probes on every rank before the first iteration (one\n"
            "micro-batch through every layer in one process, executor/host_probe.h; ~1 ms-1 s\n"
            "each); with --profile: compare with the profile's host-speed reference (the probe's\n"
            "workload by its per-layer medians) and predict the plan at\n"
            "the host's current speed, before its iterations run; 0 = off; -1 (the default) =\n"
            "9 with a --profile that has a host-speed reference, else off");
  flags.Int("ranks", &o.ranks, "pipeline ranks (processes or threads)");
  flags.Int("iterations", &o.iterations, "training iterations");
  flags.Int("microbatches", &o.microbatches, "micro-batches per iteration; 0 = the model spec's");
  flags.String("transport", &o.transport,
               "gloo (processes over TCP), nccl (processes, one GPU each; fails clearly without\n"
               "GPUs), auto (nccl when a GPU is present, else gloo), or inproc (threads)");
  flags.Double("lr", &o.lr, "AdamW learning rate");
  flags.Double("timeout", &o.timeout, "seconds a rank waits on a peer before failing");
  flags.Double("rotate_cores_ms", &o.rotate_cores_ms,
               "every this many ms, move each rank's computing thread to the next CPU, so\n"
               "that every rank runs at the mean core's speed where the cores differ (a shared\n"
               "VM; see executor/core_rotation.h); 0 = off. Needs a CPU per rank");
  flags.Bool("json", &o.json, "print one JSON object");
  flags.String("report", &o.report,
               "write an HTML page (report/html_report.h): the last iteration's measured\n"
               "timeline and, on the same axis, the simulator's timeline from this run's\n"
               "measured op times, with the stages and each rank's peak activation memory\n"
               "(single-pipeline runs; the path is checked before the run)");
  flags.String("trace", &o.trace,
               "write the last iteration's measured timeline (every rank's ops on one time\n"
               "axis) as Chrome trace JSON, the format of `octopipe simulate --trace`: open both\n"
               "in ui.perfetto.dev to see where the prediction and the run part");
  // Closing the loop with a planner: run its job's current plan and report the measured times.
  o.planner.AddFlags(flags);
  flags.String("job", &o.job,
               "with --planner: run this job's current plan (not with --plan; instead of\n"
               "--schedule) and report the measured stage times to the planner, which may\n"
               "re-plan the job");
}

// What to run: the plan, and where it came from when it is a planner job's.
struct TrainTarget {
  Plan plan;
  int64_t job_version = 0;
  std::unique_ptr<PlannerClient> planner;  // set for --job
};

// Step 1: the plan from --job (the planner's current version), --plan (`loaded`: the file's
// one pipeline, read by the caller) or --schedule; sets o.ranks and spec->microbatches from a
// job's plan. On an error, *exit_code is the exit code (2: bad usage, 1: the planner failed).
absl::StatusOr<TrainTarget> ResolvePlan(TrainFlags& o, const ModelGraph& graph, ModelSpec* spec,
                                        std::optional<Plan> loaded, int* exit_code) {
  TrainTarget t;
  *exit_code = 2;
  if (!o.job.empty()) {
    ASSIGN_OR_RETURN(t.planner, o.planner.Connect());
    proto::GetJobRequest g;
    g.set_job_id(o.job);
    proto::GetJobResponse got;
    *exit_code = 1;
    grpc::Status s = t.planner->Call(PlannerClient::Route::kAny, &proto::Planner::Stub::GetJob,
                                     g, &got);
    if (!s.ok()) return FromGrpc(s);
    if (!got.has_current()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--job: ", o.job, " has no plan yet; wait for it (octopipe jobs watch)"));
    }
    ASSIGN_OR_RETURN(t.plan, PlanFromProto(got.current().result().plan()));
    *exit_code = 2;
    if (absl::Status v = ValidatePlanShape(t.plan, graph.num_layers()); !v.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--job: its plan does not fit --model: ", v.message()));
    }
    t.job_version = got.current().version();
    o.ranks = t.plan.num_devices;
    spec->microbatches = t.plan.num_microbatches;
    return t;
  }
  if (loaded.has_value()) {
    t.plan = std::move(*loaded);
    if (absl::Status s = ValidatePlanShape(t.plan, graph.num_layers()); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--plan: ", s.message()));
    }
    if (t.plan.num_devices != o.ranks) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--ranks: the plan uses ", t.plan.num_devices, " devices, got ", o.ranks,
          " (the executor runs one pipeline over its ranks: run it with --ranks=",
          t.plan.num_devices, ", or plan one over ", o.ranks, " devices with `octopipe plan "
          "--devices=", o.ranks, "`; without --devices, plan chooses a PP x TP x EP x DP "
          "layout and --out holds one pipeline of it)"));
    }
    return t;
  }
  absl::StatusOr<ScheduleKind> kind = ParseScheduleKind(o.schedule);
  if (!kind.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--schedule: ", kind.status().message()));
  }
  absl::StatusOr<Plan> p = TrainClassicPlan(*kind, static_cast<int>(o.ranks),
                                            static_cast<int>(o.chunks), spec->microbatches,
                                            graph, o.profile);
  if (!p.ok()) return absl::Status(p.status().code(), absl::StrCat("--", p.status().message()));
  t.plan = std::move(*p);
  return t;
}

// What a run's measured iteration time is compared with: the simulator's steady-state period.
// The ranks run their iterations back to back with no barrier between them (each steps its own
// optimizer after its last op), so a rank that finishes an iteration early starts the next while
// others finish: a rank's loop takes the longest per-device span, not the isolated iteration's
// first-op-to-last-op time (measured: the tuned scan-vocab plan ran 4% faster than its isolated
// iteration even with the run's own op times; its steady-state period matched).
double Period(const SimResult& r) {
  return r.steady_state_iteration_time_s > 0 ? r.steady_state_iteration_time_s : r.iteration_time_s;
}
double PeriodBubble(const SimResult& r) {
  return r.steady_state_iteration_time_s > 0 ? r.steady_state_bubble_ratio : r.bubble_ratio;
}

// Step 2: the simulator's prediction for the plan's schedule with each (stage, kind)'s mean
// measured duration.
absl::StatusOr<SimResult> PredictFromMeasured(const Plan& plan, int ranks,
                                              const agent::RunMeasurement& m) {
  auto avg = [&](int s, OpKind k) {
    auto it = m.stage_op_s.find({s, k});
    return it == m.stage_op_s.end() ? 0.0 : it->second.first;
  };
  std::vector<int> placement;
  for (const StageAssignment& st : plan.stages) placement.push_back(st.device);
  PipelineProblem pb = UniformProblem(placement, ranks, plan.num_microbatches, 0, 0, 0);
  for (int s = 0; s < plan.num_stages(); ++s) {
    pb.recompute[s] = plan.stages[s].recompute;
    pb.forward_s[s] = avg(s, OpKind::kF);
    pb.recompute_s[s] = avg(s, OpKind::kR);
    const double b = avg(s, OpKind::kB), w = avg(s, OpKind::kW), bw = avg(s, OpKind::kBW);
    pb.backward_input_s[s] = b > 0 ? b : bw;
    pb.weight_grad_s[s] = b > 0 ? w : 0;
  }
  if (plan.vocab_parallel) {  // each rank's shard passes; its messages, like all, cost nothing
    pb.vocab_parallel = true;
    pb.vocab_activation_bytes.assign(ranks, 0.0);
    for (int d = 0; d < ranks; ++d) {
      pb.vocab_s_s.push_back(avg(d, OpKind::kS));
      pb.vocab_t_s.push_back(avg(d, OpKind::kT));
    }
  }
  EvalOptions timeline;
  timeline.timeline = true;  // for --report
  return Simulate(pb, plan.schedule, timeline);
}

// Step 3 (--job): reports the measured stage and per-layer times; returns the planner's
// decision as a line for the output.
absl::StatusOr<std::string> ReportToPlanner(TrainFlags& o, const TrainTarget& t,
                                            const agent::RunMeasurement& m) {
  proto::ReportStageTimesRequest req;
  req.set_job_id(o.job);
  req.set_plan_version(t.job_version);
  req.set_node_id("octopipe-train");
  for (const auto& [key, mean_n] : m.stage_op_s) {
    proto::StageTime* st = req.add_times();
    st->set_stage(key.first);
    st->set_kind(OpKindToProto(key.second));
    st->set_seconds(mean_n.first);
    st->set_samples(mean_n.second);
  }
  // Per-layer times: each layer calibrates itself, wherever the next plan puts it.
  for (const auto& [key, mean_n] : m.layer_op_s) {
    proto::LayerOpTime* lt = req.add_layer_times();
    lt->set_layer(key.first);
    lt->set_kind(OpKindToProto(key.second));
    lt->set_seconds(mean_n.first);
    lt->set_samples(mean_n.second);
  }
  proto::ReportStageTimesResponse resp;
  grpc::Status s =
      t.planner->Call(PlannerClient::Route::kLeader, &proto::Planner::Stub::ReportStageTimes, req,
                      &resp, /*idempotent=*/false);
  if (!s.ok()) return FromGrpc(s);
  return absl::StrCat("reported to the planner (", o.job, " v", t.job_version, "): ",
                      resp.decision());
}

// --profile's files, loaded once before the run for the steps after it (calibration, host speed).
struct ProfileFiles {
  ModelGraph model;
  Cluster cluster;
};

// Step 3b (--calibrated_model): fits one factor per layer of the profile's model to the run's
// measured times (the planner's FitMeasuredTimes: per-layer times, and a split head's from its
// vocabulary passes) and writes the calibrated model. Returns a line for the output.
absl::StatusOr<std::string> WriteCalibratedModel(const TrainFlags& o, const ProfileFiles& profile,
                                                 const Plan& plan,
                                                 const agent::RunMeasurement& m) {
  const ModelGraph& model = profile.model;
  const Cluster& cluster = profile.cluster;
  if (model.num_layers() != static_cast<int>(plan.stages.back().last_layer) + 1) {
    return absl::InvalidArgumentError(absl::StrCat("--profile: ", model.num_layers(),
                                                   " layers, the plan has ",
                                                   plan.stages.back().last_layer + 1));
  }
  ASSIGN_OR_RETURN(ProblemBuilder builder,
                   ProblemBuilder::Create(model, cluster, CostModel(), plan.num_devices, {},
                                          plan.vocab_parallel));
  std::vector<MeasuredStageTime> stage_times;
  for (const auto& [key, mean_n] : m.stage_op_s) {
    stage_times.push_back({key.first, key.second, mean_n.first, mean_n.second});
  }
  std::vector<MeasuredLayerTime> times;
  for (const auto& [key, mean_n] : m.layer_op_s) {
    times.push_back({key.first, key.second, mean_n.first, mean_n.second});
  }
  ASSIGN_OR_RETURN(CalibrationUpdate fit,
                   FitMeasuredTimes(builder, plan, stage_times, times, {}));
  // The calibrated model is at this run's host speed, and its host-speed reference is its own
  // probe workload (ProbeWorkloadSeconds), as a profile's is: a later run's probe against it
  // gives that run's speed. The run's own probe is not used here: 0.3-0.5 s of probing caught a
  // transient phase 15% slower than the run's iterations (measured_win run 22, scan-vocab), where
  // the run's summed layer times, hundreds of samples, carry the same information.
  // The layer that deviates most (FitMeasuredTimes reports the stages'): from the factors.
  int worst = -1;
  double worst_dev = 0;
  for (int l = 0; l < static_cast<int>(fit.factors.size()); ++l) {
    if (std::abs(fit.factors[l] - 1) > worst_dev) {
      worst_dev = std::abs(fit.factors[l] - 1);
      worst = l;
    }
  }
  ASSIGN_OR_RETURN(ModelGraph calibrated, ApplyLayerFactors(model, fit.factors));
  calibrated.host_probe_s = executor::ProbeWorkloadSeconds(calibrated);
  calibrated.source = absl::StrCat(model.source, "; calibrated to a run of ", plan.schedule_name);
  RETURN_IF_ERROR(WriteModelFile(ResolvePath(o.calibrated_model), calibrated));
  return absl::StrFormat(
      "calibrated %s: largest layer deviation %+.1f%% (layer %d)%s; wrote %s",
      o.profile + ".model.json", worst >= 0 ? 100 * (fit.factors[worst] - 1) : 0.0, worst,
      calibrated.host_probe_s > 0
          ? absl::StrFormat(", at this run's host speed (host-speed reference %s, the profile's %s)",
                            FormatSeconds(calibrated.host_probe_s), FormatSeconds(model.host_probe_s))
          : "",
      o.calibrated_model);
}

// --trace: the last iteration as the simulator's Chrome trace shows a prediction, from the
// measured op starts and ends (ranks run their ops in the schedule's order).
// The last iteration's measured timeline as a SimResult's op times (every rank on one axis);
// kInternal naming `flag` when a rank's timed ops do not match its schedule.
absl::StatusOr<SimResult> MeasuredTimeline(const char* flag, const Plan& plan,
                                           const agent::RunMeasurement& m) {
  SimResult timeline;
  timeline.op_start_s = m.last_op_start_s;
  timeline.op_end_s = m.last_op_end_s;
  for (int d = 0; d < plan.schedule.num_devices(); ++d) {
    const size_t ops = plan.schedule.ops[d].size();
    if (d >= static_cast<int>(timeline.op_start_s.size()) ||
        timeline.op_start_s[d].size() != ops) {
      return absl::InternalError(absl::StrCat(
          flag, ": rank ", d, " reported ",
          d < static_cast<int>(timeline.op_start_s.size()) ? timeline.op_start_s[d].size() : 0,
          " timed ops, its schedule has ", ops));
    }
    for (double end : timeline.op_end_s[d]) {
      timeline.iteration_time_s = std::max(timeline.iteration_time_s, end);
    }
  }
  return timeline;
}

absl::Status WriteMeasuredTrace(const std::string& path, const Plan& plan,
                                const agent::RunMeasurement& m) {
  ASSIGN_OR_RETURN(SimResult timeline, MeasuredTimeline("--trace", plan, m));
  return WriteChromeTrace(ResolvePath(path), plan.schedule, timeline,
                          absl::StrCat("measured: ", plan.schedule_name));
}

std::string RanSchedule(const TrainFlags& o, const Plan& plan);

// --report: the measured last iteration above the simulator's timeline from the measured op
// times (`predicted`, simulated with the timeline), the stages and each rank's peak
// activation bytes, and the two iterations as bars.
absl::Status WriteTrainReport(const TrainFlags& o, const ModelGraph& graph, const Plan& plan,
                              const agent::RunMeasurement& m, const SimResult& predicted) {
  ASSIGN_OR_RETURN(const SimResult measured, MeasuredTimeline("--report", plan, m));
  report::Section section;
  section.title = "measured run";
  section.plan = ReportTimeline("measured", plan.schedule, measured);
  section.baseline = ReportTimeline("predicted", plan.schedule, predicted);
  section.baseline_caption =
      "predicted: the simulator with this run's measured op times (messages free)";
  for (const StageAssignment& st : plan.stages) {
    section.stages.push_back(
        {st.first_layer, st.last_layer, st.device, st.recompute, StageKinds(graph, st)});
  }
  for (size_t d = 0; d < m.peak_activation_bytes.size(); ++d) {
    section.memory.push_back({absl::StrCat("rank ", d), m.peak_activation_bytes[d], 0});
  }
  report::Page page;
  page.command = "octopipe train";
  page.model = graph.name;
  page.cluster = absl::StrCat(o.ranks, " ranks over ", o.transport);
  page.iteration_s = m.mean_iteration_s;
  page.bubble_ratio = m.mean_bubble;
  page.tokens_per_s =
      m.mean_iteration_s > 0 ? graph.tokens_per_microbatch() * plan.num_microbatches /
                                   m.mean_iteration_s
                             : 0;
  page.facts = {{"schedule", RanSchedule(o, plan)},
                {"iterations", absl::StrCat(o.iterations)},
                {"predicted iteration", FormatSeconds(predicted.iteration_time_s)}};
  page.sections.push_back(std::move(section));
  page.bars_title = "the measured iteration against the prediction";
  page.bars = {{"measured", m.mean_iteration_s, true, true},
               {"predicted", predicted.iteration_time_s, true, false}};
  return report::WriteHtmlReport("--report", ResolvePath(o.report), page);
}

// The schedule run, for the output: a planner job's or a --plan file's own schedule name
// ("octopipe", "baseline:1f1b", ...; else the job id or the file), or the --schedule kind.
std::string RanSchedule(const TrainFlags& o, const Plan& plan) {
  if (!o.job.empty()) return plan.schedule_name.empty() ? o.job : plan.schedule_name;
  if (!o.plan_file.empty()) return plan.schedule_name.empty() ? o.plan_file : plan.schedule_name;
  return o.schedule;
}

// Step 4: the result, as one JSON object or as tables.
// Below this share of a core, a rank's compute was visibly disturbed.
constexpr double kDisturbedCpuShare = 0.9;

// The profile at the host's speed now: every layer time and the per-op and per-message CPU
// costs scaled by `ratio` (link times unchanged).
absl::StatusOr<ProfileFiles> AtHostSpeed(const ProfileFiles& profile, double ratio) {
  ProfileFiles out{profile.model, profile.cluster};
  RETURN_IF_ERROR(ScaleToHostSpeed(ratio, &out.model, &out.cluster));
  return out;
}

// The run's probes against the profile's; with a ratio, `predict` (an iteration from a
// profile) on the profile as measured and at the host's speed now.
using PredictFromProfile = std::function<absl::StatusOr<double>(const ProfileFiles&)>;
absl::StatusOr<HostSpeed> CompareHostSpeed(const ProfileFiles* profile,
                                           const agent::RunMeasurement& m,
                                           const PredictFromProfile& predict) {
  HostSpeed h;
  h.probe_s = m.host_probe_s;
  if (profile == nullptr) return h;
  h.profile_probe_s = profile->model.host_probe_s;
  const double now = executor::MedianProbeSeconds(m.host_probe_s);
  if (!(h.profile_probe_s > 0) || !(now > 0)) return h;
  h.ratio = now / h.profile_probe_s;
  ASSIGN_OR_RETURN(h.predicted_from_profile_s, predict(*profile));
  ASSIGN_OR_RETURN(const ProfileFiles at, AtHostSpeed(*profile, h.ratio));
  ASSIGN_OR_RETURN(h.predicted_at_host_speed_s, predict(at));
  return h;
}

// A pipeline's period (its iterations follow each other without a barrier) from a profile.
PredictFromProfile PipelinePeriod(const Plan& plan) {
  return [&plan](const ProfileFiles& p) -> absl::StatusOr<double> {
    ASSIGN_OR_RETURN(PipelineProblem pb, BuildProblem(p.model, p.cluster, CostModel(), plan));
    ASSIGN_OR_RETURN(SimResult r, Simulate(pb, plan.schedule));
    return Period(r);
  };
}

// A pipeline run's result as --json: the measurement, the simulator's prediction from the
// measured op times, and where given the job, the planner's report and the host-speed probe.
void PrintResultJson(const TrainFlags& o, const Plan& plan, int64_t job_version,
                     const agent::RunMeasurement& m, const SimResult& predicted,
                     const HostSpeed& host, const std::string& report_decision,
                     const std::string& calibration, std::ostream& out) {
  const double measured = m.mean_iteration_s, measured_bubble = m.mean_bubble;
  const double error = Period(predicted) / measured - 1;
  Json j = {{"ranks", static_cast<int>(o.ranks)},
            {"transport", o.transport},
            {"schedule", RanSchedule(o, plan)},
            {"loss", m.loss},
            {"iteration_time_s", m.iteration_s},
            {"bubble_ratio", m.bubble},
            {"measured_iteration_time_s", measured},
            {"measured_bubble_ratio", measured_bubble},
            {"predicted_iteration_time_s", Period(predicted)},
            {"predicted_bubble_ratio", PeriodBubble(predicted)},
            {"prediction_error", error},
            {"peak_activation_bytes", m.peak_activation_bytes},      // per rank
            {"compute_cpu_share", m.compute_cpu_share},             // per rank
            {"comm_cpu_per_message_s", m.comm_cpu_per_message_s}};  // per rank
  AddMeasuredOpTimes(m, /*stages=*/true, &j);
  if (!o.plan_file.empty()) j["plan"] = o.plan_file;
  if (!o.job.empty()) {
    j["job"] = o.job;
    j["plan_version"] = job_version;
  }
  if (!report_decision.empty()) j["planner_report"] = report_decision;
  if (!calibration.empty()) j["calibration"] = calibration;
  AddHostSpeedJson(host, &j);
  out << JsonText(j) << "\n";
}

// A pipeline run's table of iterations, its measured iteration and bubble, and the simulator's
// prediction from the measured op times.
void PrintMeasurementText(const TrainFlags& o, const ModelGraph& graph, const Plan& plan,
                          const agent::RunMeasurement& m, const SimResult& predicted,
                          std::ostream& out) {
  const double measured = m.mean_iteration_s, measured_bubble = m.mean_bubble;
  const double error = Period(predicted) / measured - 1;
  const int K = static_cast<int>(m.loss.size());
  out << "model " << graph.name << " (" << graph.num_layers() << " layers), "
      << static_cast<int>(o.ranks) << " ranks over " << o.transport << ", schedule "
      << RanSchedule(o, plan) << ", " << plan.num_stages() << " stages, "
      << plan.num_microbatches << " micro-batches\n\n";
  TextTable t({"iteration", "loss", "time", "bubble"});
  for (int it = 0; it < K; ++it) {
    t.AddRow({absl::StrCat(it), absl::StrFormat("%.5f", m.loss[it]),
              FormatSeconds(m.iteration_s[it]), FormatPercent(m.bubble[it])});
  }
  out << t.Render();
  out << "\nmeasured iteration " << FormatSeconds(measured) << ", bubble "
      << FormatPercent(measured_bubble) << (K > 1 ? " (after the first iteration)" : "") << "\n";
  out << "simulator with the measured op times: " << FormatSeconds(Period(predicted))
      << ", bubble " << FormatPercent(PeriodBubble(predicted)) << " (steady state, "
      << absl::StrFormat("%+.1f%%", error * 100) << " vs measured)\n";
}

// A rank whose computing thread waited for its core ran its ops longer than they cost.
void PrintDisturbedRanks(const agent::RunMeasurement& m, std::ostream& out) {
  for (int r = 0; r < static_cast<int>(m.compute_cpu_share.size()); ++r) {
    if (m.compute_cpu_share[r] < kDisturbedCpuShare) {
      out << "rank " << r << ": its compute had " << FormatPercent(m.compute_cpu_share[r])
          << " of a core (other threads or processes ran on it): op times are inflated\n";
    }
  }
}

// The host-speed probe and, against the profile's reference, the predictions from the
// profile as profiled and at the host's speed now (`measured`: the measured iteration).
void PrintHostSpeed(const HostSpeed& host, double measured, std::ostream& out) {
  out << "host-speed probe " << FormatSeconds(executor::MedianProbeSeconds(host.probe_s))
      << " (median over " << host.probe_s.size() << " ranks, before the first iteration)";
  if (host.ratio > 0) {
    out << "; the profile's reference " << FormatSeconds(host.profile_probe_s) << ": ops take "
        << absl::StrFormat("%.3fx", host.ratio) << " their profiled time now\n"
        << "prediction from the profile " << FormatSeconds(host.predicted_from_profile_s)
        << " (" << absl::StrFormat("%+.1f%%", (host.predicted_from_profile_s / measured - 1) * 100)
        << " vs measured), at the host's speed now "
        << FormatSeconds(host.predicted_at_host_speed_s) << " ("
        << absl::StrFormat("%+.1f%%", (host.predicted_at_host_speed_s / measured - 1) * 100)
        << ")";
  }
  out << "\n";
}

void PrintResult(const TrainFlags& o, const ModelGraph& graph, const Plan& plan,
                 int64_t job_version, const agent::RunMeasurement& m, const SimResult& predicted,
                 const HostSpeed& host, const std::string& report_decision,
                 const std::string& calibration, std::ostream& out) {
  if (o.json) {
    PrintResultJson(o, plan, job_version, m, predicted, host, report_decision, calibration, out);
    return;
  }
  PrintMeasurementText(o, graph, plan, m, predicted, out);
  PrintDisturbedRanks(m, out);
  if (!host.probe_s.empty()) PrintHostSpeed(host, m.mean_iteration_s, out);
  if (!report_decision.empty()) out << report_decision << "\n";
  if (!calibration.empty()) out << calibration << "\n";
}

// A layout's iteration (SimulateLayout) from a profile.
PredictFromProfile LayoutIteration(const LayoutPlan& layout) {
  return [&layout](const ProfileFiles& p) -> absl::StatusOr<double> {
    ASSIGN_OR_RETURN(LayoutSimulation r, SimulateLayout(p.model, p.cluster, CostModel(), layout));
    return r.iteration_time_s;
  };
}

// The flags a layout run cannot honour, and whether the layout runs with --ranks on this model.
absl::Status CheckLayoutTrainFlags(const TrainFlags& o, const ModelSpec& spec,
                                   const LayoutPlan& layout) {
  if (!o.calibrated_model.empty() || !o.trace.empty() || !o.report.empty() || !o.job.empty()) {
    return absl::InvalidArgumentError(
        "--calibrated_model, --trace, --report and --job run single-pipeline "
        "plans; this --plan is a layout (" + layout.layout.ToString() + ")");
  }
  if (o.ranks != layout.num_ranks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ranks: the layout ", layout.layout.ToString(), " in ", o.plan_file, " runs on ",
        layout.num_ranks, " ranks (", layout.pipelines.size(), " distinct pipelines, ",
        layout.num_replicas(), " replicas), got ", o.ranks, ": run it with --ranks=",
        layout.num_ranks));
  }
  if (absl::Status s = executor::CheckLayoutRunnable(spec, layout); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--plan: ", s.message()));
  }
  return absl::OkStatus();
}

// How the flags run a layout's ranks locally.
agent::LocalRunOptions LayoutRunOptions(const TrainFlags& o) {
  agent::LocalRunOptions run;
  run.transport = *executor::ParseTransportKind(o.transport);  // checked in RunTrain
  run.timeout_s = o.timeout;
  run.train.iterations = static_cast<int>(o.iterations);
  run.train.lr = o.lr;
  run.train.core_rotation_s = o.rotate_cores_ms / 1e3;
  run.train.host_probe_repeats = static_cast<int>(o.host_probe);
  return run;
}

// A --plan file holding a whole layout (several pipelines or replicas, or TP): run every rank
// of it (executor::TrainLayoutRank through agent::RunLayoutLocally) and report loss, time and
// tokens/s against the prediction the file carries.
int RunLayoutTrain(const TrainFlags& o, const ModelSpec& spec, const ModelGraph& graph,
                   const LayoutPlan& layout, const proto::LayoutPrediction& predicted,
                   const ProfileFiles* profile, std::ostream& out, std::ostream& err) {
  if (absl::Status s = CheckLayoutTrainFlags(o, spec, layout); !s.ok()) return Fail(err, s, 2);
  absl::StatusOr<agent::RunMeasurement> m =
      agent::RunLayoutLocally(spec, layout, LayoutRunOptions(o));
  if (!m.ok()) {
    if (absl::IsAborted(m.status())) {
      err << absl::StrReplaceAll(m.status().message(), {{"rank ", "octopipe train: rank "}})
          << "\n";
      return 1;
    }
    return Fail(err, m.status(), 1);
  }
  absl::StatusOr<HostSpeed> host =
      CompareHostSpeed(o.host_probe > 0 ? profile : nullptr, *m, LayoutIteration(layout));
  if (!host.ok()) return Fail(err, host.status(), 1);
  const LayoutFigures f = MakeLayoutFigures(graph, layout, predicted, *m, *host);
  if (o.json) {
    PrintLayoutJson(o.transport, layout, *m, *host, f, out);
  } else {
    PrintLayoutText(o.transport, graph, layout, *m, *host, f, out);
  }
  return 0;
}

// --model as a model spec, with --microbatches applied.
absl::StatusOr<ModelSpec> ParseTrainModel(const TrainFlags& o) {
  absl::StatusOr<ModelSpec> spec = executor::ParseModelSpec(o.model);
  if (!spec.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--model: ", spec.status().message()));
  }
  if (o.microbatches > 0) spec->microbatches = static_cast<int>(o.microbatches);
  return spec;
}

// --ranks, --calibrated_model and --host_probe, then --profile's files when a step needs them
// (the host probe or calibration); resolves --host_probe's auto value (off without a profile
// to compare with).
absl::StatusOr<std::optional<ProfileFiles>> LoadTrainProfile(TrainFlags* o) {
  if (o->ranks < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--ranks must be >= 1, got ", o->ranks));
  }
  if (!o->calibrated_model.empty() && o->profile.empty()) {
    return absl::InvalidArgumentError(
        "--calibrated_model needs --profile=PREFIX (the model to calibrate)");
  }
  if (o->host_probe < kAutoHostProbe) {
    return absl::InvalidArgumentError(
        absl::StrCat("--host_probe must be >= 0 (0 = off) or -1 (auto), got ", o->host_probe));
  }
  std::optional<ProfileFiles> profile;
  if (!o->profile.empty() && (o->host_probe != 0 || !o->calibrated_model.empty())) {
    absl::StatusOr<ModelGraph> model = LoadModelArg(o->profile + ".model.json");
    absl::StatusOr<Cluster> cluster =
        model.ok() ? LoadClusterArg(o->profile + ".cluster.json") : model.status();
    if (!cluster.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--profile: ", cluster.status().message()));
    }
    profile = ProfileFiles{std::move(*model), std::move(*cluster)};
    if (o->host_probe == kAutoHostProbe) {
      o->host_probe = profile->model.host_probe_s > 0 ? kAutoHostProbeRepeats : 0;
    }
    if (o->host_probe > 0 && !(profile->model.host_probe_s > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--host_probe: ", o->profile,
                       ".model.json has no host_probe_s (it "
                       "was profiled before octopipe profile timed the probe); profile again"));
    }
  }
  if (o->host_probe == kAutoHostProbe) o->host_probe = 0;  // no --profile to compare with
  return profile;
}

// The run's own flags: --report's path, --iterations, --lr, --timeout, --rotate_cores_ms, and
// --transport (returned parsed).
absl::StatusOr<executor::TransportKind> CheckRunFlags(const TrainFlags& o) {
  if (!o.report.empty()) {
    RETURN_IF_ERROR(report::CheckReportPath("--report", ResolvePath(o.report)));
  }
  if (o.iterations < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--iterations must be >= 1, got ", o.iterations));
  }
  if (!(o.lr > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("--lr must be > 0, got ", o.lr));
  }
  if (!(o.timeout > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--timeout must be > 0 seconds, got ", o.timeout));
  }
  if (!o.job.empty() && !o.plan_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--plan and --job both given (--plan=", o.plan_file, ", --job=", o.job,
        "): --job runs the job's current plan; give one of them"));
  }
  if (!(o.rotate_cores_ms >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rotate_cores_ms must be >= 0 (0 = off), got ", o.rotate_cores_ms));
  }
  absl::StatusOr<executor::TransportKind> transport_kind =
      executor::ParseTransportKind(o.transport);
  if (!transport_kind.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", transport_kind.status().message()));
  }
  return transport_kind;
}

// After a single pipeline's run: the prediction from its measured op times, the host-speed
// comparison, the planner report (--job), the calibrated model, trace and report files, and
// the result. The exit code.
int ReportTrainRun(TrainFlags& o, const ModelGraph& graph, const TrainTarget& target,
                   const ProfileFiles* profile, const agent::RunMeasurement& m, std::ostream& out,
                   std::ostream& err) {
  absl::StatusOr<SimResult> predicted =
      PredictFromMeasured(target.plan, static_cast<int>(o.ranks), m);
  if (!predicted.ok()) return Fail(err, predicted.status(), 1);
  absl::StatusOr<HostSpeed> host =
      CompareHostSpeed(o.host_probe > 0 ? profile : nullptr, m, PipelinePeriod(target.plan));
  if (!host.ok()) return Fail(err, host.status(), 1);
  std::string report_decision;
  if (target.planner) {
    absl::StatusOr<std::string> decision = ReportToPlanner(o, target, m);
    if (!decision.ok()) return Fail(err, decision.status(), 1);
    report_decision = *decision;
  }
  std::string calibration;
  if (!o.calibrated_model.empty()) {
    absl::StatusOr<std::string> line = WriteCalibratedModel(o, *profile, target.plan, m);
    if (!line.ok()) return Fail(err, line.status(), 1);
    calibration = *line;
  }
  if (!o.trace.empty()) {
    if (absl::Status s = WriteMeasuredTrace(o.trace, target.plan, m); !s.ok()) {
      return Fail(err, s, 1);
    }
  }
  if (!o.report.empty()) {
    if (absl::Status s = WriteTrainReport(o, graph, target.plan, m, *predicted); !s.ok()) {
      return Fail(err, s, 1);
    }
  }
  PrintResult(o, graph, target.plan, target.job_version, m, *predicted, *host, report_decision,
              calibration, out);
  if (!o.trace.empty() && !o.json) out << "measured timeline written to " << o.trace << "\n";
  if (!o.report.empty() && !o.json) out << "report written to " << o.report << "\n";
  return 0;
}

}  // namespace

absl::StatusOr<Plan> TrainClassicPlan(ScheduleKind kind, int ranks, int chunks, int microbatches,
                                      const ModelGraph& graph, const std::string& profile_prefix) {
  if (profile_prefix.empty()) return ClassicPlan(kind, ranks, chunks, microbatches, graph);
  absl::StatusOr<ModelGraph> model = LoadModelArg(profile_prefix + ".model.json");
  if (!model.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("profile: ", model.status().message()));
  }
  absl::StatusOr<Cluster> cluster = LoadClusterArg(profile_prefix + ".cluster.json");
  if (!cluster.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("profile: ", cluster.status().message()));
  }
  if (model->num_layers() != graph.num_layers()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "profile: ", profile_prefix, ".model.json has ", model->num_layers(),
        " layers but --model has ", graph.num_layers(), "; profile this model"));
  }
  ClassicRequest request;
  request.kind = kind;
  request.devices = ranks;
  request.chunks = chunks;
  request.microbatches = microbatches;
  ASSIGN_OR_RETURN(ClassicRun run, SimulateClassic(*model, *cluster, CostModel(), request));
  return std::move(run.plan);
}

int RunTrain(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  TrainFlags o;
  CommandLine flags("train",
                "Runs a pipeline plan on the executor's reference model (embedding, selective\n"
                "scan, attention, SwiGLU MLP, top-k MoE, head; fp32 on CPU) with one process\n"
                "per rank over Gloo/TCP (or threads in one process), and reports loss, measured\n"
                "iteration time and bubble ratio, and the simulator's prediction from the\n"
                "measured op times.");
  DeclareFlags(flags, o);
  if (absl::Status s = flags.Parse(args); !s.ok()) return Fail(err, s, 2);
  if (flags.help_requested()) {
    out << flags.Usage();
    return 0;
  }
  absl::StatusOr<ModelSpec> spec = ParseTrainModel(o);
  if (!spec.ok()) return Fail(err, spec.status(), 2);
  absl::StatusOr<std::optional<ProfileFiles>> profile = LoadTrainProfile(&o);
  if (!profile.ok()) return Fail(err, profile.status(), 2);
  absl::StatusOr<executor::TransportKind> transport_kind = CheckRunFlags(o);
  if (!transport_kind.ok()) return Fail(err, transport_kind.status(), 2);
  const ModelGraph graph = executor::ToModelGraph(*spec);
  std::optional<Plan> loaded;
  if (!o.plan_file.empty()) {  // (not with --job: CheckRunFlags)
    // Read once: a layout file runs as a layout, a single pipeline below.
    proto::LayoutPrediction predicted;
    absl::StatusOr<LayoutPlan> layout = LoadLayoutPlanArg(o.plan_file, &predicted);
    if (!layout.ok()) return Fail(err, layout.status(), 2);
    if (predicted.ep_comm_overlap()) {
      err << "octopipe train: note: the plan was made with --ep_overlap (expert all-to-alls "
             "hidden behind other micro-batches' compute); this executor runs them in line, so "
             "compare its times with `octopipe simulate --plan=" << o.plan_file
          << " --ep_overlap=false`\n";
    }
    if (predicted.recompute() == "selective") {
      err << "octopipe train: note: the plan was made with --recompute=selective; this "
             "executor does not recompute parts of layers: it keeps every activation, so its "
             "memory and times are those of --recompute=none\n";
    }
    if (!layout->single_pipeline()) {
      return RunLayoutTrain(o, *spec, graph, *layout, predicted, *profile ? &**profile : nullptr,
                            out, err);
    }
    loaded = std::move(layout->pipelines[0].plan);
  }
  int code = 2;
  absl::StatusOr<TrainTarget> target = ResolvePlan(o, graph, &*spec, std::move(loaded), &code);
  if (!target.ok()) return Fail(err, target.status(), code);

  // Run the ranks and measure (the worker agent library's one implementation).
  agent::LocalRunOptions run;
  run.transport = *transport_kind;
  run.timeout_s = o.timeout;
  run.train.iterations = static_cast<int>(o.iterations);
  run.train.lr = o.lr;
  run.train.core_rotation_s = o.rotate_cores_ms / 1e3;
  run.train.host_probe_repeats = static_cast<int>(o.host_probe);
  absl::StatusOr<agent::RunMeasurement> m = agent::RunPlanLocally(*spec, target->plan, run);
  if (!m.ok()) {
    if (absl::IsAborted(m.status())) {
      err << absl::StrReplaceAll(m.status().message(), {{"rank ", "octopipe train: rank "}})
          << "\n";
      return 1;
    }
    return Fail(err, m.status(), 1);
  }
  return ReportTrainRun(o, graph, *target, *profile ? &**profile : nullptr, *m, out, err);
}

}  // namespace octopipe::cli
