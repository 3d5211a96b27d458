// Planner fail-over on etcd, measured with real processes on this machine: a three-member etcd
// cluster, three octopipe-planner replicas, a client creating jobs through the leader without
// pause; the leader is killed (-9) --kills times and restarted as a follower each time.
// Prints one JSON object: the fail-over times (from the kill to another replica's health
// service octopipe.leader being SERVING, i.e. it has loaded the state), the
// acknowledged CreateJob calls lost (must be 0) and repeated job ids (must be 0), and the
// store's write latency on etcd and on SQLite. (One-shot Plan capacity over replicas:
// bench/planner_bench --replicas.)
//
//   bazel run -c opt //bench:failover -- --kills=20 --ttl_s=2
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/cluster_presets.h"
#include "core/convert.h"
#include "core/leader_hint.h"
#include "core/model_zoo.h"
#include "etcd/client.h"
#include "etcd/etcd_cluster.h"
#include "nlohmann/json.hpp"
#include "planner_service/etcd_store.h"
#include "planner_service/sqlite_store.h"
#include "proto/health.grpc.pb.h"
#include "proto/planner.grpc.pb.h"
#include "tests/planner_process.h"

ABSL_FLAG(int, kills, 20, "leader kills (each followed by a restart of the killed replica)");
ABSL_FLAG(int, ttl_s, 2, "the replicas' --leader_ttl_s");
ABSL_FLAG(int, writes, 500, "store writes per backend for the latency figures");

namespace octopipe {
namespace {

using testing::FreePort;
using testing::LeadsPlanners;
using testing::PlannerProcess;
constexpr char kPlanner[] = "planner_service/octopipe-planner";
constexpr int kReplicas = 3;

proto::CreateJobRequest SmallJob(int n) {
  TrainingOptions t;
  t.num_microbatches = 8;
  Cluster c = *ClusterPreset("h100-4nodes");
  c.nodes.resize(2);
  for (Node& node : c.nodes) node.num_devices = 2;
  proto::CreateJobRequest r;
  r.set_name(absl::StrCat("bench-", n));
  *r.mutable_model() = ModelToProto(*ZooModel("llama3-8b", t));
  *r.mutable_cluster() = ClusterToProto(c);
  r.mutable_options()->set_num_devices(4);
  r.mutable_options()->set_time_budget_s(0.2);
  return r;
}

struct Stats {
  double min = 0, p50 = 0, p99 = 0, max = 0;
};

Stats Summarize(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.min = v.front();
  s.max = v.back();
  s.p50 = v[v.size() / 2];
  s.p99 = v[std::min(v.size() - 1, static_cast<size_t>(v.size() * 0.99))];
  return s;
}

nlohmann::json ToJson(const Stats& s, const char* unit) {
  return {{std::string("min_") + unit, s.min}, {std::string("p50_") + unit, s.p50},
          {std::string("p99_") + unit, s.p99}, {std::string("max_") + unit, s.max}};
}

// Store write latency: PutJob of a small job record, `n` times.
std::vector<double> WriteLatencies(Store& store, int n) {
  std::vector<double> ms;
  planner::JobRecord job;
  job.name = "latency";
  job.spec.model.set_name("m");
  job.spec.model.add_layers()->set_kind("attention");
  for (int i = 0; i < n; ++i) {
    job.id = absl::StrCat("latency-", i);
    job.created_unix_ms = i;
    const absl::Time t = absl::Now();
    if (!store.PutJob(job).ok()) continue;
    ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t));
  }
  return ms;
}

