#include "worker_agent/local_run.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "executor/inproc_transport.h"
#include "executor/layout_trainer.h"
#include "executor/transport_factory.h"
#include "nlohmann/json.hpp"

namespace octopipe::agent {
namespace {

using nlohmann::json;

// One rank's iterations: per iteration (has_loss, loss, wall, [(op, seconds)]).
struct RankReport {
  struct Iteration {
    bool has_loss = false;
    double loss = 0;
    double wall_s = 0;
    std::vector<std::pair<Op, double>> ops;
    std::vector<double> op_start_s;  // per op, since the iteration began
    double start_steady_s = 0;       // the iteration's start on the machine's steady clock
    std::vector<std::pair<std::pair<int, OpKind>, double>> layer_ops;  // ((layer, kind), s)
    double layer_cpu_s = 0;  // the computing thread's CPU time over all layer_ops
    double peak_activation_bytes = 0;
    double comm_cpu_s = 0;  // CPU time of the rank's other threads (communication)
    int messages = 0;       // sent + received
    double grad_sync_s = 0;       // the gradient all-reduces (layouts with data parallelism)
    double grad_sync_wait_s = 0;  // of the iteration, waited for them after the rank's ops
  };
  std::vector<Iteration> iterations;
  double host_probe_s = 0;  // 0: not probed
};

RankReport ReportOf(const executor::RankResult& r) {
  RankReport out;
  out.host_probe_s = r.host_probe.seconds;
  for (const executor::IterationStats& it : r.iterations) {
    RankReport::Iteration i;
    i.has_loss = it.has_loss;
    i.loss = it.loss;
    i.wall_s = it.wall_s;
    i.start_steady_s = it.start_steady_s;
    i.peak_activation_bytes = static_cast<double>(it.peak_activation_bytes);
    i.comm_cpu_s = it.comm_cpu_s();
    i.messages = it.messages;
    i.grad_sync_s = it.grad_sync_s;
    i.grad_sync_wait_s = it.grad_sync_wait_s;
    for (const executor::OpTiming& op : it.ops) {
      i.ops.push_back({op.op, op.end_s - op.start_s});
      i.op_start_s.push_back(op.start_s);
    }
    for (const executor::LayerOpTiming& t : it.layer_ops) {
      i.layer_ops.push_back({{t.layer, t.kind}, t.seconds});
      i.layer_cpu_s += t.cpu_seconds;
    }
    out.iterations.push_back(std::move(i));
  }
  return out;
}

std::string ReportJson(const RankReport& r) {
  json its = json::array();
  for (const RankReport::Iteration& it : r.iterations) {
    json ops = json::array();
    for (const auto& [op, s] : it.ops) ops.push_back({OpToString(op), s});
    json layer_ops = json::array();
    for (const auto& [key, s] : it.layer_ops) {
      layer_ops.push_back({key.first, static_cast<int>(key.second), s});
    }
    // A non-finite loss is written as null (JSON has no NaN) and read back as NaN.
    its.push_back({{"has_loss", it.has_loss}, {"loss", it.loss}, {"wall_s", it.wall_s},
                   {"ops", ops}, {"op_start_s", it.op_start_s},
                   {"start_steady_s", it.start_steady_s}, {"layer_ops", layer_ops},
                   {"layer_cpu_s", it.layer_cpu_s},
                   {"peak_activation_bytes", it.peak_activation_bytes},
                   {"comm_cpu_s", it.comm_cpu_s}, {"messages", it.messages},
                   {"grad_sync_s", it.grad_sync_s}, {"grad_sync_wait_s", it.grad_sync_wait_s}});
  }
  return json{{"iterations", its}, {"host_probe_s", r.host_probe_s}}.dump();
}

absl::StatusOr<RankReport> ParseReportJson(const std::string& text) {
  RankReport r;
  try {
    const json parsed = json::parse(text);
    r.host_probe_s = parsed.value("host_probe_s", 0.0);
    for (const json& it : parsed.at("iterations")) {
      RankReport::Iteration i;
      i.has_loss = it.at("has_loss").get<bool>();
      const json& loss = it.at("loss");
      i.loss = loss.is_null() ? std::nan("") : loss.get<double>();
      i.wall_s = it.at("wall_s").get<double>();
      for (const json& op : it.at("ops")) {
        ASSIGN_OR_RETURN(Op o, ParseOp(op.at(0).get<std::string>()));
        i.ops.push_back({o, op.at(1).get<double>()});
      }
      i.op_start_s = it.at("op_start_s").get<std::vector<double>>();
      i.start_steady_s = it.at("start_steady_s").get<double>();
      for (const json& t : it.at("layer_ops")) {
        i.layer_ops.push_back(
            {{t.at(0).get<int>(), static_cast<OpKind>(t.at(1).get<int>())}, t.at(2).get<double>()});
      }
      i.layer_cpu_s = it.at("layer_cpu_s").get<double>();
      i.peak_activation_bytes = it.at("peak_activation_bytes").get<double>();
      i.comm_cpu_s = it.at("comm_cpu_s").get<double>();
      i.messages = it.at("messages").get<int>();
      i.grad_sync_s = it.value("grad_sync_s", 0.0);
      i.grad_sync_wait_s = it.value("grad_sync_wait_s", 0.0);
      r.iterations.push_back(std::move(i));
    }
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("rank report: ", e.what()));
  }
  return r;
}

// Threads over the in-process transport.
void RunThreads(const executor::ModelSpec& spec, const LayoutPlan& plan, const LocalRunOptions& o,
                std::vector<RankReport>* reports, std::vector<std::string>* errors) {
  const int n = plan.num_ranks;
  executor::InProcHub hub(n, executor::InProcOptions{.timeout_s = o.timeout_s});
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto t = hub.Endpoint(r);
      absl::StatusOr<executor::RankResult> res = executor::TrainLayoutRank(spec, plan, r, t.get(), o.train);
      if (res.ok()) {
        (*reports)[r] = ReportOf(*res);
      } else {
        (*errors)[r] = std::string(res.status().message());
        hub.Abort(r);
      }
    });
  }
  for (auto& t : threads) t.join();
}

