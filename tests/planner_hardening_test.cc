// Hardening regressions, each sending the input that once broke the planner, through the real
// octopipe-planner process on loopback: size limits answered before any allocation,
// stored bad data marked FAILED instead of a crash loop, finite numbers and physical ranges,
// unknown and conflicting nodes, durable re-plan intent across kill -9, job ids that never
// repeat, pages of job summaries under gRPC's default 4 MB, and an empty database refused.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "core/cluster_presets.h"
#include "core/convert.h"
#include "core/model_zoo.h"
#include "core/synthetic_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner_service/sqlite_store.h"
#include "proto/health.grpc.pb.h"
#include "proto/planner.grpc.pb.h"
#include "tests/planner_process.h"
#include "core/test_dirs.h"

namespace octopipe {
namespace {

using ::octopipe::testing::TestPath;

using ::testing::HasSubstr;
using testing::PlannerProcess;

constexpr char kPlanner[] = "planner_service/octopipe-planner";


std::unique_ptr<proto::Planner::Stub> Connect(const PlannerProcess& p) {
  return proto::Planner::NewStub(
      grpc::CreateChannel(p.address(), grpc::InsecureChannelCredentials()));
}

std::unique_ptr<grpc::ClientContext> Ctx(double timeout_s = 60) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  return ctx;
}

Cluster TwoNodes() {
  Cluster c = *ClusterPreset("h100-4nodes");
  c.nodes.resize(2);
  for (Node& n : c.nodes) n.num_devices = 2;
  return c;
}

proto::PlanRequest SmallPlan() {
  TrainingOptions t;
  t.num_microbatches = 8;
  proto::PlanRequest r;
  *r.mutable_model() = ModelToProto(*ZooModel("llama3-8b", t));
  *r.mutable_cluster() = ClusterToProto(TwoNodes());
  r.mutable_options()->set_num_devices(4);
  r.mutable_options()->set_time_budget_s(1);
  return r;
}

proto::CreateJobRequest AsJob(const proto::PlanRequest& p, const std::string& name) {
  proto::CreateJobRequest r;
  r.set_name(name);
  *r.mutable_model() = p.model();
  *r.mutable_cluster() = p.cluster();
  *r.mutable_options() = p.options();
  return r;
}

bool Serving(const PlannerProcess& p) {
  auto health = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(p.address(), grpc::InsecureChannelCredentials()));
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  auto ctx = Ctx(10);
  return health->Check(ctx.get(), req, &resp).ok() &&
         resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

grpc::Status CallPlan(proto::Planner::Stub* stub, const proto::PlanRequest& r) {
  proto::PlanResponse resp;
  auto ctx = Ctx();
  return stub->Plan(ctx.get(), r, &resp);
}

grpc::Status CallCreate(proto::Planner::Stub* stub, const proto::CreateJobRequest& r,
                        proto::Job* job) {
  auto ctx = Ctx();
  return stub->CreateJob(ctx.get(), r, job);
}

// Waits (bounded by the stream deadline) for a version of the job newer than `after`.
absl::StatusOr<proto::PlanVersion> NextVersion(proto::Planner::Stub* stub, const std::string& id,
                                               int64_t after) {
  proto::WatchPlanRequest w;
  w.set_job_id(id);
  w.set_after_version(after);
  auto ctx = Ctx(120);
  auto reader = stub->WatchPlan(ctx.get(), w);
  proto::PlanVersion v;
  if (!reader->Read(&v)) return absl::DeadlineExceededError("no version");
  ctx->TryCancel();
  return v;
}

TEST(PlannerHardeningTest, HugeMicrobatchesAreRefusedNamingTheLimitAndTheServerLives) {
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner.Start({"--state_dir=" + TestPath("huge")}).ok()) << planner.log();
  auto stub = Connect(planner);
  proto::PlanRequest r = SmallPlan();
  r.mutable_options()->set_num_microbatches(2147483647);
  grpc::Status s = CallPlan(stub.get(), r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("options.num_microbatches: 2147483647 exceeds the "
                                           "limit of 4096 (max_microbatches)"));
  proto::Job job;
  s = CallCreate(stub.get(), AsJob(r, "huge"), &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  // 2^32 + 8 in the model is refused, not truncated to 8.
  r = SmallPlan();
  r.mutable_model()->mutable_training()->set_num_microbatches((int64_t{1} << 32) + 8);
  s = CallPlan(stub.get(), r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("model.training.num_microbatches: 4294967304"));
  // Chunks x micro-batches within each limit but too much together.
  r = SmallPlan();
  r.mutable_options()->set_num_microbatches(4096);
  *r.mutable_model() = ModelToProto(*ParseSyntheticModel("layers=4096,f=1,b=1,w=1"));
  *r.mutable_cluster() = ClusterToProto(SyntheticCluster(1024));
  r.mutable_options()->set_num_devices(1024);
  s = CallPlan(stub.get(), r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("max_stage_microbatches"));
  // 100,000 hardware specs: refused before conversion.
  r = SmallPlan();
  for (int i = 0; i < 100000; ++i) {
    proto::HardwareSpec* h = r.mutable_cluster()->add_hardware();
    h->set_name(absl::StrCat("hw", i));
    h->set_peak_flops(1e15);
    h->set_memory_bytes(80e9);
    h->set_memory_bandwidth(3e12);
  }
  s = CallPlan(stub.get(), r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("cluster.hardware: 100001 exceeds the limit of 256"));
  EXPECT_TRUE(Serving(planner));
  EXPECT_TRUE(CallPlan(stub.get(), SmallPlan()).ok());
}

TEST(PlannerHardeningTest, StoredJobThatNoLongerValidatesIsFailedNotACrashLoop) {
  const std::string dir = TestPath("stored");
  {
    absl::StatusOr<std::unique_ptr<Store>> store = SqliteStore::Open(dir + "/planner.db");
    ASSERT_TRUE(store.ok()) << store.status();
    proto::PlanRequest r = SmallPlan();
    proto::Job job;
    job.set_id("job-1");
    job.set_name("stored-by-an-older-binary");
    *job.mutable_model() = r.model();
    *job.mutable_cluster() = r.cluster();
    *job.mutable_options() = r.options();
    job.mutable_options()->set_num_microbatches(2147483647);
    job.set_state(proto::JOB_STATE_PLANNING);
    job.set_created_unix_ms(2);  // listed after job-2
    ASSERT_TRUE((*store)->PutJobMessage(job).ok());
    // And a job with a 5 MB model (20,000 layers with long names) for the size limits below.
    proto::Job big = job;
    big.set_id("job-2");
    big.set_name("five-megabytes");
    big.mutable_options()->set_num_microbatches(8);
    big.mutable_model()->clear_layers();
    for (int i = 0; i < 20000; ++i) {
      proto::Layer* l = big.mutable_model()->add_layers();
      l->set_name(absl::StrCat(std::string(230, 'x'), i));
      l->set_kind("mlp");
      l->mutable_measured()->set_forward_s(1e-3);
      l->mutable_measured()->set_backward_input_s(1e-3);
      l->mutable_measured()->set_weight_grad_s(1e-3);
      l->mutable_measured()->set_activation_bytes(1);
      l->mutable_measured()->set_param_bytes(1);
      l->mutable_measured()->set_output_bytes(1);
    }
    big.set_created_unix_ms(1);
    ASSERT_GT(big.ByteSizeLong(), 5u << 20);
    ASSERT_TRUE((*store)->PutJobMessage(big).ok());
  }
  for (int start = 0; start < 2; ++start) {  // and again: no crash loop
    PlannerProcess planner(kPlanner);
    ASSERT_TRUE(planner.Start({"--state_dir=" + dir}).ok()) << planner.log();
    auto stub = Connect(planner);
    proto::GetJobRequest g;
    g.set_job_id("job-1");
    proto::GetJobResponse got;
    auto ctx = Ctx();
    ASSERT_TRUE(stub->GetJob(ctx.get(), g, &got).ok());
    EXPECT_EQ(got.job().state(), proto::JOB_STATE_FAILED);
    EXPECT_THAT(got.job().last_error(), HasSubstr("max_microbatches"));
    // A default client (4 MB receive limit) gets the 5 MB job, without its layers.
    g.set_job_id("job-2");
    auto ctx2 = Ctx();
    grpc::Status s = stub->GetJob(ctx2.get(), g, &got);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_TRUE(got.model_omitted());
    EXPECT_EQ(got.job().num_layers(), 20000);
    EXPECT_EQ(got.job().state(), proto::JOB_STATE_FAILED);  // 20,000 > max_layers
    proto::ListJobsResponse list;
    auto ctx3 = Ctx();
    s = stub->ListJobs(ctx3.get(), proto::ListJobsRequest(), &list);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(list.jobs_size(), 2);
    EXPECT_EQ(list.jobs(0).id(), "job-2");
    EXPECT_EQ(list.jobs(0).model().layers_size(), 0);
    EXPECT_EQ(list.jobs(0).num_layers(), 20000);
    EXPECT_TRUE(list.next_page_token().empty());
    // Pages of one.
    proto::ListJobsRequest page;
    page.set_page_size(1);
    auto ctx4 = Ctx();
    ASSERT_TRUE(stub->ListJobs(ctx4.get(), page, &list).ok());
    ASSERT_EQ(list.jobs_size(), 1);
    EXPECT_EQ(list.jobs(0).id(), "job-2");
    page.set_page_token(list.next_page_token());
    auto ctx5 = Ctx();
    ASSERT_TRUE(stub->ListJobs(ctx5.get(), page, &list).ok());
    ASSERT_EQ(list.jobs_size(), 1);
    EXPECT_EQ(list.jobs(0).id(), "job-1");
    EXPECT_TRUE(list.next_page_token().empty());
    EXPECT_TRUE(Serving(planner));
  }
}

TEST(PlannerHardeningTest, NonFiniteAndOutOfRangeNumbersAreInvalidArgument) {
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner.Start({"--state_dir=" + TestPath("finite")}).ok()) << planner.log();
  auto stub = Connect(planner);
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    const char* what;
    std::function<void(proto::PlanRequest*)> edit;
    const char* field;
  };
  const Case cases[] = {
      {"forward_s = inf",
       [&](proto::PlanRequest* r) {
         r->mutable_model()->mutable_layers(1)->mutable_measured()->set_forward_s(inf);
       },
       "layers[1].measured.forward_s"},
      {"forward_s = 1e308",
       [](proto::PlanRequest* r) {
         r->mutable_model()->mutable_layers(1)->mutable_measured()->set_forward_s(1e308);
       },
       "layers[1].measured.forward_s"},
      {"forward_s = 1e-300",
       [](proto::PlanRequest* r) {
         r->mutable_model()->mutable_layers(1)->mutable_measured()->set_forward_s(1e-300);
       },
       "layers[1].measured.forward_s"},
      {"param_bytes = 1e308",
       [](proto::PlanRequest* r) {
         r->mutable_model()->mutable_layers(1)->mutable_measured()->set_param_bytes(1e308);
       },
       "layers[1].measured.param_bytes"},
      {"peak_flops = 1e-300",
       [](proto::PlanRequest* r) {
         r->mutable_cluster()->mutable_hardware(0)->set_peak_flops(1e-300);
       },
       "hardware[0].peak_flops"},
      {"peak_flops = inf",
       [&](proto::PlanRequest* r) {
         r->mutable_cluster()->mutable_hardware(0)->set_peak_flops(inf);
       },
       "hardware[0].peak_flops"},
      {"inter-node latency = 1e308",
       [](proto::PlanRequest* r) {
         r->mutable_cluster()->mutable_inter_node_link()->set_latency_s(1e308);
       },
       "inter_node_link.latency_s"},
      {"duplicate node names",
       [](proto::PlanRequest* r) {
         r->mutable_cluster()->mutable_nodes(1)->set_name(r->cluster().nodes(0).name());
       },
       "nodes[1].name"},
      {"empty node name",
       [](proto::PlanRequest* r) { r->mutable_cluster()->mutable_nodes(0)->set_name(""); },
       "nodes[0].name is empty"},
      {"num_devices beyond the cluster",
       [](proto::PlanRequest* r) { r->mutable_options()->set_num_devices(1000); },
       "options.num_devices: 1000 devices asked for, but cluster"},
  };
  for (const Case& c : cases) {
    proto::PlanRequest r = SmallPlan();
    c.edit(&r);
    grpc::Status s = CallPlan(stub.get(), r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.what;
    EXPECT_THAT(s.error_message(), HasSubstr(c.field)) << c.what;
  }
}

