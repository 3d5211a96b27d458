// The planner's control plane under many agents, measured with a real planner process on this
// machine: --agents simulated agents register and heartbeat every --heartbeat_s (spread evenly
// over the interval), and one node of each of --jobs jobs reports stage times (device busy and
// iteration seconds) every --report_s, for --duration_s. Prints one JSON object: heartbeat
// latency at the server (from the planner's octopipe_rpc_latency_seconds histogram: the bucket
// bound p99 falls under) and at the client (exact percentiles; an upper bound on the server's),
// the heartbeats and reports sent and refused, the planner's CPU (cores, over the load) and
// peak RSS, and the nodes declared failed while every agent heartbeated (false positives, must
// be 0). The client runs on the same 2 cores as the planner, so the figures are pessimistic.
//
//   bazel run -c opt //bench:control_plane -- --agents=10000 --jobs=100 --duration_s=600
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/cluster_presets.h"
#include "core/convert.h"
#include "core/model_zoo.h"
#include "planner_client/heartbeat_stream.h"
#include "nlohmann/json.hpp"
#include "proto/planner.grpc.pb.h"
#include "tests/planner_process.h"

ABSL_FLAG(int, agents, 10000, "simulated agents (nodes), each heartbeating");
ABSL_FLAG(int, jobs, 100, "jobs, each on two of the agents' nodes, reporting stage times");
ABSL_FLAG(double, duration_s, 60, "seconds of load after set-up");
ABSL_FLAG(double, heartbeat_s, 1, "each agent's heartbeat interval");
ABSL_FLAG(double, report_s, 5, "each job's report interval");
ABSL_FLAG(double, heartbeat_timeout_s, 10, "the planner's --heartbeat_timeout_s");
ABSL_FLAG(double, heartbeat_batch_ms, -1,
          "the planner's --heartbeat_batch_ms (negative: the planner's default)");
ABSL_FLAG(int, channels, 8, "client gRPC channels (connections) the calls are spread over");
ABSL_FLAG(std::string, heartbeat, "stream",
          "how agents heartbeat: stream (one HeartbeatStream per agent, as octopipe-agent "
          "does) or unary (a Heartbeat call per beat)");

namespace octopipe {
namespace {

using testing::PlannerProcess;
constexpr char kPlanner[] = "planner_service/octopipe-planner";

using Clock = std::chrono::steady_clock;

std::string Node(int i) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "node-%05d", i);
  return buf;
}

// A job on nodes 2j and 2j+1 (one device each): a small model, a short budget.
proto::CreateJobRequest JobOn(int j) {
  TrainingOptions t;
  t.num_microbatches = 8;
  Cluster c = *ClusterPreset("h100-4nodes");
  c.nodes.resize(2);
  for (int k = 0; k < 2; ++k) {
    c.nodes[k].num_devices = 1;
    c.nodes[k].name = Node(2 * j + k);
  }
  proto::CreateJobRequest r;
  r.set_name(absl::StrCat("load-", j));
  *r.mutable_model() = ModelToProto(*ZooModel("mamba2-2.7b", t));
  *r.mutable_cluster() = ClusterToProto(c);
  r.mutable_options()->set_num_devices(2);
  r.mutable_options()->set_time_budget_s(0.05);
  return r;
}

// utime + stime of `pid`, in seconds.
double CpuSeconds(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::vector<std::string> f = absl::StrSplit(text.substr(close + 2), ' ');
  double utime = 0, stime = 0;
  if (f.size() > 12 && absl::SimpleAtod(f[11], &utime) && absl::SimpleAtod(f[12], &stime)) {
    return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  return 0;
}

double RssBytes(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) {
      double kb = 0;
      std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (f.size() >= 2 && absl::SimpleAtod(f[1], &kb)) return kb * 1024;
    }
  }
  return 0;
}

// The bound of the first bucket of `method`'s latency histogram at or above quantile q, from a
// /metrics page ("+Inf" when beyond the last); the count too.
std::pair<std::string, double> HistogramQuantile(const std::string& page, const std::string& method,
                                                 double q) {
  std::vector<std::pair<std::string, double>> buckets;
  double count = 0;
  const std::string label = "method=\"" + method + "\"";
  std::istringstream in(page);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("octopipe_rpc_latency_seconds_bucket{", 0) == 0 &&
        line.find(label) != std::string::npos) {
      const size_t le = line.find("le=\"");
      const size_t end = line.find('"', le + 4);
      double v = 0;
      absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v);
      buckets.push_back({line.substr(le + 4, end - le - 4), v});
    } else if (line.rfind("octopipe_rpc_latency_seconds_count{", 0) == 0 &&
               line.find(label) != std::string::npos) {
      absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &count);
    }
  }
  for (const auto& [bound, cumulative] : buckets) {
    if (count > 0 && cumulative >= q * count) return {bound, count};
  }
  return {"+Inf", count};
}

