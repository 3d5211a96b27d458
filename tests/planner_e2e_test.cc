// End to end: the real octopipe-planner process on loopback and real gRPC clients.
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/cluster_presets.h"
#include "core/convert.h"
#include "core/cost_model.h"
#include "core/model_zoo.h"
#include "core/synthetic_model.h"
#include "gtest/gtest.h"
#include "proto/health.grpc.pb.h"
#include "proto/planner.grpc.pb.h"
#include "simulator/problem_builder.h"
#include "tests/planner_calls.h"
#include "tests/planner_process.h"
#include "core/test_dirs.h"

namespace octopipe {
namespace {

using ::octopipe::testing::TestPath;

using testing::PlannerProcess;

constexpr char kPlanner[] = "planner_service/octopipe-planner";


using testing::Beat;
using testing::Connect;
using testing::Ctx;
using testing::Register;

// A small real model: Llama-3 8B on 4 devices, 8 micro-batches (tunes in well under a second),
// without the vocabulary split: the re-plan tests pin the adoption of plans that keep the head
// on its stage (job_manager_vocab_test covers jobs that split it).
proto::CreateJobRequest SmallJob(const std::string& name, const Cluster& cluster) {
  TrainingOptions t;
  t.num_microbatches = 8;
  proto::CreateJobRequest r;
  r.set_name(name);
  *r.mutable_model() = ModelToProto(*ZooModel("llama3-8b", t));
  *r.mutable_cluster() = ClusterToProto(cluster);
  r.mutable_options()->set_num_devices(4);
  r.mutable_options()->set_time_budget_s(5);
  r.mutable_options()->set_vocab_parallel(proto::VOCAB_PARALLEL_OFF);
  return r;
}

Cluster TwoNodes() {
  Cluster c = *ClusterPreset("h100-4nodes");
  c.nodes.resize(2);
  for (Node& n : c.nodes) n.num_devices = 2;
  return c;
}

// Reads the next plan version from a watch stream (the stream's deadline bounds the wait).
bool NextVersion(grpc::ClientReader<proto::PlanVersion>* reader, proto::PlanVersion* v) {
  return reader->Read(v);
}

TEST(PlannerE2ETest, HealthServiceReportsServing) {
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner.Start({"--state_dir=" + TestPath("health")}).ok()) << planner.log();
  auto health = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(planner.address(), grpc::InsecureChannelCredentials()));
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  auto ctx = Ctx();
  ASSERT_TRUE(health->Check(ctx.get(), req, &resp).ok());
  EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST(PlannerE2ETest, CreateJobThenWatchItsPlan) {
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner.Start({"--state_dir=" + TestPath("create")}).ok()) << planner.log();
  auto stub = Connect(planner.address());
  proto::Job job;
  auto ctx = Ctx();
  ASSERT_TRUE(stub->CreateJob(ctx.get(), SmallJob("first", TwoNodes()), &job).ok());
  EXPECT_EQ(job.state(), proto::JOB_STATE_PLANNING);
  proto::WatchPlanRequest w;
  w.set_job_id(job.id());
  auto wctx = Ctx("", 60);
  auto reader = stub->WatchPlan(wctx.get(), w);
  proto::PlanVersion v;
  ASSERT_TRUE(NextVersion(reader.get(), &v));
  EXPECT_EQ(v.version(), 1);
  EXPECT_EQ(v.reason_kind(), proto::PLAN_REASON_INITIAL);
  EXPECT_TRUE(v.result().feasible());
  EXPECT_GT(v.result().plan().predicted().iteration_time_s(), 0);
  EXPECT_EQ(v.result().plan().num_devices(), 4);
  proto::GetJobRequest g;
  g.set_job_id(job.id());
  proto::GetJobResponse got;
  auto gctx = Ctx();
  ASSERT_TRUE(stub->GetJob(gctx.get(), g, &got).ok());
  EXPECT_EQ(got.job().state(), proto::JOB_STATE_READY);
  EXPECT_EQ(got.job().current_version(), 1);
  EXPECT_EQ(got.current().version(), 1);
  wctx->TryCancel();
}

// Per-stage predicted F/B/W seconds of a plan version, computed as the planner does.
PipelineProblem Predicted(const proto::CreateJobRequest& job, const proto::PlanVersion& v) {
  ModelGraph model = *ModelFromProto(job.model());
  Cluster cluster = *ClusterFromProto(job.cluster());
  Plan plan = *PlanFromProto(v.result().plan());
  auto builder = ProblemBuilder::Create(model, cluster, CostModel(), plan.num_devices, {},
                                        plan.vocab_parallel);
  return *builder->Build(plan);
}