TEST(PlannerHardeningTest, UnknownNodesAndConflictingRegistrations) {
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner.Start({"--state_dir=" + TestPath("nodes")}).ok()) << planner.log();
  auto stub = Connect(planner);
  proto::NodeRequest n;
  n.set_node_id("no-such-node");
  proto::NodeResponse nr;
  auto c1 = Ctx();
  EXPECT_EQ(stub->DrainNode(c1.get(), n, &nr).error_code(), grpc::StatusCode::NOT_FOUND);
  auto c2 = Ctx();
  EXPECT_EQ(stub->ReportNodeFailure(c2.get(), n, &nr).error_code(), grpc::StatusCode::NOT_FOUND);

  proto::RegisterAgentRequest reg;
  reg.set_node_id("node0");
  reg.set_num_devices(8);
  reg.set_address("127.0.0.1:1");
  proto::RegisterAgentResponse rr;
  auto c3 = Ctx();
  ASSERT_TRUE(stub->RegisterAgent(c3.get(), reg, &rr).ok());
  reg.set_address("127.0.0.1:2");  // an agent restart: documented replace
  auto c4 = Ctx();
  EXPECT_TRUE(stub->RegisterAgent(c4.get(), reg, &rr).ok());
  reg.set_num_devices(4);  // a second agent claiming the node with other hardware
  auto c5 = Ctx();
  grpc::Status s = stub->RegisterAgent(c5.get(), reg, &rr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("registered and alive with 8 devices"));
  // A registered node is known: draining it is OK.
  n.set_node_id("node0");
  auto c6 = Ctx();
  EXPECT_TRUE(stub->DrainNode(c6.get(), n, &nr).ok());
}

