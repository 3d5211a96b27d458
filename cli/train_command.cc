#include "cli/train_command.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "core/status_macros.h"
#include "cli/command_line.h"
#include "cli/inputs.h"
#include "cli/planner_client.h"
#include "core/convert.h"
#include "cli/table.h"
#include "core/json_text.h"
#include "executor/transport_factory.h"
#include "executor/model_spec.h"
#include "executor/trainer.h"
#include "worker_agent/local_run.h"
#include "simulator/classic_pipeline.h"
#include "simulator/evaluator.h"
#include "simulator/problem.h"

namespace octopipe::cli {
namespace {

using executor::ModelSpec;

int Fail(std::ostream& err, const absl::Status& s, int code) {
  err << "octopipe train: error: " << s.message() << "\n";
  return code;
}

}  // namespace

int RunTrain(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  // Big enough that compute, not loopback messaging, dominates an op (~10 ms).
  std::string model = "ref:pattern=M*-EM*-E,hidden=128,heads=4,ffn=256,experts=4,top_k=2,"
                      "moe_ffn=128,state=8,expand=2,seq=128,vocab=256";
  std::string plan_file, schedule = "1f1b", transport = "gloo";
  int64_t ranks = 2, iterations = 3, microbatches = 0, chunks = 0;
  double lr = 1e-3, timeout = 60;
  bool json = false;
  CommandLine flags("train",
                "Runs a pipeline plan on the executor's reference model (embedding, selective\n"
                "scan, attention, SwiGLU MLP, top-k MoE, head; fp32 on CPU) with one process\n"
                "per rank over Gloo/TCP (or threads in one process), and reports loss, measured\n"
                "iteration time and bubble ratio, and the simulator's prediction from the\n"
                "measured op times.");
  flags.String("model", &model,
               "ref:pattern=LETTERS,hidden=..,... (M scan, * attention, - MLP, E MoE; see\n"
               "executor/model_spec.h for every key)");
  flags.String("plan", &plan_file, "plan file (from `octopipe plan --model=ref:... --out`)");
  flags.String("schedule", &schedule,
               "classic schedule when no --plan: gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-v,\n"
               "dualpipev (layers split evenly)");
  flags.Int("chunks", &chunks, "chunks per rank for --schedule; 0 = the schedule's own");
  flags.Int("ranks", &ranks, "pipeline ranks (processes or threads)");
  flags.Int("iterations", &iterations, "training iterations");
  flags.Int("microbatches", &microbatches, "micro-batches per iteration; 0 = the model spec's");
  flags.String("transport", &transport,
               "gloo (processes over TCP), nccl (processes, one GPU each; fails clearly without\n"
               "GPUs), auto (nccl when a GPU is present, else gloo), or inproc (threads)");
  flags.Double("lr", &lr, "AdamW learning rate");
  flags.Double("timeout", &timeout, "seconds a rank waits on a peer before failing");
  flags.Bool("json", &json, "print one JSON object");
  // Closing the loop with a planner: run its job's current plan and report the measured times.
  PlannerConnection planner;
  planner.AddFlags(flags);
  std::string job;
  flags.String("job", &job,
               "with --planner: run this job's current plan (instead of --plan/--schedule) and\n"
               "report the measured stage times to the planner, which may re-plan the job");
  if (absl::Status s = flags.Parse(args); !s.ok()) return Fail(err, s, 2);
  if (flags.help_requested()) {
    out << flags.Usage();
    return 0;
  }
  absl::StatusOr<ModelSpec> spec = executor::ParseModelSpec(model);
  if (!spec.ok()) return Fail(err, absl::InvalidArgumentError(absl::StrCat("--model: ", spec.status().message())), 2);
  if (microbatches > 0) spec->microbatches = static_cast<int>(microbatches);
  if (ranks < 1) return Fail(err, absl::InvalidArgumentError(absl::StrCat("--ranks must be >= 1, got ", ranks)), 2);
  if (iterations < 1) return Fail(err, absl::InvalidArgumentError(absl::StrCat("--iterations must be >= 1, got ", iterations)), 2);
  absl::StatusOr<executor::TransportKind> transport_kind = executor::ParseTransportKind(transport);
  if (!transport_kind.ok()) {
    return Fail(err, absl::InvalidArgumentError(absl::StrCat("--", transport_kind.status().message())),
                2);
  }
  const ModelGraph graph = executor::ToModelGraph(*spec);
  Plan plan;
  int64_t job_version = 0;
  std::unique_ptr<proto::Planner::Stub> stub;
  if (!job.empty()) {
    auto connected = planner.Connect();
    if (!connected.ok()) return Fail(err, connected.status(), 2);
    stub = std::move(*connected);
    proto::GetJobRequest g;
    g.set_job_id(job);
    proto::GetJobResponse got;
    auto ctx = planner.Context();
    grpc::Status s = stub->GetJob(ctx.get(), g, &got);
    if (!s.ok()) return Fail(err, FromGrpc(s), 1);
    if (!got.has_current()) {
      return Fail(err, absl::FailedPreconditionError(absl::StrCat(
                           "--job: ", job, " has no plan yet; wait for it (octopipe jobs watch)")), 1);
    }
    absl::StatusOr<Plan> p = PlanFromProto(got.current().result().plan());
    if (!p.ok()) return Fail(err, p.status(), 1);
    if (absl::Status v = ValidatePlanShape(*p, graph.num_layers()); !v.ok()) {
      return Fail(err, absl::InvalidArgumentError(absl::StrCat(
                           "--job: its plan does not fit --model: ", v.message())), 2);
    }
    plan = std::move(*p);
    job_version = got.current().version();
    ranks = plan.num_devices;
    spec->microbatches = plan.num_microbatches;
  } else if (!plan_file.empty()) {
    absl::StatusOr<Plan> p = LoadPlanArg(plan_file);
    if (!p.ok()) return Fail(err, p.status(), 2);
    plan = std::move(*p);
    if (absl::Status s = ValidatePlanShape(plan, graph.num_layers()); !s.ok()) {
      return Fail(err, absl::InvalidArgumentError(absl::StrCat("--plan: ", s.message())), 2);
    }
    if (plan.num_devices != ranks) {
      return Fail(err, absl::InvalidArgumentError(absl::StrCat(
                           "--ranks: the plan uses ", plan.num_devices, " devices, got ", ranks)), 2);
    }
  } else {
    absl::StatusOr<ScheduleKind> kind = ParseScheduleKind(schedule);
    if (!kind.ok()) return Fail(err, absl::InvalidArgumentError(absl::StrCat("--schedule: ", kind.status().message())), 2);
    absl::StatusOr<Plan> p = ClassicPlan(*kind, static_cast<int>(ranks), static_cast<int>(chunks),
                                         spec->microbatches, graph);
    if (!p.ok()) return Fail(err, absl::InvalidArgumentError(absl::StrCat("--", p.status().message())), 2);
    plan = std::move(*p);
  }
  executor::TrainOptions options;
  options.iterations = static_cast<int>(iterations);
  options.lr = lr;
  const int N = static_cast<int>(ranks);

  // Run the ranks and measure (the worker agent library's one implementation).
  agent::LocalRunOptions run;
  run.transport = transport;
  run.timeout_s = timeout;
  run.train = options;
  absl::StatusOr<agent::RunMeasurement> m = agent::RunPlanLocally(*spec, plan, run);
  if (!m.ok()) {
    if (absl::IsAborted(m.status())) {
      err << absl::StrReplaceAll(m.status().message(), {{"rank ", "octopipe train: rank "}})
          << "\n";
      return 1;
    }
    return Fail(err, m.status(), 1);
  }
  const int K = static_cast<int>(iterations);
  const std::vector<double>& loss = m->loss;
  const std::vector<double>& wall = m->iteration_s;
  const std::vector<double>& bubble = m->bubble;
  // Prediction: the plan's schedule in the simulator with each (stage, kind)'s mean measured
  // duration.
  auto avg = [&](int s, OpKind k) {
    auto it = m->stage_op_s.find({s, k});
    return it == m->stage_op_s.end() ? 0.0 : it->second.first;
  };
  std::vector<int> placement;
  for (const StageAssignment& st : plan.stages) placement.push_back(st.device);
  PipelineProblem pb = UniformProblem(placement, N, plan.num_microbatches, 0, 0, 0);
  for (int s = 0; s < plan.num_stages(); ++s) {
    pb.recompute[s] = plan.stages[s].recompute;
    pb.forward_s[s] = avg(s, OpKind::kF);
    pb.recompute_s[s] = avg(s, OpKind::kR);
    const double b = avg(s, OpKind::kB), w = avg(s, OpKind::kW), bw = avg(s, OpKind::kBW);
    pb.backward_input_s[s] = b > 0 ? b : bw;
    pb.weight_grad_s[s] = b > 0 ? w : 0;
  }
  absl::StatusOr<SimResult> predicted = Simulate(pb, plan.schedule);
  if (!predicted.ok()) return Fail(err, predicted.status(), 1);
  const double measured = m->mean_iteration_s, measured_bubble = m->mean_bubble;
  const double error = predicted->iteration_time_s / measured - 1;
  std::string report_decision;
  if (stub) {
    proto::ReportStageTimesRequest req;
    req.set_job_id(job);
    req.set_plan_version(job_version);
    req.set_node_id("octopipe-train");
    for (const auto& [key, mean_n] : m->stage_op_s) {
      proto::StageTime* t = req.add_times();
      t->set_stage(key.first);
      t->set_op_kind(std::string(OpKindName(key.second)));
      t->set_seconds(mean_n.first);
      t->set_samples(mean_n.second);
    }
    // Per-layer times: each layer calibrates itself, wherever the next plan puts it.
    for (const auto& [key, mean_n] : m->layer_op_s) {
      proto::LayerOpTime* t = req.add_layer_times();
      t->set_layer(key.first);
      t->set_op_kind(std::string(OpKindName(key.second)));
      t->set_seconds(mean_n.first);
      t->set_samples(mean_n.second);
    }
    proto::ReportStageTimesResponse resp;
    auto ctx = planner.Context();
    grpc::Status s = stub->ReportStageTimes(ctx.get(), req, &resp);
    if (!s.ok()) return Fail(err, FromGrpc(s), 1);
    report_decision = absl::StrCat("reported to the planner (", job, " v", job_version, "): ",
                                   resp.decision());
  }
  if (json) {
    Json j = {{"ranks", N},
              {"transport", transport},
              {"schedule", plan_file.empty() ? schedule : plan_file},
              {"loss", loss},
              {"iteration_time_s", wall},
              {"bubble_ratio", bubble},
              {"measured_iteration_time_s", measured},
              {"measured_bubble_ratio", measured_bubble},
              {"predicted_iteration_time_s", predicted->iteration_time_s},
              {"predicted_bubble_ratio", predicted->bubble_ratio},
              {"prediction_error", error},
              {"peak_activation_bytes", m->peak_activation_bytes}};  // per rank
    if (!report_decision.empty()) j["planner_report"] = report_decision;
    out << JsonText(j) << "\n";
    return 0;
  }
  out << "model " << graph.name << " (" << graph.num_layers() << " layers), " << N << " ranks over "
      << transport << ", " << plan.num_stages() << " stages, " << plan.num_microbatches
      << " micro-batches\n\n";
  TextTable t({"iteration", "loss", "time", "bubble"});
  for (int it = 0; it < K; ++it) {
    t.AddRow({absl::StrCat(it), absl::StrFormat("%.5f", loss[it]), FormatSeconds(wall[it]),
              FormatPercent(bubble[it])});
  }
  out << t.Render();
  out << "\nmeasured iteration " << FormatSeconds(measured) << ", bubble "
      << FormatPercent(measured_bubble) << (K > 1 ? " (after the first iteration)" : "") << "\n";
  out << "simulator with the measured op times: " << FormatSeconds(predicted->iteration_time_s)
      << ", bubble " << FormatPercent(predicted->bubble_ratio) << " ("
      << absl::StrFormat("%+.1f%%", error * 100) << " vs measured)\n";
  if (!report_decision.empty()) out << report_decision << "\n";
  return 0;
}

}  // namespace octopipe::cli
