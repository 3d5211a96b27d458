// Shared by the worker-agent end-to-end tests — the real octopipe-planner and octopipe-agent
// processes, the reference-model job they train, and the uninterrupted single-process run whose
// weights the job must end with:
//   tests/agent_e2e_test.cc          node loss: recovery from the survivors' memory or from
//                                    checkpoints, rejoin, drain, expert parallelism;
//   tests/agent_planner_e2e_test.cc  the planner restarting and failing over under training, and
//                                    re-planning a job on the passes its agents measured.
#ifndef OCTOPIPE_TESTS_AGENT_E2E_FIXTURE_H_
#define OCTOPIPE_TESTS_AGENT_E2E_FIXTURE_H_

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "core/test_dirs.h"
#include "executor/model_spec.h"
#include "executor/tensor.h"
#include "gtest/gtest.h"
#include "proto/planner.grpc.pb.h"
#include "tests/planner_process.h"

namespace octopipe::agent_e2e {

inline constexpr char kPlanner[] = "planner_service/octopipe-planner";
inline constexpr char kAgent[] = "worker_agent/octopipe-agent";
inline constexpr char kModel[] =
    "ref:pattern=M*-EM-,hidden=16,heads=2,ffn=24,experts=4,top_k=2,moe_ffn=12,state=4,seq=8,"
    "vocab=32,seed=5,microbatches=4";
inline constexpr int kIterations = 1200;
inline constexpr int kCheckpointInterval = 20;

// Seconds on the system clock (event timestamps are Unix milliseconds).
double Now();

// Polls `done` every `poll_ms` until it holds or `timeout_s` passes; whether it held.
bool WaitUntil(const std::function<bool()>& done, double timeout_s, int poll_ms = 50);

std::string ReadAll(const std::string& path);

// The newest complete checkpoint of `spec` under `dir` (a job's checkpoint directory); 0: none.
int64_t LatestCheckpoint(const std::string& dir, const executor::ModelSpec& spec);
// Waits (up to `timeout_s`) until that is at least `at_least`; returns it as it then is.
int64_t WaitForCheckpoint(const std::string& dir, const executor::ModelSpec& spec,
                          int64_t at_least, double timeout_s);

// One octopipe-agent process; stderr goes to WORK_DIR/agent.log. Ready once its port file exists.
class AgentProcess {
 public:
  AgentProcess(std::string node, std::string work_dir, std::string checkpoint_dir,
               std::vector<std::string> extra_args = {})
      : node_(std::move(node)), work_dir_(std::move(work_dir)),
        checkpoint_dir_(std::move(checkpoint_dir)), extra_args_(std::move(extra_args)) {}
  ~AgentProcess() { Kill(SIGKILL); }

  bool Start(const std::string& planner) {
    const std::string port_file = work_dir_ + "/ports";
    std::filesystem::remove(port_file);
    std::vector<std::string> args = {kAgent,
                                     "--node=" + node_,
                                     "--planner=" + planner,
                                     "--devices=1",
                                     "--work_dir=" + work_dir_,
                                     "--checkpoint_dir=" + checkpoint_dir_,
                                     "--transport_timeout_s=5",
                                     "--metrics_port=0",
                                     "--port_file=" + port_file};
    args.insert(args.end(), extra_args_.begin(), extra_args_.end());
    pid_ = fork();
    if (pid_ == 0) {
      FILE* log = std::fopen((work_dir_ + "/agent.log").c_str(), "a");
      if (log != nullptr) dup2(fileno(log), STDERR_FILENO);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(kAgent, argv.data());
      _exit(127);
    }
    return WaitUntil([&] { return std::filesystem::exists(port_file); }, 60);
  }

  void Kill(int sig) {
    if (pid_ <= 0) return;
    kill(pid_, sig);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  std::string log() const { return ReadAll(work_dir_ + "/agent.log"); }
  // The /metrics port from the port file ("STORE_PORT METRICS_PORT").
  int metrics_port() const {
    std::istringstream in(ReadAll(work_dir_ + "/ports"));
    int store = 0, metrics = -1;
    in >> store >> metrics;
    return metrics;
  }

 private:
  const std::string node_, work_dir_, checkpoint_dir_;
  const std::vector<std::string> extra_args_;
  pid_t pid_ = -1;
};

// A job on nodes node-a, node-b, ... with one device each.
proto::CreateJobRequest AgentJob(int iterations = kIterations, int num_nodes = 2);

// A client context with a 30 s deadline.
std::unique_ptr<grpc::ClientContext> Ctx();

// A planner process (with ExtraPlannerArgs) and a client of it; the job under test and helpers
// to wait for its events.
class AgentE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    setvbuf(stdout, nullptr, _IONBF, 0);
    ASSERT_TRUE(planner_.Start(PlannerArgs()).ok()) << planner_.log();
    stub_ = proto::Planner::NewStub(
        grpc::CreateChannel(planner_.address(), grpc::InsecureChannelCredentials()));
  }

  // The planner's flags beyond the common ones.
  virtual std::vector<std::string> ExtraPlannerArgs() const { return {}; }

  std::vector<std::string> PlannerArgs() const {
    const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::vector<std::string> args = {"--state_dir=" + ::octopipe::testing::TestDir("state-" + test),
                                     "--heartbeat_timeout_s=2", "--default_time_budget_s=1"};
    for (const std::string& a : ExtraPlannerArgs()) args.push_back(a);
    return args;
  }

  proto::GetJobResponse Get() {
    proto::GetJobRequest req;
    req.set_job_id(job_id_);
    proto::GetJobResponse resp;
    auto ctx = Ctx();
    EXPECT_TRUE(stub_->GetJob(ctx.get(), req, &resp).ok());
    return resp;
  }

  // The first event matching `match` at or after index `from`; waits up to `timeout_s`.
  const proto::JobEvent* WaitEvent(const std::function<bool(const proto::JobEvent&)>& match,
                                   int from, double timeout_s, int* index = nullptr) {
    int found = -1;
    WaitUntil([&] {
      last_ = Get();
      for (int i = from; i < last_.job().events_size() && found < 0; ++i) {
        if (match(last_.job().events(i))) found = i;
      }
      return found >= 0;
    }, timeout_s);
    if (found < 0) return nullptr;
    if (index) *index = found;
    return &last_.job().events(found);
  }

  std::string Events() {
    std::string out;
    const proto::GetJobResponse r = Get();
    for (const proto::JobEvent& e : r.job().events()) {
      out += absl::StrCat(e.unix_ms(), " ", e.node_id(), " v", e.plan_version(), " ", e.kind(),
                          " it=", e.iteration(), " ", e.message(), "\n");
    }
    return out;
  }

  bool WaitJob(const std::function<bool(const proto::GetJobResponse&)>& match, double timeout_s) {
    return WaitUntil([&] { return match(Get()); }, timeout_s);
  }

  ::octopipe::testing::PlannerProcess planner_{kPlanner};
  std::unique_ptr<proto::Planner::Stub> stub_;
  std::string job_id_;
  proto::GetJobResponse last_;
};

// The uninterrupted run: the same job in one process with a classic plan.
std::vector<std::vector<executor::Tensor>> UninterruptedWeights();

// The final checkpoint in `job_checkpoints` equals the uninterrupted run's weights (within float
// rounding; prints whether bit-identical).
void ExpectUninterruptedWeights(const std::string& job_checkpoints);

}  // namespace octopipe::agent_e2e

#endif  // OCTOPIPE_TESTS_AGENT_E2E_FIXTURE_H_