TEST(PlannerHardeningTest, JobIdsNeverRepeatAfterDeleteAndRestart) {
  const std::string dir = TestPath("ids");
  std::string first;
  {
    PlannerProcess planner(kPlanner);
    ASSERT_TRUE(planner.Start({"--state_dir=" + dir}).ok()) << planner.log();
    auto stub = Connect(planner);
    proto::Job job;
    ASSERT_TRUE(CallCreate(stub.get(), AsJob(SmallPlan(), "a"), &job).ok());
    first = job.id();
    proto::DeleteJobRequest d;
    d.set_job_id(first);
    proto::DeleteJobResponse dr;
    auto ctx = Ctx();
    ASSERT_TRUE(stub->DeleteJob(ctx.get(), d, &dr).ok());
    planner.Kill(SIGKILL);
  }
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner.Start({"--state_dir=" + dir}).ok()) << planner.log();
  auto stub = Connect(planner);
  proto::Job job;
  ASSERT_TRUE(CallCreate(stub.get(), AsJob(SmallPlan(), "b"), &job).ok());
  EXPECT_EQ(first, "job-1");
  EXPECT_EQ(job.id(), "job-2");
}

// DrainNode acknowledged while its re-plan still waits (the only worker is busy with a long
// one-shot Plan), then kill -9: the restarted planner must re-plan without the node.
TEST(PlannerHardeningTest, AcknowledgedDrainIsReplannedAfterKill9) {
  const std::string dir = TestPath("intent");
  std::string id;
  {
    PlannerProcess planner(kPlanner);
    ASSERT_TRUE(planner.Start({"--state_dir=" + dir, "--workers=1"}).ok()) << planner.log();
    auto stub = Connect(planner);
    proto::Job job;
    ASSERT_TRUE(CallCreate(stub.get(), AsJob(SmallPlan(), "drained"), &job).ok());
    id = job.id();
    absl::StatusOr<proto::PlanVersion> v1 = NextVersion(stub.get(), id, 0);
    ASSERT_TRUE(v1.ok());
    ASSERT_EQ(v1->result().plan().num_devices(), 4);
    // A second job whose first plan is long occupies the only worker; the drain's re-plan of
    // the first job queues behind it (the jobs lane is first in, first out).
    proto::PlanRequest slow;
    *slow.mutable_model() = ModelToProto(*ParseSyntheticModel("layers=512,f=1,b=1,w=1"));
    *slow.mutable_cluster() = ClusterToProto(SyntheticCluster(128));
    slow.mutable_options()->set_num_microbatches(256);
    slow.mutable_options()->set_time_budget_s(20);
    proto::Job slow_job;
    ASSERT_TRUE(CallCreate(stub.get(), AsJob(slow, "slow"), &slow_job).ok());
    proto::NodeRequest n;
    n.set_node_id("node1");
    proto::NodeResponse nr;
    auto c = Ctx();
    ASSERT_TRUE(stub->DrainNode(c.get(), n, &nr).ok());
    ASSERT_EQ(nr.replanned_job_ids_size(), 1);
    proto::GetJobRequest g;
    g.set_job_id(id);
    proto::GetJobResponse got;
    auto gc = Ctx();
    ASSERT_TRUE(stub->GetJob(gc.get(), g, &got).ok());
    EXPECT_EQ(got.job().current_version(), 1);  // acknowledged, not yet re-planned
    EXPECT_EQ(got.job().pending_reason(), proto::PLAN_REASON_DRAIN);
    planner.Kill(SIGKILL);
  }
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner.Start({"--state_dir=" + dir}).ok()) << planner.log();
  auto stub = Connect(planner);
  absl::StatusOr<proto::PlanVersion> v2 = NextVersion(stub.get(), id, 1);
  ASSERT_TRUE(v2.ok()) << planner.log();
  EXPECT_EQ(v2->version(), 2);
  EXPECT_EQ(v2->reason_kind(), proto::PLAN_REASON_DRAIN);
  EXPECT_EQ(v2->result().plan().num_devices(), 2);
  proto::GetJobRequest g;
  g.set_job_id(id);
  proto::GetJobResponse got;
  auto c = Ctx();
  ASSERT_TRUE(stub->GetJob(c.get(), g, &got).ok());
  EXPECT_EQ(got.job().pending_reason(), proto::PLAN_REASON_UNSPECIFIED);
}