struct Load {
  std::atomic<int64_t> sent{0}, ok{0}, refused{0}, in_flight{0};
  std::mutex mu;
  std::vector<double> latency_ms;  // client-side heartbeat round trips
};

struct Call {
  grpc::ClientContext ctx;
  proto::HeartbeatRequest req;
  proto::HeartbeatResponse resp;
  Clock::time_point start;
};

int Run() {
  const int agents = absl::GetFlag(FLAGS_agents);
  const int jobs = std::min(absl::GetFlag(FLAGS_jobs), agents / 2);
  const double duration = absl::GetFlag(FLAGS_duration_s);
  const double interval = absl::GetFlag(FLAGS_heartbeat_s);
  PlannerProcess planner(kPlanner);
  const std::string state =
      absl::StrCat(std::filesystem::temp_directory_path().string(), "/octopipe-cp-", getpid());
  std::vector<std::string> planner_flags = {
      "--state_dir=" + state, "--log_level=warn",
      absl::StrCat("--heartbeat_timeout_s=", absl::GetFlag(FLAGS_heartbeat_timeout_s))};
  if (absl::GetFlag(FLAGS_heartbeat_batch_ms) >= 0) {
    planner_flags.push_back(
        absl::StrCat("--heartbeat_batch_ms=", absl::GetFlag(FLAGS_heartbeat_batch_ms)));
  }
  if (absl::Status s = planner.Start(planner_flags); !s.ok()) {
    std::cerr << "control_plane: " << s << "\n";
    return 1;
  }
  std::vector<std::unique_ptr<proto::Planner::Stub>> stubs;
  for (int c = 0; c < absl::GetFlag(FLAGS_channels); ++c) {
    grpc::ChannelArguments args;
    args.SetInt("octopipe.channel", c);  // distinct arguments: distinct connections
    stubs.push_back(proto::Planner::NewStub(grpc::CreateCustomChannel(
        planner.address(), grpc::InsecureChannelCredentials(), args)));
  }
  // Set-up: every agent registers, every job is created and planned.
  std::cerr << "control_plane: registering " << agents << " agents\n";
  for (int i = 0; i < agents; ++i) {
    proto::RegisterAgentRequest r;
    r.set_node_id(Node(i));
    r.set_num_devices(1);
    r.set_address(absl::StrCat("10.0.", i / 250, ".", i % 250, ":29500"));
    proto::RegisterAgentResponse resp;
    grpc::ClientContext ctx;
    if (!stubs[i % stubs.size()]->RegisterAgent(&ctx, r, &resp).ok()) {
      std::cerr << "control_plane: RegisterAgent " << i << " failed\n";
      return 1;
    }
  }
  std::cerr << "control_plane: creating " << jobs << " jobs\n";
  std::vector<std::string> job_ids;
  for (int j = 0; j < jobs; ++j) {
    proto::Job job;
    grpc::Status s;
    for (int tries = 0; tries < 600; ++tries) {  // a full planning queue: back off and retry
      grpc::ClientContext ctx;
      s = stubs[0]->CreateJob(&ctx, JobOn(j), &job);
      if (s.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!s.ok()) {
      std::cerr << "control_plane: CreateJob " << j << ": " << s.error_message() << "\n";
      return 1;
    }
    job_ids.push_back(job.id());
  }
  // ... wait for each job's first version (the reports name it).
  std::vector<int64_t> versions(jobs, 0);
  for (int j = 0; j < jobs; ++j) {
    for (int tries = 0; tries < 600 && versions[j] == 0; ++tries) {
      proto::GetJobRequest g;
      g.set_job_id(job_ids[j]);
      proto::GetJobResponse got;
      grpc::ClientContext ctx;
      if (stubs[0]->GetJob(&ctx, g, &got).ok()) versions[j] = got.job().current_version();
      if (versions[j] == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  // Load: heartbeats spread evenly over each interval (async), reports from one thread.
  Load load;
  std::vector<std::unique_ptr<client::HeartbeatStream>> streams;
  if (absl::GetFlag(FLAGS_heartbeat) == "stream") {
    for (int i = 0; i < agents; ++i) {
      streams.push_back(std::make_unique<client::HeartbeatStream>(
          stubs[i % stubs.size()].get(), std::make_unique<grpc::ClientContext>(), Node(i)));
    }
  } else if (absl::GetFlag(FLAGS_heartbeat) != "unary") {
    std::cerr << "control_plane: --heartbeat must be stream or unary, not '"
              << absl::GetFlag(FLAGS_heartbeat) << "'\n";
    return 2;
  }
  std::cerr << "control_plane: " << duration << " s of load\n";
  const double cpu0 = CpuSeconds(planner.pid());
  const Clock::time_point t0 = Clock::now();
  const auto end = t0 + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(duration));
  std::atomic<int64_t> reports{0}, reports_refused{0};
  double peak_rss = RssBytes(planner.pid());
  std::thread reporter([&] {
    for (int round = 0; Clock::now() < end; ++round) {
      for (int j = 0; j < jobs && Clock::now() < end; ++j) {
        proto::ReportStageTimesRequest r;
        r.set_job_id(job_ids[j]);
        r.set_plan_version(versions[j]);
        r.set_node_id(Node(2 * j));
        proto::DeviceBusyTime* d = r.add_device_times();
        d->set_device(0);
        d->set_busy_seconds(0.9);
        d->set_iteration_seconds(1.0);
        d->set_iterations(10);
        proto::ReportStageTimesResponse resp;
        grpc::ClientContext ctx;
        ++reports;
        if (!stubs[j % stubs.size()]->ReportStageTimes(&ctx, r, &resp).ok()) ++reports_refused;
      }
      std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(
                                                 (round + 1) * absl::GetFlag(FLAGS_report_s))));
      peak_rss = std::max(peak_rss, RssBytes(planner.pid()));
    }
  });
  const double per_call_s = interval / agents;
  const bool streamed = absl::GetFlag(FLAGS_heartbeat) == "stream";
  int64_t skipped = 0;
  for (int64_t n = 0;; ++n) {
    const auto due = t0 + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(n * per_call_s));
    if (due >= end) break;
    std::this_thread::sleep_until(due);
    if (streamed) {  // sent: written on the stream; skipped: the agent's last beat still was
      if (streams[n % agents]->Beat()) {
        ++load.sent;
      } else {
        ++skipped;
      }
      continue;
    }
    auto* call = new Call;
    call->req.set_node_id(Node(static_cast<int>(n % agents)));
    call->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    call->start = Clock::now();
    ++load.sent;
    ++load.in_flight;
    stubs[n % stubs.size()]->async()->Heartbeat(
        &call->ctx, &call->req, &call->resp, [call, &load](grpc::Status s) {
          const double ms =
              std::chrono::duration<double, std::milli>(Clock::now() - call->start).count();
          (s.ok() ? load.ok : load.refused)++;
          {
            std::lock_guard<std::mutex> lock(load.mu);
            load.latency_ms.push_back(ms);
          }
          --load.in_flight;
          delete call;
        });
  }
  reporter.join();
  while (load.in_flight.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu = (CpuSeconds(planner.pid()) - cpu0) / wall;
  // Streams the planner ended (none should be) or whose heartbeats were not written.
  int streams_failed = 0;
  for (auto& stream : streams) {
    const bool ended_early = stream->ended();
    load.refused += stream->failed_writes();
    streams_failed += ended_early ? 1 : 0;
    stream->Close();
  }
  peak_rss = std::max(peak_rss, RssBytes(planner.pid()));

  // False positives: nodes the planner declared failed although every agent heartbeated.
  int failed = 0, listed = 0;
  std::string token;
  do {
    proto::ListAgentsRequest r;
    r.set_page_size(5000);
    r.set_page_token(token);
    proto::ListAgentsResponse resp;
    grpc::ClientContext ctx;
    if (!stubs[0]->ListAgents(&ctx, r, &resp).ok()) break;
    for (const proto::AgentStatus& a : resp.agents()) {
      ++listed;
      failed += a.alive() ? 0 : 1;
    }
    token = resp.next_page_token();
  } while (!token.empty());
  const std::string page = testing::ScrapeMetrics(planner.metrics_port());
  const auto [server_p99, server_count] = HistogramQuantile(page, "Heartbeat", 0.99);
  const auto [server_p50, unused] = HistogramQuantile(page, "Heartbeat", 0.5);
  std::vector<double> ms = load.latency_ms;
  std::sort(ms.begin(), ms.end());
  auto pct = [&](double q) {
    return ms.empty() ? 0.0 : ms[std::min(ms.size() - 1, static_cast<size_t>(ms.size() * q))];
  };
  nlohmann::json out = {
      {"agents", agents},
      {"jobs", jobs},
      {"duration_s", wall},
      {"heartbeats_sent", load.sent.load()},
      {"heartbeat", absl::GetFlag(FLAGS_heartbeat)},
      {"heartbeats_refused", load.refused.load()},
      {"heartbeats_skipped_in_flight", skipped},
      {"heartbeat_streams_ended_by_the_planner", streams_failed},
      {"heartbeats_per_s", load.sent.load() / wall},
      {"heartbeat_server_p50_le_s", server_p50},
      {"heartbeat_server_p99_le_s", server_p99},
      {"heartbeat_server_count", server_count},
      {"heartbeat_client_p50_ms", pct(0.5)},
      {"heartbeat_client_p99_ms", pct(0.99)},
      {"heartbeat_client_max_ms", ms.empty() ? 0.0 : ms.back()},
      {"reports_sent", reports.load()},
      {"reports_refused", reports_refused.load()},
      {"planner_cpu_cores", cpu},
      {"planner_peak_rss_mb", peak_rss / (1 << 20)},
      {"agents_listed", listed},
      {"agents_declared_failed", failed},
  };
  std::cout << out.dump() << std::endl;
  std::filesystem::remove_all(state);
  return 0;
}

}  // namespace
}  // namespace octopipe

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return octopipe::Run();
}