// Child process body: train rank r, write DIR/rank-r.json or DIR/rank-r.err, exit.
[[noreturn]] void RankChild(const executor::ModelSpec& spec, const LayoutPlan& plan,
                            const LocalRunOptions& o, const std::string& dir, int r) {
  executor::TransportConfig tc;
  tc.rank = r;
  tc.size = plan.num_ranks;
  tc.store_dir = dir + "/store";
  tc.prefix = "run";
  tc.timeout_s = o.timeout_s;
  tc.cuda_device = r;
  absl::StatusOr<std::unique_ptr<executor::Transport>> t = executor::MakeTransport(o.transport, tc);
  absl::StatusOr<executor::RankResult> res =
      t.ok() ? executor::TrainLayoutRank(spec, plan, r, t->get(), o.train)
             : absl::StatusOr<executor::RankResult>(t.status());
  const std::string base = absl::StrCat(dir, "/rank-", r);
  if (res.ok()) {
    std::ofstream(base + ".json") << ReportJson(ReportOf(*res));
    _exit(0);
  }
  std::ofstream(base + ".err") << res.status().message();
  _exit(1);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

absl::Status RunProcesses(const executor::ModelSpec& spec, const LayoutPlan& plan,
                          const LocalRunOptions& o, std::vector<RankReport>* reports,
                          std::vector<std::string>* errors) {
  const int n = plan.num_ranks;
  const std::string tmpl = (std::filesystem::temp_directory_path() / "octopipe-run-XXXXXX").string();
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) return absl::InternalError("cannot create a run directory");
  const std::string dir = buf.data();
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      // Without this rank the others would only time out: stop those already started.
      const int fork_errno = errno;
      for (pid_t p : pids) kill(p, SIGKILL);
      for (pid_t p : pids) {
        while (waitpid(p, nullptr, 0) < 0 && errno == EINTR) {
        }
      }
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
      return absl::InternalError(
          absl::StrCat("cannot start rank ", r, ": fork: ", std::strerror(fork_errno)));
    }
    if (pid == 0) RankChild(spec, plan, o, dir, r);
    pids.push_back(pid);
  }
  for (int r = 0; r < n; ++r) {
    int status = 0;
    pid_t waited;
    while ((waited = waitpid(pids[r], &status, 0)) < 0 && errno == EINTR) {
    }
    const std::string base = absl::StrCat(dir, "/rank-", r);
    if (waited < 0) {
      (*errors)[r] = absl::StrCat("cannot wait for the rank's process: ", std::strerror(errno));
    } else if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      absl::StatusOr<RankReport> rep = ParseReportJson(ReadFile(base + ".json"));
      if (rep.ok()) {
        (*reports)[r] = std::move(*rep);
      } else {
        (*errors)[r] = std::string(rep.status().message());
      }
    } else {
      const std::string e = ReadFile(base + ".err");
      (*errors)[r] = !e.empty() ? e
                     : WIFSIGNALED(status)
                         ? absl::StrCat("killed by signal ", WTERMSIG(status))
                         : absl::StrCat("exited with status ", WEXITSTATUS(status));
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return absl::OkStatus();
}