proto::ReportStageTimesRequest Report(const std::string& job_id, const proto::PlanVersion& v,
                                      const PipelineProblem& p, int slow_stage, double factor,
                                      double others) {
  proto::ReportStageTimesRequest r;
  r.set_job_id(job_id);
  r.set_plan_version(v.version());
  r.set_node_id("node0");
  // Every stage of slow_stage's device: a slow GPU (one of several stages on it, slow alone,
  // may not be worth a new plan).
  const int slow_device = slow_stage >= 0 ? p.stage_device[slow_stage] : -1;
  for (int s = 0; s < p.num_stages; ++s) {
    const double f = p.stage_device[s] == slow_device ? factor : others;
    for (auto [kind, secs] : {std::pair{proto::OP_KIND_F, p.forward_s[s]},
                              std::pair{proto::OP_KIND_B, p.backward_input_s[s]},
                              std::pair{proto::OP_KIND_W, p.weight_grad_s[s]}}) {
      if (secs <= 0) continue;
      proto::StageTime* t = r.add_times();
      t->set_stage(s);
      t->set_kind(kind);
      t->set_seconds(secs * f);
      t->set_samples(8);
    }
  }
  return r;
}

TEST(PlannerE2ETest, SlowStageTriggersNewVersionSmallDeviationDoesNot) {
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner.Start({"--state_dir=" + TestPath("replan"), "--replan_cooldown_s=0"}).ok())
      << planner.log();
  auto stub = Connect(planner.address());
  const proto::CreateJobRequest req = SmallJob("replan", TwoNodes());
  proto::Job job;
  auto ctx = Ctx();
  ASSERT_TRUE(stub->CreateJob(ctx.get(), req, &job).ok());
  proto::WatchPlanRequest w;
  w.set_job_id(job.id());
  auto wctx = Ctx("", 120);
  auto reader = stub->WatchPlan(wctx.get(), w);
  proto::PlanVersion v1;
  ASSERT_TRUE(NextVersion(reader.get(), &v1));
  const PipelineProblem p = Predicted(req, v1);

  // 2% everywhere: within tolerance, no re-plan, the version stays.
  proto::ReportStageTimesResponse small;
  auto c1 = Ctx();
  ASSERT_TRUE(stub->ReportStageTimes(c1.get(), Report(job.id(), v1, p, -1, 1.0, 1.02), &small)
                  .ok());
  EXPECT_FALSE(small.replanned()) << small.decision();
  EXPECT_EQ(small.current_version(), 1);

  // Stage 0's device 30% slower: a re-plan, and the watcher receives version 2.
  proto::ReportStageTimesResponse slow;
  auto c2 = Ctx();
  ASSERT_TRUE(stub->ReportStageTimes(c2.get(), Report(job.id(), v1, p, 0, 1.3, 1.0), &slow)
                  .ok());
  EXPECT_TRUE(slow.replanned()) << slow.decision();
  proto::PlanVersion v2;
  ASSERT_TRUE(NextVersion(reader.get(), &v2));
  EXPECT_EQ(v2.version(), 2);
  EXPECT_EQ(v2.reason_kind(), proto::PLAN_REASON_MEASURED);
  // The new plan moves work off the slow device: it holds fewer layers.
  auto layers_on = [](const proto::PlanVersion& v, int device) {
    int n = 0;
    for (const auto& st : v.result().plan().stages()) {
      if (st.device() == device) n += st.last_layer() - st.first_layer() + 1;
    }
    return n;
  };
  const int slow_device = v1.result().plan().stages(0).device();
  EXPECT_LT(layers_on(v2, slow_device), layers_on(v1, slow_device));
  // A report against the old version is refused.
  proto::ReportStageTimesResponse stale;
  auto c3 = Ctx();
  grpc::Status st = stub->ReportStageTimes(c3.get(), Report(job.id(), v1, p, 0, 1.3, 1.0), &stale);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
  EXPECT_NE(st.error_message().find("plan_version"), std::string::npos);
  wctx->TryCancel();
}

