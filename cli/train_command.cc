#include "cli/train_command.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "cli/command_line.h"
#include "cli/inputs.h"
#include "cli/planner_client.h"
#include "core/convert.h"
#include "cli/table.h"
#include "core/json_text.h"
#include "executor/transport_factory.h"
#include "executor/inproc_transport.h"
#include "executor/model_spec.h"
#include "executor/trainer.h"
#include "simulator/classic_pipeline.h"
#include "simulator/evaluator.h"
#include "simulator/problem.h"

namespace octopipe::cli {
namespace {

using executor::IterationStats;
using executor::ModelSpec;
using executor::RankResult;

int Fail(std::ostream& err, const absl::Status& s, int code) {
  err << "octopipe train: error: " << s.message() << "\n";
  return code;
}

// One rank's iterations as JSON (what a rank process hands to the parent). Ops are
// [name, start_s, end_s]; a loss that is not finite is written as null and read back as NaN.
std::string ResultJson(const RankResult& r) {
  Json iterations = Json::array();
  for (const IterationStats& it : r.iterations) {
    Json ops = Json::array();
    for (const executor::OpTiming& op : it.ops) {
      ops.push_back({OpToString(op.op), op.start_s, op.end_s});
    }
    Json layer_ops = Json::array();
    for (const executor::LayerOpTiming& t : it.layer_ops) {
      layer_ops.push_back({t.layer, static_cast<int>(t.kind), t.seconds});
    }
    iterations.push_back({{"has_loss", it.has_loss},
                          {"loss", it.loss},
                          {"wall_s", it.wall_s},
                          {"ops", std::move(ops)},
                          {"layer_ops", std::move(layer_ops)},
                          {"peak_activation_bytes", it.peak_activation_bytes}});
  }
  return JsonText({{"rank", r.rank}, {"iterations", std::move(iterations)}});
}

struct RankReport {
  std::vector<double> loss;  // per iteration (only the head's rank)
  std::vector<double> wall;
  std::vector<std::vector<std::pair<Op, double>>> ops;  // per iteration: (op, duration)
  // Per iteration: (layer, op kind) -> (seconds summed over micro-batches, count).
  std::vector<std::map<std::pair<int, int>, std::pair<double, int>>> layer_ops;
  std::vector<double> peak_activation_bytes;  // per iteration, the executor's own accounting
  bool has_loss = false;
};

absl::StatusOr<RankReport> ParseReport(const std::string& text) {
  try {
    const Json j = Json::parse(text);
    RankReport r;
    for (const Json& it : j.at("iterations")) {
      r.has_loss = it.at("has_loss").get<bool>();
      const Json& loss = it.at("loss");
      r.loss.push_back(loss.is_null() ? std::nan("") : loss.get<double>());
      r.wall.push_back(it.at("wall_s").get<double>());
      std::vector<std::pair<Op, double>> ops;
      for (const Json& op : it.at("ops")) {
        ASSIGN_OR_RETURN(Op o, ParseOp(op.at(0).get<std::string>()));
        ops.push_back({o, op.at(2).get<double>() - op.at(1).get<double>()});
      }
      r.ops.push_back(std::move(ops));
      std::map<std::pair<int, int>, std::pair<double, int>> layer_ops;
      for (const Json& t : it.at("layer_ops")) {
        auto& sum = layer_ops[{t.at(0).get<int>(), t.at(1).get<int>()}];
        sum.first += t.at(2).get<double>();
        ++sum.second;
      }
      r.layer_ops.push_back(std::move(layer_ops));
      r.peak_activation_bytes.push_back(it.at("peak_activation_bytes").get<double>());
    }
    return r;
  } catch (const Json::exception& e) {
    return absl::InternalError(absl::StrCat("a rank's report is malformed: ", e.what()));
  }
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

  // Run the ranks and collect each one's JSON report (or its error).
  std::vector<std::string> reports(N), errors(N);
  if (*transport_kind == executor::TransportKind::kInProc) {
    executor::InProcHub hub(N, executor::InProcOptions{.timeout_s = timeout});
    std::vector<std::thread> threads;
    for (int r = 0; r < N; ++r) {
      threads.emplace_back([&, r] {
        auto t = hub.Endpoint(r);
        absl::StatusOr<RankResult> res = executor::TrainRank(*spec, plan, r, t.get(), options);
        if (res.ok()) {
          reports[r] = ResultJson(*res);
        } else {
          errors[r] = std::string(res.status().message());
          hub.Abort(r);
        }
      });
    }
    for (auto& t : threads) t.join();
  } else {
    char tmpl[] = "/tmp/octopipe-train-XXXXXX";
    const char* dir = mkdtemp(tmpl);
    if (dir == nullptr) return Fail(err, absl::InternalError("cannot create a run directory"), 1);
    const std::string run_dir = dir;
    std::vector<pid_t> pids(N);
    for (int r = 0; r < N; ++r) {
      const pid_t pid = fork();
      if (pid < 0) {
        // Without this rank the others would only time out; and waitpid(-1) below would reap
        // an arbitrary child. Stop the ranks already started and report.
        const int fork_errno = errno;
        for (int k = 0; k < r; ++k) kill(pids[k], SIGKILL);
        for (int k = 0; k < r; ++k) {
          while (waitpid(pids[k], nullptr, 0) < 0 && errno == EINTR) {
          }
        }
        std::error_code ec;
        std::filesystem::remove_all(run_dir, ec);
        return Fail(err, absl::InternalError(absl::StrCat("cannot start rank ", r, ": fork: ",
                                                          std::strerror(fork_errno))),
                    1);
      }
      if (pid == 0) {
        executor::TransportConfig tc;
        tc.rank = r;
        tc.size = N;
        tc.store_dir = run_dir + "/store";
        tc.prefix = "run";
        tc.timeout_s = timeout;
        tc.cuda_device = r;
        absl::StatusOr<std::unique_ptr<executor::Transport>> t =
            executor::MakeTransport(*transport_kind, tc);
        absl::StatusOr<RankResult> res =
            t.ok() ? executor::TrainRank(*spec, plan, r, t->get(), options)
                   : absl::StatusOr<RankResult>(t.status());
        if (res.ok()) {
          std::ofstream(run_dir + "/rank-" + std::to_string(r) + ".json") << ResultJson(*res);
          _exit(0);
        }
        std::ofstream(run_dir + "/rank-" + std::to_string(r) + ".err") << res.status().message();
        _exit(1);
      }
      pids[r] = pid;
    }
    for (int r = 0; r < N; ++r) {
      int status = 0;
      pid_t waited;
      while ((waited = waitpid(pids[r], &status, 0)) < 0 && errno == EINTR) {
      }
      const int wait_errno = errno;
      const std::string base = run_dir + "/rank-" + std::to_string(r);
      std::ifstream in(base + ".json");
      if (waited < 0) {
        errors[r] = absl::StrCat("cannot wait for the rank's process: ", std::strerror(wait_errno));
      } else if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && in) {
        std::stringstream s;
        s << in.rdbuf();
        reports[r] = s.str();
      } else {
        std::ifstream e(base + ".err");
        std::stringstream s;
        s << e.rdbuf();
        errors[r] = s.str().empty()
                        ? (WIFSIGNALED(status) ? absl::StrCat("killed by signal ", WTERMSIG(status))
                                               : absl::StrCat("exited with status ", WEXITSTATUS(status)))
                        : s.str();
      }
    }
    std::error_code ec;
    std::filesystem::remove_all(run_dir, ec);
  }
  bool failed = false;
  for (int r = 0; r < N; ++r) {
    if (!errors[r].empty()) {
      err << "octopipe train: rank " << r << " failed: " << errors[r] << "\n";
      failed = true;
    }
  }
  if (failed) return 1;