proto::PlanRequest SlowPlan() {
  proto::PlanRequest slow;
  *slow.mutable_model() = ModelToProto(*ParseSyntheticModel("layers=512,f=1,b=1,w=1"));
  *slow.mutable_cluster() = ClusterToProto(SyntheticCluster(128));
  slow.mutable_options()->set_num_microbatches(256);
  slow.mutable_options()->set_time_budget_s(60);
  return slow;
}

grpc::health::v1::HealthCheckResponse::ServingStatus Health(const PlannerProcess& p) {
  auto health = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(p.address(), grpc::InsecureChannelCredentials()));
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  auto ctx = Ctx(10);
  if (!health->Check(ctx.get(), req, &resp).ok()) return resp.UNKNOWN;
  return resp.status();
}

// Polls `pred` every 20 ms for up to `timeout_s`; true once it holds.
bool WaitFor(const std::function<bool()>& pred, double timeout_s) {
  const auto end = std::chrono::steady_clock::now() +
                   std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

// Slow one-shot Plan calls whose clients give up must neither keep the workers busy nor keep
// job planning waiting; while their queue is full the health service says NOT_SERVING.
TEST(PlannerHardeningTest, CancelledPlansStopTuningAndDoNotStarveJobs) {
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner
                  .Start({"--state_dir=" + TestPath("cancel"), "--workers=1", "--max_queued=1"})
                  .ok())
      << planner.log();
  auto stub = Connect(planner);
  std::vector<std::thread> calls;
  std::vector<grpc::StatusCode> codes(4, grpc::StatusCode::OK);
  // The clients give up (cancel) once the full queue has been seen, however long a loaded
  // host takes to show it; their deadlines (50 s, under the 60 s budgets) only bound the test.
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  for (int i = 0; i < 4; ++i) contexts.push_back(Ctx(50));
  for (int i = 0; i < 4; ++i) {
    calls.emplace_back([&, i] {
      proto::PlanResponse resp;
      proto::PlanRequest r = SlowPlan();
      r.mutable_options()->set_seed(i + 1);  // distinct: identical calls share one task
      codes[i] = stub->Plan(contexts[i].get(), r, &resp).error_code();
    });
  }
  EXPECT_TRUE(WaitFor(
      [&] { return Health(planner) == grpc::health::v1::HealthCheckResponse::NOT_SERVING; }, 40));
  for (auto& ctx : contexts) ctx->TryCancel();
  for (std::thread& t : calls) t.join();
  for (grpc::StatusCode c : codes) {
    // Cancelled, refused while the queue was full, or answered before the cancellation.
    EXPECT_TRUE(c == grpc::StatusCode::CANCELLED || c == grpc::StatusCode::RESOURCE_EXHAUSTED ||
                c == grpc::StatusCode::OK || c == grpc::StatusCode::DEADLINE_EXCEEDED)
        << c;
  }
  // The one running call stops within a few evaluations of its cancellation.
  EXPECT_TRUE(WaitFor([&] { return Health(planner) == grpc::health::v1::HealthCheckResponse::SERVING; }, 20));
  const auto start = std::chrono::steady_clock::now();
  proto::Job job;
  ASSERT_TRUE(CallCreate(stub.get(), AsJob(SmallPlan(), "after"), &job).ok());
  absl::StatusOr<proto::PlanVersion> v1 = NextVersion(stub.get(), job.id(), 0);
  ASSERT_TRUE(v1.ok());
  // Well below the 60 s budgets the cancelled calls asked for.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 30);
}