RunMeasurement Measure(const std::vector<RankReport>& rr, int iterations) {
  const int n = static_cast<int>(rr.size());
  RunMeasurement m;
  m.ranks = n;
  m.loss.assign(iterations, 0);
  m.iteration_s.assign(iterations, 0);
  m.bubble.assign(iterations, 0);
  for (int it = 0; it < iterations; ++it) {
    double busy = 0;
    for (const RankReport& r : rr) {
      const RankReport::Iteration& i = r.iterations[it];
      if (i.has_loss) m.loss[it] = i.loss;
      m.iteration_s[it] = std::max(m.iteration_s[it], i.wall_s);
      for (const auto& [op, d] : i.ops) busy += d;
    }
    m.bubble[it] = m.iteration_s[it] > 0 ? 1 - busy / (n * m.iteration_s[it]) : 0;
  }
  const int first = iterations > 1 ? 1 : 0;
  std::map<std::pair<int, OpKind>, std::pair<double, int>> sums;
  for (const RankReport& r : rr) {
    for (int it = first; it < iterations; ++it) {
      for (const auto& [op, d] : r.iterations[it].ops) {
        auto& s = sums[{op.stage, op.kind}];
        s.first += d;
        ++s.second;
      }
    }
  }
  for (const auto& [key, s] : sums) m.stage_op_s[key] = {s.first / s.second, s.second};
  std::map<std::pair<int, OpKind>, std::pair<double, int>> layer_sums;
  for (const RankReport& r : rr) {
    double peak = 0, wall = 0, cpu = 0, comm_cpu = 0, sync = 0, sync_wait = 0;
    int64_t messages = 0;
    for (int it = 0; it < iterations; ++it) {
      peak = std::max(peak, r.iterations[it].peak_activation_bytes);
      if (it < first) continue;
      comm_cpu += r.iterations[it].comm_cpu_s;
      messages += r.iterations[it].messages;
      sync += r.iterations[it].grad_sync_s;
      sync_wait += r.iterations[it].grad_sync_wait_s;
      for (const auto& [key, d] : r.iterations[it].layer_ops) {
        auto& s = layer_sums[key];
        s.first += d;
        ++s.second;
        wall += d;
      }
      cpu += r.iterations[it].layer_cpu_s;
    }
    m.peak_activation_bytes.push_back(peak);
    m.compute_cpu_share.push_back(wall > 0 ? std::min(1.0, cpu / wall) : 1.0);
    m.comm_cpu_per_message_s.push_back(messages > 0 ? comm_cpu / static_cast<double>(messages) : 0);
    const int measured = iterations - first;
    m.grad_sync_s.push_back(measured > 0 ? sync / measured : 0);
    m.grad_sync_wait_s.push_back(measured > 0 ? sync_wait / measured : 0);
  }
  for (const auto& [key, s] : layer_sums) m.layer_op_s[key] = {s.first / s.second, s.second};
  for (const RankReport& r : rr) {
    if (r.host_probe_s > 0) m.host_probe_s.push_back(r.host_probe_s);
  }
  // The last iteration's timeline, every rank on one time axis (its earliest start is 0).
  if (iterations > 0) {
    double origin = std::numeric_limits<double>::infinity();
    for (const RankReport& r : rr) origin = std::min(origin, r.iterations.back().start_steady_s);
    for (const RankReport& r : rr) {
      const RankReport::Iteration& last = r.iterations.back();
      const double offset = last.start_steady_s - origin;
      std::vector<double> starts, ends;
      for (size_t k = 0; k < last.ops.size() && k < last.op_start_s.size(); ++k) {
        starts.push_back(offset + last.op_start_s[k]);
        ends.push_back(offset + last.op_start_s[k] + last.ops[k].second);
      }
      m.last_op_start_s.push_back(std::move(starts));
      m.last_op_end_s.push_back(std::move(ends));
    }
  }
  for (int it = first; it < iterations; ++it) {
    m.mean_iteration_s += m.iteration_s[it];
    m.mean_bubble += m.bubble[it];
  }
  const int counted = std::max(1, iterations - first);
  m.mean_iteration_s /= counted;
  m.mean_bubble /= counted;
  return m;
}

}  // namespace

absl::StatusOr<RunMeasurement> RunPlanLocally(const executor::ModelSpec& spec, const Plan& plan,
                                              const LocalRunOptions& options) {
  return RunLayoutLocally(spec, SinglePipelineLayout(plan), options);
}

absl::StatusOr<RunMeasurement> RunLayoutLocally(const executor::ModelSpec& spec,
                                                const LayoutPlan& plan,
                                                const LocalRunOptions& options) {
  RETURN_IF_ERROR(executor::CheckLayoutRunnable(spec, plan));
  const int n = plan.num_ranks;
  std::vector<RankReport> reports(n);
  std::vector<std::string> errors(n);
  if (options.transport == executor::TransportKind::kInProc) {
    RunThreads(spec, plan, options, &reports, &errors);
  } else {
    RETURN_IF_ERROR(RunProcesses(spec, plan, options, &reports, &errors));
  }
  std::vector<std::string> failed;
  for (int r = 0; r < n; ++r) {
    if (!errors[r].empty()) failed.push_back(absl::StrCat("rank ", r, " failed: ", errors[r]));
  }
  if (!failed.empty()) return absl::AbortedError(absl::StrJoin(failed, "\n"));
  for (int r = 0; r < n; ++r) {
    if (static_cast<int>(reports[r].iterations.size()) != options.train.iterations) {
      return absl::InternalError(absl::StrCat("rank ", r, " reported ",
                                              reports[r].iterations.size(), " iterations, not ",
                                              options.train.iterations));
    }
  }
  RunMeasurement m = Measure(reports, options.train.iterations);
  // Threads of one process: its CPU time beyond a rank's computing thread is the other ranks'.
  if (options.transport == executor::TransportKind::kInProc) m.comm_cpu_per_message_s.clear();
  return m;
}

}  // namespace octopipe::agent