int Run() {
  const int ttl = absl::GetFlag(FLAGS_ttl_s);
  absl::StatusOr<std::unique_ptr<etcd::EtcdCluster>> etcd = etcd::EtcdCluster::Start(3);
  if (!etcd.ok()) {
    std::cerr << "failover: " << etcd.status() << "\n";
    return 1;
  }
  std::vector<int> ports;
  std::vector<std::string> addresses;
  std::vector<std::vector<std::string>> args;
  std::vector<std::unique_ptr<PlannerProcess>> replicas;
  std::vector<std::unique_ptr<proto::Planner::Stub>> stubs;
  const std::string state = absl::StrCat(std::filesystem::temp_directory_path().string(),
                                         "/octopipe-failover-", getpid());
  for (int i = 0; i < kReplicas; ++i) {
    ports.push_back(FreePort());
    addresses.push_back(absl::StrCat("127.0.0.1:", ports[i]));
    args.push_back({"--store=etcd:" + (*etcd)->endpoints(), absl::StrCat("--port=", ports[i]),
                    absl::StrCat("--leader_ttl_s=", ttl), "--log_level=info",
                    "--metrics_port=-1", absl::StrCat("--state_dir=", state, "-", i)});
    replicas.push_back(std::make_unique<PlannerProcess>(kPlanner));
    if (absl::Status s = replicas[i]->Start(args[i]); !s.ok()) {
      std::cerr << "failover: replica " << i << ": " << s << "\n";
      return 1;
    }
    stubs.push_back(proto::Planner::NewStub(
        grpc::CreateChannel(addresses[i], grpc::InsecureChannelCredentials())));
  }
  auto await_leader = [&](int except) -> std::optional<int> {
    const absl::Time deadline = absl::Now() + absl::Seconds(ttl + 30);
    while (absl::Now() < deadline) {
      for (int i = 0; i < kReplicas; ++i) {
        if (i != except && replicas[i]->running() && LeadsPlanners(addresses[i])) return i;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    return std::nullopt;
  };

  // The client: CreateJob in a loop on whoever leads, following the followers' hints.
  std::atomic<bool> stop{false};
  std::mutex mu;
  // Each acknowledged job, with who acknowledged it and when (for the report of a lost one):
  // the replica's slot, how many leader kills had happened, seconds since the client started.
  struct Ack {
    std::string id;
    int replica;
    int kills;
    double at_s;
  };
  std::vector<Ack> acknowledged;
  std::atomic<int> kills_done{0};
  const absl::Time client_start = absl::Now();
  int64_t refused = 0;
  std::thread writer([&] {
    int target = 0;
    for (int n = 0; !stop.load(); ++n) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      proto::Job job;
      const grpc::Status s = stubs[target]->CreateJob(&ctx, SmallJob(n), &job);
      std::unique_lock<std::mutex> lock(mu);
      if (s.ok()) {
        acknowledged.push_back({job.id(), target, kills_done.load(),
                                absl::ToDoubleSeconds(absl::Now() - client_start)});
        continue;
      }
      ++refused;
      lock.unlock();
      absl::SleepFor(absl::Milliseconds(20));  // a client's back-off between retries
      lock.lock();
      std::optional<std::string> leader = LeaderNamedIn(s.error_message());
      const auto it = leader ? std::find(addresses.begin(), addresses.end(), *leader)
                             : addresses.end();
      target = it != addresses.end() ? static_cast<int>(it - addresses.begin())
                                     : (target + 1) % kReplicas;
    }
  });

  std::vector<double> failover_s;
  std::vector<std::string> logs;  // the killed replicas' stderr, "replica R, kill K" first
  std::optional<int> leader = await_leader(-1);
  for (int k = 0; leader && k < absl::GetFlag(FLAGS_kills); ++k) {
    absl::SleepFor(absl::Milliseconds(500));  // let the client write to this leader
    const int killed = *leader;
    const absl::Time t = absl::Now();
    replicas[killed]->Kill(SIGKILL);
    kills_done = k + 1;
    logs.push_back(absl::StrCat("replica ", killed, " (killed at +",
                                absl::ToDoubleSeconds(t - client_start), " s, kill ", k + 1,
                                "):\n", replicas[killed]->log()));
    leader = await_leader(killed);
    if (!leader) break;
    failover_s.push_back(absl::ToDoubleSeconds(absl::Now() - t));
    std::cerr << "kill " << k + 1 << ": " << failover_s.back() << " s\n";
    replicas[killed] = std::make_unique<PlannerProcess>(kPlanner);
    if (!replicas[killed]->Start(args[killed]).ok()) break;
  }
  stop = true;
  writer.join();

  // Every acknowledged job is on the last leader, once. A page the leader did not answer is
  // asked again (of whoever leads then, up to 20 times): a listing cut short must not count as
  // lost writes (the jobs the planner holds can be more than a page: calls whose answer timed
  // out may still have created theirs).
  std::set<std::string> stored;
  int64_t repeated = 0;
  bool listed = false;
  if (leader) {
    proto::ListJobsRequest request;
    for (int tries = 0; tries < 20 && leader;) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      proto::ListJobsResponse page;
      const grpc::Status s = stubs[*leader]->ListJobs(&ctx, request, &page);
      if (!s.ok()) {
        std::cerr << "failover: ListJobs on " << addresses[*leader] << ": " << s.error_message()
                  << "; asking again\n";
        ++tries;
        absl::SleepFor(absl::Milliseconds(100));
        leader = await_leader(-1);
        continue;
      }
      for (const proto::Job& j : page.jobs()) {
        if (!stored.insert(j.id()).second) ++repeated;
      }
      request.set_page_token(page.next_page_token());
      if (request.page_token().empty()) {
        listed = true;
        break;
      }
    }
  }
  int64_t lost = 0;
  std::set<std::string> unique_acks;
  for (const Ack& a : acknowledged) {
    unique_acks.insert(a.id);
    if (!listed || stored.count(a.id)) continue;
    ++lost;  // with what the next run needs to find out why: who acknowledged it, and when
    std::cerr << "failover: lost " << a.id << ", acknowledged by replica " << a.replica
              << " after " << a.kills << " kills, at +" << a.at_s << " s\n";
  }
  if (!listed) lost = -1;  // unknown: the listing never completed
  if (lost > 0) {  // and every replica's log
    std::cerr << "failover: the final leader is replica " << (leader ? *leader : -1) << "\n";
    for (int i = 0; i < kReplicas; ++i) {
      logs.push_back(absl::StrCat("replica ", i, " (running at the end):\n", replicas[i]->log()));
    }
    for (const std::string& log : logs) std::cerr << "failover: " << log << "\n";
  }

  // Store write latency, etcd (this cluster, its own prefix) against SQLite (a temp file).
  const int writes = absl::GetFlag(FLAGS_writes);
  EtcdStoreOptions eo;
  eo.prefix = "/bench-latency";
  absl::StatusOr<std::vector<std::string>> endpoints = etcd::ParseEndpoints((*etcd)->endpoints());
  absl::StatusOr<std::unique_ptr<EtcdStore>> etcd_store = EtcdStore::Open(*endpoints, eo);
  absl::StatusOr<std::unique_ptr<SqliteStore>> sqlite_store =
      SqliteStore::Open(state + "-latency/planner.db");
  const Stats etcd_ms = etcd_store.ok() ? Summarize(WriteLatencies(**etcd_store, writes)) : Stats();
  const Stats sqlite_ms =
      sqlite_store.ok() ? Summarize(WriteLatencies(**sqlite_store, writes)) : Stats();
  for (int i = 0; i < kReplicas; ++i) std::filesystem::remove_all(absl::StrCat(state, "-", i));
  std::filesystem::remove_all(state + "-latency");

  nlohmann::json out = {
      {"benchmark", "failover"},
      {"replicas", kReplicas},
      {"etcd_members", 3},
      {"leader_ttl_s", ttl},
      {"kills", failover_s.size()},
      {"failover", ToJson(Summarize(failover_s), "s")},
      {"create_job_acknowledged", acknowledged.size()},
      {"create_job_refused_or_failed", refused},
      {"acknowledged_lost", lost},
      {"jobs_listed", listed},
      {"repeated_job_ids",
       repeated + static_cast<int64_t>(acknowledged.size() - unique_acks.size())},
      {"store_write_ms", {{"etcd", ToJson(etcd_ms, "ms")}, {"sqlite", ToJson(sqlite_ms, "ms")}}},
  };
  std::cout << out.dump() << "\n";
  const bool all_kills = failover_s.size() == static_cast<size_t>(absl::GetFlag(FLAGS_kills));
  return listed && lost == 0 && all_kills ? 0 : 1;
}

}  // namespace
}  // namespace octopipe

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return octopipe::Run();
}