TEST(PlannerHardeningTest, SigtermCancelsTuningAndExitsWithinTheGracePeriod) {
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner.Start({"--state_dir=" + TestPath("sigterm"), "--workers=1"}).ok())
      << planner.log();
  auto stub = Connect(planner);
  proto::Job slow;
  ASSERT_TRUE(CallCreate(stub.get(), AsJob(SlowPlan(), "slow-job"), &slow).ok());
  std::thread call([&] {
    proto::PlanResponse resp;
    auto ctx = Ctx(120);
    stub->Plan(ctx.get(), SlowPlan(), &resp);
  });
  const auto start = std::chrono::steady_clock::now();
  const int status = planner.Kill(SIGTERM);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  call.join();
  EXPECT_TRUE(WIFEXITED(status)) << status;
  EXPECT_LT(took, 20) << "grace period is 5 s; the 60 s budgets must not be waited for";
}

TEST(PlannerHardeningTest, EmptyDatabaseFileIsRefusedAtStartUp) {
  const std::string dir = TestPath("empty");
  {
    PlannerProcess planner(kPlanner);
    ASSERT_TRUE(planner.Start({"--state_dir=" + dir}).ok()) << planner.log();
    planner.Kill(SIGTERM);
  }
  std::remove((dir + "/planner.db-wal").c_str());
  std::remove((dir + "/planner.db-shm").c_str());
  std::ofstream(dir + "/planner.db", std::ios::trunc).close();
  PlannerProcess planner(kPlanner);
  absl::Status s = planner.Start({"--state_dir=" + dir}, 30);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("the database file is empty (0 bytes)"));
}

