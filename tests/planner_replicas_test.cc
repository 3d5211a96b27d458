// Planner replicas on a real etcd cluster (three members on loopback): one leader serves jobs,
// followers answer reads from the store and point other calls to it, a killed leader is replaced within the lease TTL + 1 s with
// every acknowledged job present, and a leader paused past its lease cannot write afterwards
// and comes back as a follower.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <memory>
#include <optional>
#include <chrono>
#include <set>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/cluster_presets.h"
#include "core/convert.h"
#include "cli/planner_client.h"
#include "core/model_zoo.h"
#include "etcd/etcd_cluster.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/health.grpc.pb.h"
#include "proto/planner.grpc.pb.h"
#include "tests/planner_process.h"

namespace octopipe {
namespace {

using ::testing::HasSubstr;
using testing::FreePort;
using testing::LeadsPlanners;
using testing::MetricValue;
using testing::ScrapeMetrics;
using testing::PlannerProcess;

constexpr char kPlanner[] = "planner_service/octopipe-planner";
constexpr int kTtlS = 2;
constexpr int kReplicas = 3;

proto::CreateJobRequest SmallJob(const std::string& name) {
  TrainingOptions t;
  t.num_microbatches = 8;
  Cluster c = *ClusterPreset("h100-4nodes");
  c.nodes.resize(2);
  for (Node& n : c.nodes) n.num_devices = 2;
  proto::CreateJobRequest r;
  r.set_name(name);
  *r.mutable_model() = ModelToProto(*ZooModel("llama3-8b", t));
  *r.mutable_cluster() = ClusterToProto(c);
  r.mutable_options()->set_num_devices(4);
  r.mutable_options()->set_time_budget_s(1);
  return r;
}

class Replicas {
 public:
  absl::Status Start(const std::string& etcd) {
    for (int i = 0; i < kReplicas; ++i) {
      ports_.push_back(FreePort());
      processes_.push_back(std::make_unique<PlannerProcess>(kPlanner));
      stubs_.push_back(proto::Planner::NewStub(
          grpc::CreateChannel(address(i), grpc::InsecureChannelCredentials())));
      args_.push_back({"--store=etcd:" + etcd, absl::StrCat("--port=", ports_[i]),
                       absl::StrCat("--leader_ttl_s=", kTtlS), "--heartbeat_timeout_s=5"});
      if (absl::Status s = processes_[i]->Start(args_[i]); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  absl::Status Restart(int i) {
    processes_[i] = std::make_unique<PlannerProcess>(kPlanner);
    return processes_[i]->Start(args_[i]);
  }
  std::string address(int i) const { return absl::StrCat("127.0.0.1:", ports_[i]); }
  PlannerProcess& process(int i) { return *processes_[i]; }
  proto::Planner::Stub& stub(int i) { return *stubs_[i]; }

  // ListJobs on replica i (1 s deadline).
  grpc::Status List(int i, proto::ListJobsResponse* out) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
    proto::ListJobsRequest request;
    return stubs_[i]->ListJobs(&ctx, request, out);
  }
  // The replica (not `except`) that leads, within `timeout`; nullopt when none.
  std::optional<int> AwaitLeader(absl::Duration timeout, int except = -1) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      for (int i = 0; i < kReplicas; ++i) {
        if (i != except && processes_[i]->running() && LeadsPlanners(address(i))) return i;
      }
      absl::SleepFor(absl::Milliseconds(20));  // bounded poll of a state change we cause
    }
    return std::nullopt;
  }