  // Aggregate: loss from the head's rank, iteration time = slowest rank, bubble from busy time.
  std::vector<RankReport> rr(N);
  for (int r = 0; r < N; ++r) {
    absl::StatusOr<RankReport> p = ParseReport(reports[r]);
    if (!p.ok()) return Fail(err, p.status(), 1);
    rr[r] = std::move(*p);
  }
  const int K = static_cast<int>(iterations);
  std::vector<double> loss(K, 0), wall(K, 0), bubble(K, 0);
  for (int it = 0; it < K; ++it) {
    double busy = 0;
    for (int r = 0; r < N; ++r) {
      if (rr[r].has_loss) loss[it] = rr[r].loss[it];
      wall[it] = std::max(wall[it], rr[r].wall[it]);
      for (const auto& [op, d] : rr[r].ops[it]) busy += d;
    }
    bubble[it] = 1 - busy / (N * wall[it]);
  }
  // Prediction: the plan's schedule in the simulator with each (stage, kind)'s mean measured
  // duration, iterations after the first (warm-up) when there are several.
  const int first = K > 1 ? 1 : 0;
  std::map<std::pair<int, int>, std::pair<double, int>> mean;  // (stage, kind) -> (sum, n)
  for (int r = 0; r < N; ++r) {
    for (int it = first; it < K; ++it) {
      for (const auto& [op, d] : rr[r].ops[it]) {
        auto& m = mean[{op.stage, static_cast<int>(op.kind)}];
        m.first += d;
        ++m.second;
      }
    }
  }
  auto avg = [&](int s, OpKind k) {
    auto it = mean.find({s, static_cast<int>(k)});
    return it == mean.end() ? 0.0 : it->second.first / it->second.second;
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
  double measured = 0, measured_bubble = 0;
  for (int it = first; it < K; ++it) {
    measured += wall[it];
    measured_bubble += bubble[it];
  }
  measured /= (K - first);
  measured_bubble /= (K - first);
  const double error = predicted->iteration_time_s / measured - 1;
  std::string report_decision;
  if (stub) {
    proto::ReportStageTimesRequest req;
    req.set_job_id(job);
    req.set_plan_version(job_version);
    req.set_node_id("octopipe-train");
    for (const auto& [key, sum_n] : mean) {
      proto::StageTime* t = req.add_times();
      t->set_stage(key.first);
      t->set_op_kind(std::string(OpKindName(static_cast<OpKind>(key.second))));
      t->set_seconds(sum_n.first / sum_n.second);
      t->set_samples(sum_n.second);
    }
    // Per-layer times: each layer calibrates itself, wherever the next plan puts it.
    std::map<std::pair<int, int>, std::pair<double, int>> layer_mean;
    for (int r = 0; r < N; ++r) {
      for (int it = first; it < K; ++it) {
        for (const auto& [key, sum_n] : rr[r].layer_ops[it]) {
          layer_mean[key].first += sum_n.first;
          layer_mean[key].second += sum_n.second;
        }
      }
    }
    for (const auto& [key, sum_n] : layer_mean) {
      proto::LayerOpTime* t = req.add_layer_times();
      t->set_layer(key.first);
      t->set_op_kind(std::string(OpKindName(static_cast<OpKind>(key.second))));
      t->set_seconds(sum_n.first / sum_n.second);
      t->set_samples(sum_n.second);
    }
    proto::ReportStageTimesResponse resp;
    auto ctx = planner.Context();
    grpc::Status s = stub->ReportStageTimes(ctx.get(), req, &resp);
    if (!s.ok()) return Fail(err, FromGrpc(s), 1);
    report_decision = absl::StrCat("reported to the planner (", job, " v", job_version, "): ",
                                   resp.decision());
  }
  if (json) {
    Json peaks = Json::array();  // per rank, max over iterations
    for (int r = 0; r < N; ++r) {
      double peak = 0;
      for (double b : rr[r].peak_activation_bytes) peak = std::max(peak, b);
      peaks.push_back(peak);
    }
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
              {"peak_activation_bytes", std::move(peaks)}};
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