// Was: a plan at the largest sizes the limits allow could exceed gRPC's default 4 MB, so
// default clients could not read Plan, GetJob or WatchPlan. Now a plan larger than
// --max_plan_bytes is refused: before tuning when even the smallest plan of that size would be
// too large, after it (exact size) otherwise; a job is refused at creation or FAILED.
TEST(PlannerHardeningTest, PlansLargerThanTheResponseLimitAreRefused) {
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(
      planner.Start({"--state_dir=" + TestPath("plan-bytes"), "--max_plan_bytes=20000"}).ok())
      << planner.log();
  auto stub = Connect(planner);
  proto::PlanRequest big = SmallPlan();
  big.mutable_options()->set_num_microbatches(1000);  // at least 12 x 4 x 1000 bytes
  grpc::Status s = CallPlan(stub.get(), big);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("at least 48000 bytes on the wire, over the limit of "
                                           "20000 (max_plan_bytes"));
  proto::Job job;
  s = CallCreate(stub.get(), AsJob(big, "big"), &job);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();

  proto::PlanRequest near = SmallPlan();
  near.mutable_options()->set_num_microbatches(400);  // estimate 19200 passes; the plan not
  s = CallPlan(stub.get(), near);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("bytes on the wire, over the limit of 20000"));
  ASSERT_TRUE(CallCreate(stub.get(), AsJob(near, "near"), &job).ok());
  proto::GetJobResponse got;
  for (int i = 0; i < 600; ++i) {
    auto ctx = Ctx();
    ASSERT_TRUE(stub->GetJob(ctx.get(), [&] {
      proto::GetJobRequest g;
      g.set_job_id(job.id());
      return g;
    }(), &got).ok());
    if (got.job().state() != proto::JOB_STATE_PLANNING) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(got.job().state(), proto::JOB_STATE_FAILED);
  EXPECT_THAT(got.job().last_error(), HasSubstr("max_plan_bytes"));
  // Within the limit everything still plans.
  EXPECT_TRUE(CallPlan(stub.get(), SmallPlan()).ok());
}

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Identical requests are answered from the cache; any other field is a new plan.
TEST(PlannerLoadTest, IdenticalRequestsAreServedFromTheCache) {
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner.Start({"--state_dir=" + TestPath("cache")}).ok()) << planner.log();
  auto stub = Connect(planner);
  proto::PlanResponse first, second, other;
  auto c1 = Ctx(), c2 = Ctx(), c3 = Ctx();
  ASSERT_TRUE(stub->Plan(c1.get(), SmallPlan(), &first).ok());
  EXPECT_FALSE(first.from_cache());
  EXPECT_GT(first.tuning_budget_s(), 0.9);  // 1 s less the moment it spent queued
  EXPECT_LE(first.tuning_budget_s(), 1);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(stub->Plan(c2.get(), SmallPlan(), &second).ok());
  EXPECT_LT(SecondsSince(start), 0.9) << "answered without tuning";
  EXPECT_TRUE(second.from_cache());
  EXPECT_EQ(second.result().SerializeAsString(), first.result().SerializeAsString());
  proto::PlanRequest seeded = SmallPlan();
  seeded.mutable_options()->set_seed(7);
  ASSERT_TRUE(stub->Plan(c3.get(), seeded, &other).ok());
  EXPECT_FALSE(other.from_cache());
}