TEST(PlannerE2ETest, SilentNodeIsDroppedAndItsJobReplannedOnTheRest) {
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(
      planner.Start({"--state_dir=" + TestPath("failure"), "--heartbeat_timeout_s=1"}).ok())
      << planner.log();
  auto stub = Connect(planner.address());
  proto::CreateJobRequest req = SmallJob("failure", TwoNodes());
  req.mutable_options()->set_num_devices(0);  // all devices: 2 nodes x 2
  proto::Job job;
  auto ctx = Ctx();
  ASSERT_TRUE(stub->CreateJob(ctx.get(), req, &job).ok());
  for (const char* node : {"node0", "node1"}) {
    proto::RegisterAgentRequest r;
    r.set_node_id(node);
    r.set_num_devices(2);
    r.set_address("127.0.0.1:1");
    proto::RegisterAgentResponse resp;
    auto rc = Ctx();
    ASSERT_TRUE(stub->RegisterAgent(rc.get(), r, &resp).ok());
  }
  // node0 keeps its heartbeat going, node1 falls silent.
  absl::Notification stop;
  std::thread beat([&] {
    auto s = Connect(planner.address());
    // A heartbeat every 100 ms until the test is done (the period, not a wait for anything).
    do {
      proto::HeartbeatRequest h;
      h.set_node_id("node0");
      proto::HeartbeatResponse hr;
      auto hc = Ctx("", 5);
      s->Heartbeat(hc.get(), h, &hr);
    } while (!stop.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  });
  proto::WatchPlanRequest w;
  w.set_job_id(job.id());
  auto wctx = Ctx("", 60);
  auto reader = stub->WatchPlan(wctx.get(), w);
  proto::PlanVersion v;
  bool replanned = false;
  while (NextVersion(reader.get(), &v)) {
    if (v.reason_kind() == proto::PLAN_REASON_NODE_FAILURE) {
      replanned = true;
      break;
    }
  }
  stop.Notify();
  beat.join();
  ASSERT_TRUE(replanned) << planner.log();
  EXPECT_EQ(v.result().plan().num_devices(), 2);  // node0's devices only
  proto::GetJobRequest g;
  g.set_job_id(job.id());
  proto::GetJobResponse got;
  auto gc = Ctx();
  ASSERT_TRUE(stub->GetJob(gc.get(), g, &got).ok());
  ASSERT_EQ(got.job().excluded_nodes_size(), 1);
  EXPECT_EQ(got.job().excluded_nodes(0), "node1");
  wctx->TryCancel();
}

// After a kill -9 and a restart, registered agents are known and alive again with a full
// heartbeat timeout: a node that keeps heartbeating is never refused, and a node that died
// while the planner was down is declared failed one timeout after the restart (not never).
TEST(PlannerE2ETest, ANodeThatDiedWhileThePlannerWasDownIsDeclaredFailedAfterTheRestart) {
  const std::string dir = TestPath("restart-agents");
  int port = 0;
  {
    PlannerProcess planner(kPlanner);
    ASSERT_TRUE(planner.Start({"--state_dir=" + dir, "--heartbeat_timeout_s=2"}).ok())
        << planner.log();
    port = planner.port();
    auto stub = Connect(planner.address());
    for (const char* node : {"node-a", "node-b"}) {
      proto::RegisterAgentRequest r;
      r.set_node_id(node);
      r.set_num_devices(1);
      r.set_address("127.0.0.1:1");
      proto::RegisterAgentResponse resp;
      auto ctx = Ctx();
      ASSERT_TRUE(stub->RegisterAgent(ctx.get(), r, &resp).ok());
    }
    planner.Kill(SIGKILL);
  }
  PlannerProcess again(kPlanner);
  ASSERT_TRUE(again.Start({"--state_dir=" + dir, "--heartbeat_timeout_s=2",
                           "--port=" + std::to_string(port)}).ok())
      << again.log();
  const absl::Time restarted = absl::Now();
  auto stub = Connect(again.address());
  auto alive = [&](const std::string& node) {
    proto::ListAgentsResponse agents;
    auto ctx = Ctx();
    EXPECT_TRUE(stub->ListAgents(ctx.get(), proto::ListAgentsRequest(), &agents).ok());
    for (const proto::AgentStatus& a : agents.agents()) {
      if (a.node_id() == node) return a.alive();
    }
    return false;
  };
  // node-a heartbeats (accepted at once, no re-registration); node-b died meanwhile.
  std::optional<absl::Duration> b_declared;
  while (absl::Now() - restarted < absl::Seconds(8) && !b_declared) {
    proto::HeartbeatRequest h;
    h.set_node_id("node-a");
    proto::HeartbeatResponse hr;
    auto ctx = Ctx();
    const grpc::Status s = stub->Heartbeat(ctx.get(), h, &hr);
    EXPECT_TRUE(s.ok()) << s.error_message();
    if (!alive("node-b")) b_declared = absl::Now() - restarted;
    absl::SleepFor(absl::Milliseconds(200));  // the heartbeat interval of this fake agent
  }
  ASSERT_TRUE(b_declared.has_value()) << "node-b never declared failed\n" << again.log();
  EXPECT_GE(*b_declared, absl::Seconds(1.5)) << "declared before its timeout ran";
  EXPECT_LE(*b_declared, absl::Seconds(3.5)) << "timeout 2 s after the restart, + detector period";
  EXPECT_TRUE(alive("node-a"));
}

TEST(PlannerE2ETest, KilledAndRestartedPlannerServesTheSameJobsAndVersions) {
  const std::string dir = TestPath("restart");
  std::string job_id;
  proto::GetJobResponse before;
  {
    PlannerProcess planner(kPlanner);
    ASSERT_TRUE(planner.Start({"--state_dir=" + dir}).ok()) << planner.log();
    auto stub = Connect(planner.address());
    proto::Job job;
    auto ctx = Ctx();
    ASSERT_TRUE(stub->CreateJob(ctx.get(), SmallJob("durable", TwoNodes()), &job).ok());
    job_id = job.id();
    proto::WatchPlanRequest w;
    w.set_job_id(job_id);
    auto wctx = Ctx("", 60);
    auto reader = stub->WatchPlan(wctx.get(), w);
    proto::PlanVersion v;
    ASSERT_TRUE(NextVersion(reader.get(), &v));
    wctx->TryCancel();
    proto::GetJobRequest g;
    g.set_job_id(job_id);
    auto gc = Ctx();
    ASSERT_TRUE(stub->GetJob(gc.get(), g, &before).ok());
    const int status = planner.Kill(SIGKILL);  // a crash, not a clean shutdown
    EXPECT_TRUE(WIFSIGNALED(status));
  }
  PlannerProcess again(kPlanner);
  ASSERT_TRUE(again.Start({"--state_dir=" + dir}).ok()) << again.log();
  auto stub = Connect(again.address());
  proto::ListJobsResponse list;
  auto lc = Ctx();
  ASSERT_TRUE(stub->ListJobs(lc.get(), proto::ListJobsRequest(), &list).ok());
  ASSERT_EQ(list.jobs_size(), 1);
  EXPECT_EQ(list.jobs(0).id(), job_id);
  proto::GetJobRequest g;
  g.set_job_id(job_id);
  proto::GetJobResponse after;
  auto gc = Ctx();
  ASSERT_TRUE(stub->GetJob(gc.get(), g, &after).ok());
  EXPECT_EQ(after.job().current_version(), before.job().current_version());
  EXPECT_EQ(after.current().SerializeAsString(), before.current().SerializeAsString());
  // And it still works: a new job gets the next id.
  proto::Job next;
  auto cc = Ctx();
  ASSERT_TRUE(stub->CreateJob(cc.get(), SmallJob("next", TwoNodes()), &next).ok());
  EXPECT_NE(next.id(), job_id);
  // SIGTERM is a graceful shutdown.
  const int status = again.Kill(SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << again.log();
}

TEST(PlannerE2ETest, BadRequestsGetTheRightCodesAndNameTheField) {
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner.Start({"--state_dir=" + TestPath("bad"), "--max_layers=40",
                             "--max_request_bytes=200000"})
                  .ok())
      << planner.log();
  auto stub = Connect(planner.address());
  auto code_of = [&](const proto::CreateJobRequest& r, std::string* msg) {
    proto::Job job;
    auto ctx = Ctx();
    grpc::Status s = stub->CreateJob(ctx.get(), r, &job);
    *msg = s.error_message();
    return s.error_code();
  };
  std::string msg;
  // Small models (under --max_layers) so the field errors are what is left to report.
  proto::CreateJobRequest small = SmallJob("x", TwoNodes());
  *small.mutable_model() = ModelToProto(*ParseSyntheticModel("layers=8,f=0.01,b=0.01,w=0.01"));
  proto::CreateJobRequest bad_kind = small;
  bad_kind.mutable_model()->mutable_layers(3)->set_kind("transformer");
  EXPECT_EQ(code_of(bad_kind, &msg), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(msg.find("model.layers[3].kind"), std::string::npos) << msg;

  proto::CreateJobRequest bad_devices = small;
  bad_devices.mutable_options()->set_num_devices(-1);
  EXPECT_EQ(code_of(bad_devices, &msg), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(msg.find("options.num_devices"), std::string::npos) << msg;

  // Llama-3 8B has 66 layers in our layering: over --max_layers=40.
  proto::CreateJobRequest too_many = SmallJob("x", TwoNodes());
  EXPECT_EQ(code_of(too_many, &msg), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(msg.find("model.layers"), std::string::npos) << msg;
  EXPECT_NE(msg.find("40"), std::string::npos) << msg;

  // Over --max_request_bytes.
  proto::CreateJobRequest huge = SmallJob("x", TwoNodes());
  huge.set_name(std::string(300000, 'x'));
  EXPECT_EQ(code_of(huge, &msg), grpc::StatusCode::RESOURCE_EXHAUSTED);

  proto::GetJobRequest g;
  g.set_job_id("job-404");
  proto::GetJobResponse got;
  auto gc = Ctx();
  grpc::Status s = stub->GetJob(gc.get(), g, &got);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(s.error_message().find("job-404"), std::string::npos);

  proto::HeartbeatRequest h;
  h.set_node_id("ghost");
  proto::HeartbeatResponse hr;
  auto hc = Ctx();
  EXPECT_EQ(stub->Heartbeat(hc.get(), h, &hr).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST(PlannerE2ETest, TokenIsRefusedWhenMissingOrWrongAndAcceptedWhenRight) {
  const std::string token_file = TestPath("token.txt");
  std::ofstream(token_file) << "s3cret\n";
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner.Start({"--state_dir=" + TestPath("token"), "--token_file=" + token_file})
                  .ok())
      << planner.log();
  auto stub = Connect(planner.address());
  proto::Job job;
  auto none = Ctx();
  EXPECT_EQ(stub->CreateJob(none.get(), SmallJob("t", TwoNodes()), &job).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  auto wrong = Ctx("guess");
  EXPECT_EQ(stub->CreateJob(wrong.get(), SmallJob("t", TwoNodes()), &job).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  auto right = Ctx("s3cret");
  EXPECT_TRUE(stub->CreateJob(right.get(), SmallJob("t", TwoNodes()), &job).ok());
  // Reading needs the token too (job specs and the cluster's addresses are not public).
  proto::ListJobsResponse list;
  auto lc = Ctx();
  EXPECT_EQ(stub->ListJobs(lc.get(), proto::ListJobsRequest(), &list).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  proto::ListAgentsResponse agents;
  auto la = Ctx();
  EXPECT_EQ(stub->ListAgents(la.get(), proto::ListAgentsRequest(), &agents).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  auto lr = Ctx("s3cret");
  EXPECT_TRUE(stub->ListJobs(lr.get(), proto::ListJobsRequest(), &list).ok());
  EXPECT_EQ(list.jobs_size(), 1);
}

// A client certificate with subject CN `cn`, signed by MakeCerts' CA in `dir`.
bool MakeClientCert(const std::string& dir, const std::string& cn) {
  const std::string cmd =
      "cd '" + dir + "' && openssl req -newkey rsa:2048 -nodes -subj /CN=" + cn + " -keyout " +
      cn + ".key -out " + cn + ".csr 2>/dev/null && openssl x509 -req -in " + cn +
      ".csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -out " + cn + ".pem 2>/dev/null";
  return std::system(cmd.c_str()) == 0;
}

// Generates a CA, a server certificate for 127.0.0.1/localhost and a client certificate.
bool MakeCerts(const std::string& dir) {
  const std::string script = dir + "/make-certs.sh";
  std::system(("mkdir -p " + dir).c_str());
  std::ofstream(script) << "set -e\ncd \"" << dir << "\"\n"
      << "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=octopipe-test-ca "
         "-keyout ca.key -out ca.pem 2>/dev/null\n"
      << "openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout server.key "
         "-out server.csr 2>/dev/null\n"
      << "echo 'subjectAltName=DNS:localhost,IP:127.0.0.1' > san.ext\n"
      << "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
         "-extfile san.ext -out server.pem 2>/dev/null\n"
      << "openssl req -newkey rsa:2048 -nodes -subj /CN=agent -keyout client.key "
         "-out client.csr 2>/dev/null\n"
      << "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
         "-out client.pem 2>/dev/null\n";
  return std::system(("bash " + script).c_str()) == 0;
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(PlannerE2ETest, MutualTlsAcceptsTheSignedClientAndRefusesOthers) {
  const std::string dir = TestPath("certs");
  ASSERT_TRUE(MakeCerts(dir));
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner.Start({"--state_dir=" + TestPath("tls"), "--tls_cert=" + dir + "/server.pem",
                             "--tls_key=" + dir + "/server.key",
                             "--tls_client_ca=" + dir + "/ca.pem"})
                  .ok())
      << planner.log();
  grpc::SslCredentialsOptions with_cert;
  with_cert.pem_root_certs = Read(dir + "/ca.pem");
  with_cert.pem_private_key = Read(dir + "/client.key");
  with_cert.pem_cert_chain = Read(dir + "/client.pem");
  auto ok_stub = Connect(planner.address(), grpc::SslCredentials(with_cert));
  proto::ListJobsResponse list;
  auto c1 = Ctx("", 20);
  grpc::Status s = ok_stub->ListJobs(c1.get(), proto::ListJobsRequest(), &list);
  EXPECT_TRUE(s.ok()) << s.error_message();

  grpc::SslCredentialsOptions no_cert;
  no_cert.pem_root_certs = Read(dir + "/ca.pem");
  auto no_stub = Connect(planner.address(), grpc::SslCredentials(no_cert));
  auto c2 = Ctx("", 10);
  EXPECT_FALSE(no_stub->ListJobs(c2.get(), proto::ListJobsRequest(), &list).ok());

  auto plain = Connect(planner.address());
  auto c3 = Ctx("", 10);
  EXPECT_FALSE(plain->ListJobs(c3.get(), proto::ListJobsRequest(), &list).ok());
}

// --- node identities and roles (planner_service/access.h) ---

grpc::StatusCode ListJobsCode(proto::Planner::Stub* stub, const std::string& token) {
  proto::ListJobsResponse list;
  auto ctx = Ctx(token, 20);
  return stub->ListJobs(ctx.get(), proto::ListJobsRequest(), &list).error_code();
}

std::unique_ptr<proto::Planner::Stub> ConnectAs(const std::string& address,
                                                const std::string& dir, const std::string& cn) {
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = Read(dir + "/ca.pem");
  o.pem_private_key = Read(dir + "/" + cn + ".key");
  o.pem_cert_chain = Read(dir + "/" + cn + ".pem");
  return Connect(address, grpc::SslCredentials(o));
}

// Two mutual-TLS agents identified by their certificates' CN, a scheduler by its token over a
// certificate that names no principal: each agent acts only for its own node
// (PERMISSION_DENIED naming both), agents cannot schedule, a certificate naming no principal
// reads nothing without a token; the audit log has the refused and accepted mutating calls.
TEST(PlannerE2ETest, CertificatesIdentifyAgentsWhoActOnlyForTheirNode) {
  const std::string dir = TestPath("id-certs");
  ASSERT_TRUE(MakeCerts(dir));
  for (const char* cn : {"node-a", "node-b", "tooling"}) ASSERT_TRUE(MakeClientCert(dir, cn));
  const std::string identities = TestPath("identities-certs.json");
  std::ofstream(identities) << R"({"principals": [
      {"name": "node-a", "role": "agent", "node": "node-a", "certificate": "node-a"},
      {"name": "node-b", "role": "agent", "node": "node-b", "certificate": "node-b"},
      {"name": "sched", "role": "scheduler", "token": "s-token"}]})";
  const std::string audit = TestPath("audit-certs.jsonl");
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner.Start({"--state_dir=" + TestPath("id-tls"), "--tls_cert=" + dir + "/server.pem",
                             "--tls_key=" + dir + "/server.key",
                             "--tls_client_ca=" + dir + "/ca.pem", "--identities=" + identities,
                             "--audit_log=" + audit})
                  .ok())
      << planner.log();
  auto a = ConnectAs(planner.address(), dir, "node-a");
  auto b = ConnectAs(planner.address(), dir, "node-b");
  auto tooling = ConnectAs(planner.address(), dir, "tooling");
  EXPECT_EQ(Register(a.get(), "", "node-a"), grpc::StatusCode::OK);
  EXPECT_EQ(Register(b.get(), "", "node-b"), grpc::StatusCode::OK);
  EXPECT_EQ(Register(a.get(), "", "node-b"), grpc::StatusCode::PERMISSION_DENIED);
  grpc::Status hijack = Beat(a.get(), "", "node-b");
  EXPECT_EQ(hijack.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(hijack.error_message().find("acts for node 'node-a' only, not for node 'node-b'"),
            std::string::npos)
      << hijack.error_message();
  EXPECT_TRUE(Beat(b.get(), "", "node-b").ok());
  EXPECT_EQ(ListJobsCode(a.get(), ""), grpc::StatusCode::OK);  // agents read jobs
  proto::Job job;
  auto ca = Ctx("", 20);
  EXPECT_EQ(a->CreateJob(ca.get(), SmallJob("x", TwoNodes()), &job).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // A certificate the CA signed but no principal names: nothing without a token.
  EXPECT_EQ(ListJobsCode(tooling.get(), ""), grpc::StatusCode::UNAUTHENTICATED);
  auto cs = Ctx("s-token", 60);
  ASSERT_TRUE(tooling->CreateJob(cs.get(), SmallJob("sched", TwoNodes()), &job).ok());
  EXPECT_EQ(Register(tooling.get(), "s-token", "node-a"), grpc::StatusCode::PERMISSION_DENIED);

  // The audit log: one line per mutating call, refused heartbeats too, accepted ones not.
  std::vector<std::string> lines;
  std::ifstream in(audit);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  auto has = [&](const std::string& a1, const std::string& a2, const std::string& a3) {
    for (const std::string& l : lines) {
      if (l.find(a1) != std::string::npos && l.find(a2) != std::string::npos &&
          l.find(a3) != std::string::npos) {
        return true;
      }
    }
    return false;
  };
  EXPECT_TRUE(has(R"("identity":"node-a")", R"("method":"Heartbeat")", "PERMISSION_DENIED"));
  EXPECT_FALSE(has(R"("identity":"node-b")", R"("method":"Heartbeat")", R"("code":"OK")"));
  EXPECT_TRUE(has(R"("identity":"sched")", R"("method":"CreateJob")", R"("code":"OK")"));
  EXPECT_TRUE(has(R"("identity":"node-a")", R"("method":"CreateJob")", "PERMISSION_DENIED"));
  EXPECT_TRUE(has(R"("identity":"node-b")", R"("method":"RegisterAgent")", R"("code":"OK")"));
  // RegisterAgent 4 (2 refused), Heartbeat 1 (refused), CreateJob 2 (1 refused).
  EXPECT_EQ(lines.size(), 7u) << planner.log();
}

// Per-node tokens over plaintext: each token acts for its node; a viewer reads but cannot
// schedule; no credential reads nothing; SIGHUP re-reads the file (the viewer removed is
// refused from then on) and a broken file keeps the principals.
TEST(PlannerE2ETest, PerNodeTokensRolesAndReloadOnSighup) {
  const std::string identities = TestPath("identities-tokens.json");
  std::ofstream(identities) << R"({"principals": [
      {"name": "node-a", "role": "agent", "node": "node-a", "token": "a-token"},
      {"name": "node-b", "role": "agent", "node": "node-b", "token": "b-token"},
      {"name": "viewer", "role": "viewer", "token": "v-token"}]})";
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(
      planner.Start({"--state_dir=" + TestPath("id-tokens"), "--identities=" + identities}).ok())
      << planner.log();
  auto stub = Connect(planner.address());
  EXPECT_EQ(Register(stub.get(), "a-token", "node-a"), grpc::StatusCode::OK);
  EXPECT_EQ(Register(stub.get(), "b-token", "node-b"), grpc::StatusCode::OK);
  EXPECT_EQ(Register(stub.get(), "a-token", "node-b"), grpc::StatusCode::PERMISSION_DENIED);
  // While node-a's agent is alive its address stays (a retry with it is fine).
  EXPECT_EQ(Register(stub.get(), "a-token", "node-a", "10.9.9.9:1"),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(Register(stub.get(), "a-token", "node-a"), grpc::StatusCode::OK);
  EXPECT_EQ(Beat(stub.get(), "b-token", "node-a").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(ListJobsCode(stub.get(), "v-token"), grpc::StatusCode::OK);
  EXPECT_EQ(ListJobsCode(stub.get(), ""), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(ListJobsCode(stub.get(), "x-token"), grpc::StatusCode::UNAUTHENTICATED);
  proto::Job job;
  auto cv = Ctx("v-token", 20);
  EXPECT_EQ(stub->CreateJob(cv.get(), SmallJob("x", TwoNodes()), &job).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  proto::NodeRequest drain;
  drain.set_node_id("node-a");
  proto::NodeResponse dr;
  auto cd = Ctx("b-token", 20);
  EXPECT_EQ(stub->DrainNode(cd.get(), drain, &dr).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);

  // Reload: the viewer goes, node-a's token changes.
  std::ofstream(identities) << R"({"principals": [
      {"name": "node-a", "role": "agent", "node": "node-a", "token": "a-token-2"},
      {"name": "node-b", "role": "agent", "node": "node-b", "token": "b-token"}]})";
  planner.Signal(SIGHUP);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (ListJobsCode(stub.get(), "v-token") == grpc::StatusCode::OK &&
         std::chrono::steady_clock::now() < deadline) {
  }
  EXPECT_EQ(ListJobsCode(stub.get(), "v-token"), grpc::StatusCode::UNAUTHENTICATED)
      << planner.log();
  EXPECT_TRUE(Beat(stub.get(), "a-token-2", "node-a").ok());
  EXPECT_EQ(Beat(stub.get(), "a-token", "node-a").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  // A broken file keeps the principals (and the planner keeps serving).
  std::ofstream(identities) << "{ broken";
  planner.Signal(SIGHUP);
  const auto logged = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (planner.log().find("identities not reloaded") == std::string::npos &&
         std::chrono::steady_clock::now() < logged) {
    ListJobsCode(stub.get(), "b-token");
  }
  EXPECT_NE(planner.log().find("identities not reloaded"), std::string::npos) << planner.log();
  EXPECT_TRUE(Beat(stub.get(), "b-token", "node-b").ok());
}

TEST(PlannerE2ETest, IdentitiesFlagErrorsAreClear) {
  const std::string bad = TestPath("identities-bad.json");
  std::ofstream(bad) << R"({"principals": [{"name": "a", "role": "root", "token": "t"}]})";
  PlannerProcess planner(kPlanner);
  absl::Status s = planner.Start({"--state_dir=" + TestPath("id-bad"), "--identities=" + bad}, 20);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(planner.log().find("--identities: identities '" + bad +
                               "': principals[0].role: unknown role 'root'"),
            std::string::npos)
      << planner.log();
  PlannerProcess both(kPlanner);
  EXPECT_FALSE(both.Start({"--state_dir=" + TestPath("id-both"), "--identities=" + bad,
                           "--token=x"},
                          20)
                   .ok());
  EXPECT_NE(both.log().find("mutually exclusive"), std::string::npos) << both.log();
}

TEST(PlannerE2ETest, PlaintextServerWhenTlsIsOff) {
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner.Start({"--state_dir=" + TestPath("plain")}).ok()) << planner.log();
  auto stub = Connect(planner.address());
  proto::ListJobsResponse list;
  auto c = Ctx();
  EXPECT_TRUE(stub->ListJobs(c.get(), proto::ListJobsRequest(), &list).ok());
}

TEST(PlannerE2ETest, SixtyFourClientsTimesFiftyPlanCallsAllSucceed) {
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner.Start({"--state_dir=" + TestPath("load"), "--max_queued=128"}).ok())
      << planner.log();
  proto::PlanRequest req;
  *req.mutable_model() = ModelToProto(*ParseSyntheticModel("layers=8,f=0.001,b=0.001,w=0.001"));
  *req.mutable_cluster() = ClusterToProto(*ClusterPreset("h100-1node"));
  req.mutable_options()->set_num_devices(4);
  req.mutable_options()->set_num_microbatches(8);
  req.mutable_options()->set_time_budget_s(1);
  std::atomic<int> ok{0}, failed{0};
  std::string first_error;
  std::mutex mu;
  std::vector<std::thread> clients;
  for (int c = 0; c < 64; ++c) {
    clients.emplace_back([&] {
      auto stub = Connect(planner.address());
      for (int i = 0; i < 50; ++i) {
        proto::PlanResponse resp;
        auto ctx = Ctx("", 120);
        grpc::Status s = stub->Plan(ctx.get(), req, &resp);
        if (s.ok() && resp.result().plan().predicted().iteration_time_s() > 0) {
          ++ok;
        } else {
          ++failed;
          std::lock_guard<std::mutex> lock(mu);
          if (first_error.empty()) first_error = s.error_message();
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok.load(), 64 * 50) << first_error;
  EXPECT_EQ(failed.load(), 0);
}

}  // namespace
}  // namespace octopipe
