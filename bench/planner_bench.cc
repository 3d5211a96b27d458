// Plan RPC latency under load with DISTINCT requests: the real planner
// service (in-process server on loopback, real gRPC clients, --workers tuning threads), 64
// concurrent clients by default, every call a different request — model, micro-batch count and
// seed vary — so the cache of identical requests cannot help. Two classes of jobs:
//   8-gpu    nemotron-h-8b, llama3-8b, qwen2-vl-7b, mamba2-2.7b, llava-1.5-7b on one 8 x H100
//            node, M in {16, 24, 32, 48}
//   128-gpu  llama3-70b, nemotron-h-56b, nemotron-h-47b on 16 x 8 H100, pipeline over
//            min(128, layers) devices, M in {96, 128, 192} (plans stay under max_plan_bytes)
// Each call asks for the class's time budget (the latency target: the service's deadline is
// arrival + budget, queue wait included, and it degrades budgets under load). Plan quality is
// reported next to latency: the mean speed-up over the best fitting baseline, how many answers
// are a baseline itself (no silent collapse), the mean gap to the certified lower bound (the
// quality measure that remains when no baseline fits), and the mean tuning budget granted.
//
//   bazel run -c opt //bench:planner_bench -- [--clients=64] [--calls=128] [--workers=2]
//       [--budget_8=2.5] [--budget_128=10] [--only=8-gpu|128-gpu] [--replicas=1]
//
// --replicas=N starts N planner servers (each with --workers tuning threads and its own state
// directory: one-shot Plan calls touch no store, so replicas on one etcd tune them the same
// way) and every client spreads its calls over all of them as the CLI does
// (cli/planner_client.h, PlannerClient::Route::kSpread: in turn from a random first replica,
// skipping one that is NOT_SERVING or answers RESOURCE_EXHAUSTED).
//
// Targets: p99 <= 3 s (8-gpu) and <= 12 s (128-gpu) at 64 clients. Prints one JSON object per
// class. Current figures: docs/benchmarks.md.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "core/cluster_presets.h"
#include "core/convert.h"
#include "core/json_text.h"
#include "core/model_zoo.h"
#include "cli/planner_client.h"
#include "planner_service/server.h"
#include "proto/planner.grpc.pb.h"