// The client's gRPC deadline bounds the tuning (the best plan by then is the
// answer), not only the time budget.
TEST(PlannerLoadTest, ClientDeadlineNearerThanTheBudgetIsHonoured) {
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner.Start({"--state_dir=" + TestPath("deadline"), "--workers=1"}).ok())
      << planner.log();
  auto stub = Connect(planner);
  proto::PlanResponse resp;
  auto ctx = Ctx(15);  // the budget asks for 60 s
  proto::PlanRequest slow = SlowPlan();
  slow.mutable_options()->set_num_microbatches(128);  // a plan well under max_plan_bytes
  const auto start = std::chrono::steady_clock::now();
  const grpc::Status s = stub->Plan(ctx.get(), slow, &resp);
  ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message() << " after "
                      << SecondsSince(start) << " s";
  EXPECT_LE(resp.tuning_budget_s(), 15 * 0.95);
  EXPECT_GT(resp.tuning_budget_s(), 10);
  EXPECT_LT(resp.result().tuning_wall_s(), 15);
}

// Queue wait counts against the budget; a call that cannot get even its minimum
// budget before its deadline is refused at once (RESOURCE_EXHAUSTED), one whose deadline leaves
// room gets what is left of it (a degraded budget) instead of waiting past it.
TEST(PlannerLoadTest, QueueWaitCountsAndAdmissionRefusesOnlyWhatCannotBeMet) {
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner
                  .Start({"--state_dir=" + TestPath("admission"), "--workers=1",
                          "--max_queued=1"})
                  .ok())
      << planner.log();
  auto stub = Connect(planner);
  auto with_budget = [](double budget, uint64_t seed) {
    proto::PlanRequest r = SlowPlan();
    r.mutable_options()->set_num_microbatches(128);  // a plan well under max_plan_bytes
    r.mutable_options()->set_time_budget_s(budget);
    r.mutable_options()->set_seed(seed);
    return r;
  };
  {  // Teaches the service how long a task takes.
    proto::PlanResponse resp;
    auto ctx = Ctx();
    ASSERT_TRUE(stub->Plan(ctx.get(), with_budget(3, 1), &resp).ok());
  }
  // A job's planning takes the one worker (CreateJob answers once its task is queued, and the
  // jobs lane goes first), so the next Plan call waits behind it.
  proto::Job job;
  proto::PlanRequest job_plan = with_budget(3, 2);
  ASSERT_TRUE(CallCreate(stub.get(), AsJob(job_plan, "ahead"), &job).ok());
  proto::PlanResponse queued_resp;
  grpc::Status queued_status;
  double queued_latency = 0;
  std::thread queued([&] {
    auto ctx = Ctx();
    const auto start = std::chrono::steady_clock::now();
    queued_status = stub->Plan(ctx.get(), with_budget(8, 3), &queued_resp);
    queued_latency = SecondsSince(start);
  });
  // The one-shot queue of 1 is full: the call above waits behind the job.
  ASSERT_TRUE(WaitFor([&] { return Health(planner) == grpc::health::v1::HealthCheckResponse::NOT_SERVING; }, 10));
  {
    proto::PlanResponse resp;
    auto ctx = Ctx();
    const auto start = std::chrono::steady_clock::now();
    const grpc::Status s = stub->Plan(ctx.get(), with_budget(1, 4), &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("estimated wait"));
    EXPECT_LT(SecondsSince(start), 1) << "refused at once, not after queueing";
  }
  queued.join();
  ASSERT_TRUE(queued_status.ok()) << queued_status.error_message();
  // It waited behind the job and tuned for what was left of its 8 s.
  EXPECT_LT(queued_resp.tuning_budget_s(), 8);
  EXPECT_GT(queued_resp.tuning_budget_s(), 0);
  EXPECT_LT(queued_latency, 8 * 1.1 + 2);
}

