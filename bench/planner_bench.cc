// Plan RPC latency of the real planner service (in-process server on loopback, real gRPC
// clients): p50/p99 for an 8-GPU job (Nemotron-H 8B, 8 x H100, M = 32) and a 128-GPU job
// (Nemotron-H 56B over 16 nodes, pipeline over 120 devices, M = 480) at 1, 8 and 64 concurrent
// clients. Tuning runs on the server's pool of --workers threads, so latency at high
// concurrency is queueing: roughly (clients / workers) x tuning time.
//
//   bazel run -c opt //bench:planner_bench -- [--budget=1] [--calls=64] [--workers=2]
//
// Prints one JSON object per (job, clients).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/numbers.h"
#include "core/cluster_presets.h"
#include "core/convert.h"
#include "core/model_zoo.h"
#include "core/json_text.h"
#include "planner_service/server.h"
#include "proto/planner.grpc.pb.h"

int main(int argc, char** argv) {
  using namespace octopipe;
  double budget = 1;
  int calls = 64, workers = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--budget=", 0) == 0) absl::SimpleAtod(a.substr(9), &budget);
    else if (a.rfind("--calls=", 0) == 0) absl::SimpleAtoi(a.substr(8), &calls);
    else if (a.rfind("--workers=", 0) == 0) absl::SimpleAtoi(a.substr(10), &workers);
    else {
      std::fprintf(stderr, "usage: planner_bench [--budget=S] [--calls=N] [--workers=W]\n");
      return 2;
    }
  }
  const std::string dir = std::filesystem::temp_directory_path() / "octopipe-planner-bench";
  std::filesystem::remove_all(dir);
  planner::PlannerServerOptions so;
  so.port = 0;
  so.metrics_port = -1;
  so.state_dir = dir;
  so.workers = workers;
  so.max_queued = 1024;
  planner::PlannerServer server(so);
  if (absl::Status s = server.Start(); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 1;
  }
  const std::string address = "127.0.0.1:" + std::to_string(server.port());

  struct JobSpec {
    const char* name;
    const char* model;
    const char* cluster;
    int devices, microbatches;
  };
  const JobSpec jobs[] = {{"8-gpu", "nemotron-h-8b", "h100-1node", 8, 32},
                          {"128-gpu", "nemotron-h-56b", "h100-16nodes", 120, 480}};
  for (const JobSpec& job : jobs) {
    TrainingOptions t;
    proto::PlanRequest req;
    *req.mutable_model() = ModelToProto(*ZooModel(job.model, t));
    *req.mutable_cluster() = ClusterToProto(*ClusterPreset(job.cluster));
    req.mutable_options()->set_num_devices(job.devices);
    req.mutable_options()->set_num_microbatches(job.microbatches);
    req.mutable_options()->set_time_budget_s(budget);
    for (int clients : {1, 8, 64}) {
      const int per_client = std::max(1, calls / clients);
      std::vector<std::vector<double>> lat(clients);
      int failures = 0;
      std::mutex mu;
      const auto start = std::chrono::steady_clock::now();
      std::vector<std::thread> threads;
      for (int c = 0; c < clients; ++c) {
        threads.emplace_back([&, c] {
          auto stub = proto::Planner::NewStub(
              grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
          for (int i = 0; i < per_client; ++i) {
            grpc::ClientContext ctx;
            proto::PlanResponse resp;
            const auto t0 = std::chrono::steady_clock::now();
            grpc::Status s = stub->Plan(&ctx, req, &resp);
            const double d =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            if (s.ok()) {
              lat[c].push_back(d);
            } else {
              std::lock_guard<std::mutex> lock(mu);
              ++failures;
            }
          }
        });
      }
      for (auto& th : threads) th.join();
      const double wall =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::vector<double> all;
      for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
      std::sort(all.begin(), all.end());
      auto pct = [&](double q) {
        return all.empty() ? 0.0 : all[std::min(all.size() - 1, size_t(q * all.size()))];
      };
      double sum = 0;
      for (double x : all) sum += x;
      const Json line = {{"job", job.name},
                         {"model", job.model},
                         {"pipeline_devices", job.devices},
                         {"clients", clients},
                         {"calls", static_cast<int>(all.size())},
                         {"failures", failures},
                         {"time_budget_s", budget},
                         {"workers", workers},
                         {"p50_s", pct(0.50)},
                         {"p99_s", pct(0.99)},
                         {"mean_s", all.empty() ? 0 : sum / all.size()},
                         {"plans_per_s", all.size() / wall}};
      std::printf("%s\n", JsonText(line).c_str());
      std::fflush(stdout);
    }
  }
  server.Shutdown(1);
  std::filesystem::remove_all(dir);
  return 0;
}