namespace octopipe {
namespace {

struct JobClass {
  std::string name;
  std::vector<std::string> models;
  std::string cluster;
  int max_devices;
  std::vector<int> microbatches;
  double budget_s;
};

// Request i of a class: model, M and seed all vary with i, so no two calls are identical.
proto::PlanRequest DistinctRequest(const JobClass& c, int i) {
  const std::string& model = c.models[i % c.models.size()];
  const int m = c.microbatches[(i / c.models.size()) % c.microbatches.size()];
  TrainingOptions t;
  t.num_microbatches = m;
  const ModelGraph graph = *ZooModel(model, t);
  proto::PlanRequest req;
  *req.mutable_model() = ModelToProto(graph);
  *req.mutable_cluster() = ClusterToProto(*ClusterPreset(c.cluster));
  req.mutable_options()->set_num_devices(std::min(c.max_devices, graph.num_layers()));
  req.mutable_options()->set_num_microbatches(m);
  req.mutable_options()->set_seed(1000 + i);
  req.mutable_options()->set_time_budget_s(c.budget_s);
  return req;
}

struct CallResult {
  double latency_s = 0;
  grpc::StatusCode code = grpc::StatusCode::OK;
  double speedup = 0;
  bool baseline = false;
  bool feasible = false;
  double tuning_budget_s = 0;
  double lower_bound_gap = 0;
};

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

void RunClass(const std::string& addresses, const JobClass& c, int clients, int calls,
              int workers, int replicas) {
  std::vector<proto::PlanRequest> requests;
  for (int i = 0; i < calls; ++i) requests.push_back(DistinctRequest(c, i));
  std::vector<CallResult> results(calls);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < clients; ++t) {
    threads.emplace_back([&, t] {
      cli::PlannerConnection connection;
      connection.address = addresses;
      auto client = connection.Connect();
      for (int i = t; i < calls; i += clients) {
        proto::PlanResponse resp;
        const auto t0 = std::chrono::steady_clock::now();
        const grpc::Status s =
            client.ok() ? (*client)->Call(cli::PlannerClient::Route::kSpread,
                                          &proto::Planner::Stub::Plan, requests[i], &resp)
                        : grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                       std::string(client.status().message()));
        CallResult& r = results[i];
        r.latency_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        r.code = s.error_code();
        if (s.ok()) {
          r.feasible = resp.result().feasible();
          r.speedup = resp.result().speedup_vs_best_baseline();
          r.baseline = resp.result().origin().rfind("baseline:", 0) == 0;
          r.tuning_budget_s = resp.tuning_budget_s();
          r.lower_bound_gap = resp.result().lower_bound_gap();
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<double> ok_latency;
  std::map<std::string, int> codes;
  double speedup_sum = 0, budget_sum = 0, gap_sum = 0;
  int speedups = 0, baselines = 0, infeasible = 0;
  for (const CallResult& r : results) {
    if (r.code != grpc::StatusCode::OK) {
      codes[std::to_string(static_cast<int>(r.code))]++;
      continue;
    }
    ok_latency.push_back(r.latency_s);
    budget_sum += r.tuning_budget_s;
    gap_sum += r.lower_bound_gap;
    if (!r.feasible) ++infeasible;
    if (r.baseline) ++baselines;
    if (r.speedup > 0) {
      speedup_sum += r.speedup;
      ++speedups;
    }
  }
  std::vector<double> all_latency;
  for (const CallResult& r : results) all_latency.push_back(r.latency_s);
  const int ok = static_cast<int>(ok_latency.size());
  const Json line = {{"job", c.name},
                     {"clients", clients},
                     {"calls", calls},
                     {"distinct_requests", calls},
                     {"workers", workers},
                     {"replicas", replicas},
                     {"time_budget_s", c.budget_s},
                     {"ok", ok},
                     {"failed_by_code", codes},
                     {"p50_s", Percentile(ok_latency, 0.50)},
                     {"p99_s", Percentile(ok_latency, 0.99)},
                     {"p99_all_calls_s", Percentile(all_latency, 0.99)},
                     {"max_s", Percentile(all_latency, 1.0)},
                     {"plans_per_s", ok / wall},
                     // Tuning capacity: the budget granted to every answered call, per second.
                     // Plans per second alone mixes capacity with how admission splits it
                     // (under load it grants smaller budgets to more calls).
                     {"tuning_s_per_s", budget_sum / wall},
                     {"mean_speedup_vs_best_baseline", speedups ? speedup_sum / speedups : 0},
                     {"answers_with_a_fitting_baseline", speedups},
                     {"mean_lower_bound_gap", ok ? gap_sum / ok : 0},
                     {"answers_that_are_a_baseline", baselines},
                     {"infeasible", infeasible},
                     {"mean_tuning_budget_s", ok ? budget_sum / ok : 0}};
  std::printf("%s\n", JsonText(line).c_str());
  std::fflush(stdout);
}

int Main(int argc, char** argv) {
  int clients = 64, calls = 128, workers = 2, replicas = 1;
  double budget_8 = 2.5, budget_128 = 10;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    bool ok = true;
    if (a.rfind("--clients=", 0) == 0) ok = absl::SimpleAtoi(a.substr(10), &clients);
    else if (a.rfind("--calls=", 0) == 0) ok = absl::SimpleAtoi(a.substr(8), &calls);
    else if (a.rfind("--workers=", 0) == 0) ok = absl::SimpleAtoi(a.substr(10), &workers);
    else if (a.rfind("--budget_8=", 0) == 0) ok = absl::SimpleAtod(a.substr(11), &budget_8);
    else if (a.rfind("--budget_128=", 0) == 0) ok = absl::SimpleAtod(a.substr(13), &budget_128);
    else if (a.rfind("--only=", 0) == 0) only = a.substr(7);
    else if (a.rfind("--replicas=", 0) == 0) ok = absl::SimpleAtoi(a.substr(11), &replicas);
    else ok = false;
    if (!ok || clients < 1 || calls < 1 || workers < 1 || replicas < 1) {
      std::fprintf(stderr,
                   "usage: planner_bench [--clients=N] [--calls=N] [--workers=W] "
                   "[--budget_8=S] [--budget_128=S] [--only=8-gpu|128-gpu] [--replicas=N]\n");
      return 2;
    }
  }
  std::vector<std::unique_ptr<planner::PlannerServer>> servers;
  std::vector<std::string> dirs, addresses;
  for (int r = 0; r < replicas; ++r) {
    dirs.push_back(std::filesystem::temp_directory_path() /
                   ("octopipe-planner-bench-" + std::to_string(::getpid()) + "-" + std::to_string(r)));
    std::filesystem::remove_all(dirs.back());
    planner::PlannerServerOptions so;
    so.port = 0;
    so.metrics_port = -1;
    so.state_dir = dirs.back();
    so.workers = workers;
    so.max_queued = 1024;
    servers.push_back(std::make_unique<planner::PlannerServer>(so));
    if (absl::Status s = servers.back()->Start(); !s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
      return 1;
    }
    addresses.push_back("127.0.0.1:" + std::to_string(servers.back()->port()));
  }
  const std::string address = absl::StrJoin(addresses, ",");
  const std::vector<JobClass> classes = {
      {"8-gpu",
       {"nemotron-h-8b", "llama3-8b", "qwen2-vl-7b", "mamba2-2.7b", "llava-1.5-7b"},
       "h100-1node",
       8,
       {16, 24, 32, 48},
       budget_8},
      {"128-gpu",
       {"llama3-70b", "nemotron-h-56b", "nemotron-h-47b"},
       "h100-16nodes",
       128,
       {96, 128, 192},
       budget_128},
  };
  for (const JobClass& c : classes) {
    if (!only.empty() && only != c.name) continue;
    RunClass(address, c, clients, calls, workers, replicas);
  }
  for (auto& server : servers) server->Shutdown(1);
  for (const std::string& dir : dirs) std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace octopipe

int main(int argc, char** argv) { return octopipe::Main(argc, argv); }