// A call admitted on a wrong wait estimate (nothing measured yet) and still queued at
// its deadline is answered DEADLINE_EXCEEDED at that deadline, not when a worker frees up.
TEST(PlannerLoadTest, QueuedCallIsAnsweredAtItsDeadline) {
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner.Start({"--state_dir=" + TestPath("queued"), "--workers=1"}).ok())
      << planner.log();
  auto stub = Connect(planner);
  // A job's first plan takes the one worker for its 8 s budget (CreateJob answers once the
  // task is queued; the jobs lane goes before any one-shot call).
  proto::PlanRequest slow = SlowPlan();
  slow.mutable_options()->set_num_microbatches(128);
  slow.mutable_options()->set_time_budget_s(8);
  proto::Job job;
  ASSERT_TRUE(CallCreate(stub.get(), AsJob(slow, "ahead"), &job).ok());
  proto::PlanRequest quick = SmallPlan();
  quick.mutable_options()->set_time_budget_s(0.5);
  const auto start = std::chrono::steady_clock::now();
  proto::PlanResponse resp;
  auto ctx = Ctx();  // no nearer gRPC deadline: only the 0.5 s budget bounds the call
  const grpc::Status s = stub->Plan(ctx.get(), quick, &resp);
  const double latency = SecondsSince(start);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("waited in the queue"));
  EXPECT_LT(latency, 0.5 + 1) << "answered at its deadline, not after the job's planning";
  proto::GetJobRequest g;
  g.set_job_id(job.id());
  proto::GetJobResponse got;
  auto gctx = Ctx();
  ASSERT_TRUE(stub->GetJob(gctx.get(), g, &got).ok());
  EXPECT_EQ(got.job().state(), proto::JOB_STATE_PLANNING)
      << "the job must still hold the worker for the test to mean anything";
}

// Sends `bytes` as the request of `method` with the generic stub; server streams are read to
// their end. Returns the call's status.
grpc::Status SendRaw(const PlannerProcess& p, const std::string& method, const std::string& bytes,
                     bool server_stream) {
  auto channel = grpc::CreateChannel(p.address(), grpc::InsecureChannelCredentials());
  grpc::GenericStub generic(channel);
  auto ctx = Ctx(30);
  const std::string path = absl::StrCat("/octopipe.proto.Planner/", method);
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  grpc::CompletionQueue cq;
  grpc::Status status;
  void* tag = nullptr;
  bool ok = false;
  if (!server_stream) {
    auto call = generic.PrepareUnaryCall(ctx.get(), path, request, &cq);
    call->StartCall();
    call->Finish(&response, &status, reinterpret_cast<void*>(1));
    EXPECT_TRUE(cq.Next(&tag, &ok));
  } else {
    auto call = generic.PrepareCall(ctx.get(), path, &cq);
    call->StartCall(reinterpret_cast<void*>(1));
    EXPECT_TRUE(cq.Next(&tag, &ok));
    call->WriteLast(request, grpc::WriteOptions(), reinterpret_cast<void*>(2));
    EXPECT_TRUE(cq.Next(&tag, &ok));
    call->Read(&response, reinterpret_cast<void*>(3));
    EXPECT_TRUE(cq.Next(&tag, &ok));
    EXPECT_FALSE(ok) << "no message is streamed for an undecodable request";
    call->Finish(&status, reinterpret_cast<void*>(4));
    EXPECT_TRUE(cq.Next(&tag, &ok));
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return status;
}

// Was: UNIMPLEMENTED with an empty message, answered inside gRPC 1.51 before any handler ran.
TEST(PlannerHardeningTest, UndecodableRequestBytesAreInvalidArgumentNamingTheMethod) {
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner.Start({"--state_dir=" + TestPath("undecodable")}).ok()) << planner.log();
  // Field 1 as a length-delimited value that claims 100 bytes but has 1: never parses.
  const std::string bytes("\x0a\x64\x01", 3);
  for (const char* method : {"Plan", "CreateJob", "GetJob", "RegisterAgent", "DrainNode"}) {
    const grpc::Status s = SendRaw(planner, method, bytes, false);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method;
    EXPECT_THAT(s.error_message(), HasSubstr(absl::StrCat(method, ": the request bytes are not a valid octopipe.proto.")));
  }
  const grpc::Status watch = SendRaw(planner, "WatchPlan", bytes, true);
  EXPECT_EQ(watch.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(watch.error_message(),
              HasSubstr("WatchPlan: the request bytes are not a valid octopipe.proto.WatchPlanRequest"));
  // Valid bytes still reach the handlers (an empty GetJobRequest: the job_id is not found).
  const grpc::Status empty = SendRaw(planner, "GetJob", "", false);
  EXPECT_EQ(empty.error_code(), grpc::StatusCode::NOT_FOUND) << empty.error_message();
  auto stub = Connect(planner);
  proto::PlanResponse resp;
  auto ctx = Ctx();
  EXPECT_TRUE(stub->Plan(ctx.get(), SmallPlan(), &resp).ok());
}

}  // namespace
}  // namespace octopipe