 private:
  std::vector<int> ports_;
  std::vector<std::vector<std::string>> args_;
  std::vector<std::unique_ptr<PlannerProcess>> processes_;
  std::vector<std::unique_ptr<proto::Planner::Stub>> stubs_;
};

std::set<std::string> JobIds(Replicas& r, int leader) {
  proto::ListJobsResponse jobs;
  EXPECT_TRUE(r.List(leader, &jobs).ok());
  std::set<std::string> ids;
  for (const proto::Job& j : jobs.jobs()) ids.insert(j.id());
  return ids;
}

// A three-member etcd on loopback and kReplicas planners on it; `leader`: the first one elected.
void StartReplicas(std::unique_ptr<etcd::EtcdCluster>* etcd, Replicas* r, int* leader) {
  absl::StatusOr<std::unique_ptr<etcd::EtcdCluster>> started = etcd::EtcdCluster::Start(3);
  ASSERT_TRUE(started.ok()) << started.status();
  *etcd = std::move(*started);
  ASSERT_TRUE(r->Start((*etcd)->endpoints()).ok());
  std::optional<int> elected = r->AwaitLeader(absl::Seconds(30));
  ASSERT_TRUE(elected.has_value()) << r->process(0).log();
  *leader = *elected;
}

TEST(PlannerReplicasTest, LeaderFailOverFencingAndFollowers) {
  std::unique_ptr<etcd::EtcdCluster> etcd;
  Replicas r;
  int l1 = -1;
  ASSERT_NO_FATAL_FAILURE(StartReplicas(&etcd, &r, &l1));
  std::optional<int> leader = l1;

  // A follower refuses writes and names the leader.
  const int follower = (l1 + 1) % kReplicas;
  {
    grpc::ClientContext ctx;
    proto::Job job;
    const grpc::Status s = r.stub(follower).CreateJob(&ctx, SmallJob("refused"), &job);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_THAT(s.error_message(), HasSubstr("the leader is at " + r.address(l1)));
  }

  // Health: the leader serves "octopipe.leader", a follower does not (both serve "").
  auto health = [&](int i, const std::string& service) {
    auto stub = grpc::health::v1::Health::NewStub(
        grpc::CreateChannel(r.address(i), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    const grpc::Status s = stub->Check(&ctx, request, &response);
    return s.ok() ? response.status() : grpc::health::v1::HealthCheckResponse::UNKNOWN;
  };
  EXPECT_EQ(health(l1, "octopipe.leader"), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(health(follower, "octopipe.leader"),
            grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(health(follower, ""), grpc::health::v1::HealthCheckResponse::SERVING);

  std::set<std::string> acknowledged;
  for (int i = 0; i < 5; ++i) {
    grpc::ClientContext ctx;
    proto::Job job;
    const grpc::Status s = r.stub(l1).CreateJob(&ctx, SmallJob(absl::StrCat("job", i)), &job);
    ASSERT_TRUE(s.ok()) << s.error_message();
    acknowledged.insert(job.id());
  }

  // kill -9 of the leader: another replica serves within the TTL + 1 s.
  const absl::Time killed = absl::Now();
  r.process(l1).Kill(SIGKILL);
  leader = r.AwaitLeader(absl::Seconds(kTtlS + 10), l1);
  ASSERT_TRUE(leader.has_value());
  const absl::Duration failover = absl::Now() - killed;
  EXPECT_LE(failover, absl::Seconds(kTtlS + 1)) << "fail-over took " << failover;
  ::testing::Test::RecordProperty("failover_ms",
                                  static_cast<int>(absl::ToInt64Milliseconds(failover)));
  const int l2 = *leader;
  EXPECT_EQ(JobIds(r, l2), acknowledged);
  // Followers answer reads from the store, WatchPlan too (the versions the leader stored).
  EXPECT_EQ(JobIds(r, 3 - l1 - l2), acknowledged);
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    proto::WatchPlanRequest watch;
    watch.set_job_id(*acknowledged.begin());
    auto reader = r.stub(3 - l1 - l2).WatchPlan(&ctx, watch);
    proto::PlanVersion v;
    ASSERT_TRUE(reader->Read(&v)) << reader->Finish().error_message();
    EXPECT_EQ(v.job_id(), *acknowledged.begin());
    EXPECT_EQ(v.version(), 1);
    ctx.TryCancel();
    reader->Finish();
  }
  // Followers list agents from the store, with the liveness the leader stored: node-b,
  // reported failed at the leader, is dead there too.
  for (const std::string node : {"node-a", "node-b"}) {
    grpc::ClientContext ctx;
    proto::RegisterAgentRequest reg;
    reg.set_node_id(node);
    reg.set_num_devices(2);
    reg.set_address(node + ":7000");
    proto::RegisterAgentResponse out;
    const grpc::Status s = r.stub(l2).RegisterAgent(&ctx, reg, &out);
    ASSERT_TRUE(s.ok()) << node << " at replica " << l2 << ": " << s.error_message();
  }
  {
    grpc::ClientContext ctx;
    proto::NodeRequest failed;
    failed.set_node_id("node-b");
    proto::NodeResponse out;
    ASSERT_TRUE(r.stub(l2).ReportNodeFailure(&ctx, failed, &out).ok());
  }
  for (int i : {l2, 3 - l1 - l2}) {
    grpc::ClientContext ctx;
    proto::ListAgentsResponse out;
    const grpc::Status s = r.stub(i).ListAgents(&ctx, proto::ListAgentsRequest(), &out);
    ASSERT_TRUE(s.ok()) << (i == l2 ? "leader: " : "follower: ") << s.error_message();
    ASSERT_EQ(out.agents_size(), 2);
    EXPECT_EQ(out.agents(0).node_id(), "node-a");
    EXPECT_TRUE(out.agents(0).alive());
    EXPECT_EQ(out.agents(0).address(), "node-a:7000");
    EXPECT_EQ(out.agents(1).node_id(), "node-b");
    EXPECT_FALSE(out.agents(1).alive());
  }
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext ctx;
    proto::Job job;
    ASSERT_TRUE(r.stub(l2).CreateJob(&ctx, SmallJob(absl::StrCat("after", i)), &job).ok());
    EXPECT_FALSE(acknowledged.count(job.id())) << "job number " << job.id() << " repeated";
    acknowledged.insert(job.id());
  }

  // The CLI given every replica finds the leader (the killed one refuses connections first).
  {
    const std::string command = absl::StrCat("cli/octopipe jobs list --planner=", r.address(l1),
                                             ",", r.address((l1 + 1) % kReplicas), ",",
                                             r.address((l1 + 2) % kReplicas), " 2>&1");
    FILE* out = popen(command.c_str(), "r");
    ASSERT_NE(out, nullptr);
    std::string text;
    char buffer[4096];
    for (size_t n; (n = fread(buffer, 1, sizeof(buffer), out)) > 0;) text.append(buffer, n);
    EXPECT_EQ(pclose(out), 0) << text;
    for (const std::string& id : acknowledged) EXPECT_THAT(text, HasSubstr(id));
  }

  // The killed replica comes back as a follower.
  ASSERT_TRUE(r.Restart(l1).ok()) << r.process(l1).log();

  // Pause the leader past its lease: another replica takes over; the paused one, resumed,
  // finds its lease gone, steps down and restarts as a follower naming the new leader.
  r.process(l2).Signal(SIGSTOP);
  leader = r.AwaitLeader(absl::Seconds(kTtlS + 10), l2);
  ASSERT_TRUE(leader.has_value());
  const int l3 = *leader;
  absl::SleepFor(absl::Seconds(kTtlS));  // paused for 2 x TTL in all
  r.process(l2).Signal(SIGCONT);
  const absl::Time resumed = absl::Now();
  bool follower_again = false;
  while (!follower_again && absl::Now() - resumed < absl::Seconds(20)) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
    proto::NodeRequest nobody;
    nobody.set_node_id("no-such-node");
    proto::NodeResponse out;
    const grpc::Status s = r.stub(l2).ReportNodeFailure(&ctx, nobody, &out);
    // Refusing writes naming the new leader, after it has logged its restart as a follower
    // (it may refuse writes, fenced, a moment before).
    follower_again = s.error_code() == grpc::StatusCode::UNAVAILABLE &&
                     s.error_message().find("the leader is at " + r.address(l3)) !=
                         std::string::npos &&
                     r.process(l2).log().find("restarting as a follower") != std::string::npos;
    if (!follower_again) absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(follower_again) << r.process(l2).log();
  EXPECT_THAT(r.process(l2).log(), HasSubstr("restarting as a follower"));
  EXPECT_EQ(JobIds(r, l3), acknowledged);
}

// The output (stdout and stderr) and exit status of a shell command.
std::pair<std::string, int> Shell(const std::string& command) {
  FILE* out = popen((command + " 2>&1").c_str(), "r");
  if (out == nullptr) return {"popen failed", -1};
  std::string text;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof(buffer), out)) > 0;) text.append(buffer, n);
  return {text, pclose(out)};
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The CLI and clients given every replica (cli/planner_client.h): a write listed follower-first
// reaches the leader; one-shot Plan calls are spread over all replicas (each tunes one of three
// calls in turn); a `jobs watch` whose replica is killed goes on at the next one.
TEST(PlannerReplicasTest, ClientsFindTheLeaderSpreadOneShotPlansAndWatchAcrossAFailOver) {
  std::unique_ptr<etcd::EtcdCluster> etcd;
  Replicas r;
  int l = -1;
  ASSERT_NO_FATAL_FAILURE(StartReplicas(&etcd, &r, &l));
  const int f1 = (l + 1) % kReplicas, f2 = (l + 2) % kReplicas;
  const std::string followers_first =
      absl::StrCat(r.address(f1), ",", r.address(f2), ",", r.address(l));

  // A write listed follower-first: the follower names the leader, the CLI goes there.
  const auto [created, created_status] = Shell(absl::StrCat(
      "cli/octopipe jobs create --planner=", followers_first,
      " --model=zoo:llama3-8b --cluster=preset:h100-4nodes --devices=4 --time-budget=1 "
      "--name=cli-job"));
  ASSERT_EQ(created_status, 0) << created;
  EXPECT_THAT(created, HasSubstr("is a follower; the leader is " + r.address(l)));
  const size_t id_at = created.find("created ");
  ASSERT_NE(id_at, std::string::npos) << created;
  const std::string job = created.substr(id_at + 8, created.find(' ', id_at + 8) - id_at - 8);

  // One-shot plans in turn on every replica: three calls, one each.
  cli::PlannerConnection connection;
  connection.address = followers_first;
  connection.timeout_s = 60;
  absl::StatusOr<std::unique_ptr<cli::PlannerClient>> client = connection.Connect();
  ASSERT_TRUE(client.ok()) << client.status();
  const proto::CreateJobRequest small = SmallJob("one-shot");
  proto::PlanRequest plan;
  *plan.mutable_model() = small.model();
  *plan.mutable_cluster() = small.cluster();
  *plan.mutable_options() = small.options();
  for (int k = 0; k < kReplicas; ++k) {
    plan.mutable_options()->set_seed(k + 1);  // distinct requests: no cache, no coalescing
    proto::PlanResponse response;
    const grpc::Status s = (*client)->Call(cli::PlannerClient::Route::kSpread,
                                           &proto::Planner::Stub::Plan, plan, &response);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  for (int i = 0; i < kReplicas; ++i) {
    EXPECT_EQ(MetricValue(ScrapeMetrics(r.process(i).metrics_port()),
                          "octopipe_rpcs_total{code=\"OK\",method=\"Plan\"}"),
              1.0)
        << "replica " << i << " (leader " << l << ")";
  }

  // A watch on the leader (listed first) goes on at the next replica when the leader is killed.
  const std::string out = ::testing::TempDir() + "/watch.out", err = ::testing::TempDir() + "/watch.err";
  const auto [pid_text, started] = Shell(absl::StrCat(
      "cli/octopipe jobs watch --planner=", r.address(l), ",", r.address(f1), ",", r.address(f2),
      " --job=", job, " >", out, " 2>", err, " & echo $!"));
  ASSERT_EQ(started, 0) << pid_text;
  const pid_t watcher = std::stoi(pid_text);
  auto await_text = [&](const std::string& path, const std::string& text) {
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (absl::Now() < deadline) {
      if (ReadText(path).find(text) != std::string::npos) return true;
      absl::SleepFor(absl::Milliseconds(50));  // bounded poll of a file another process writes
    }
    return false;
  };
  ASSERT_TRUE(await_text(out, "v1")) << ReadText(out) << ReadText(err);
  r.process(l).Kill(SIGKILL);
  EXPECT_TRUE(await_text(err, "went away")) << ReadText(err);
  EXPECT_THAT(ReadText(err), HasSubstr("after v1"));
  EXPECT_EQ(kill(watcher, 0), 0) << "the watch ended: " << ReadText(err);
  kill(watcher, SIGTERM);
}

}  // namespace
}  // namespace octopipe
