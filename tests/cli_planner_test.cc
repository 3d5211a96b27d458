// The `octopipe` CLI against a real planner: both run as real processes. The planner is
// started with tests/planner_process.h (ready once its --port_file is written); each CLI
// command is fork/exec'd with its stdout and stderr captured and its exit code checked.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/convert.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/planner.pb.h"
#include "tests/planner_process.h"
#include "core/test_dirs.h"

namespace octopipe {
namespace {

using ::octopipe::testing::TestPath;

using ::testing::HasSubstr;
using ::testing::Not;
using testing::PlannerProcess;

constexpr char kPlanner[] = "planner_service/octopipe-planner";
constexpr char kCli[] = "cli/octopipe";
// Only a bound so that a broken command fails the test instead of hanging it.
constexpr int kCommandTimeoutMs = 60000;


struct CliResult {
  int exit_code = -1;  // 128 + signal when killed
  std::string out;
  std::string err;
  std::string command;

  std::string Describe() const {
    return "$ " + command + "\nexit " + std::to_string(exit_code) + "\n--- stdout\n" + out +
           "--- stderr\n" + err;
  }
};

// Runs `octopipe ARGS...` to completion, capturing both streams (read concurrently, so a
// chatty command cannot block on a full pipe).
CliResult RunCli(const std::vector<std::string>& args) {
  CliResult r;
  std::vector<std::string> argv = {kCli};
  argv.insert(argv.end(), args.begin(), args.end());
  r.command = absl::StrJoin(argv, " ");
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    r.err = "pipe failed";
    return r;
  }
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    std::vector<char*> cargv;
    for (std::string& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(kCommandTimeoutMs);
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = 2;
  bool timed_out = false;
  while (open_fds > 0) {
    const int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                          deadline - std::chrono::steady_clock::now())
                                          .count());
    if (left <= 0) {
      timed_out = true;
      break;
    }
    if (poll(fds, 2, left) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      const ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        sinks[i]->append(buf, n);
      } else {
        close(fds[i].fd);
        fds[i].fd = -1;  // poll ignores negative fds
        --open_fds;
      }
    }
  }
  if (timed_out) kill(pid, SIGKILL);
  for (const pollfd& p : fds) {
    if (p.fd >= 0) close(p.fd);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (timed_out) r.err += "\n[test: killed after " + std::to_string(kCommandTimeoutMs) + " ms]";
  return r;
}

// The flags every `plan` / `jobs create` below uses: a small real model that tunes fast.
std::vector<std::string> SmallPlanFlags(const std::string& planner) {
  return {"--planner=" + planner,  "--model=zoo:llama3-8b", "--cluster=preset:h100-1node",
          "--devices=4",           "--microbatches=8",      "--time_budget=2"};
}

std::vector<std::string> Concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// "created job-1 (job-1), planning" -> "job-1".
std::string CreatedId(const std::string& out) {
  std::smatch m;
  return std::regex_search(out, m, std::regex(R"(created (\S+) \()")) ? m[1].str() : "";
}

TEST(CliPlannerTest, RemotePlanJsonIsAPlanResultWithAPrediction) {
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner.Start({"--state_dir=" + TestPath("plan-json")}).ok()) << planner.log();
  const CliResult r =
      RunCli(Concat({"plan"}, Concat(SmallPlanFlags(planner.address()), {"--json"})));
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  // The whole of stdout is one PlanResult (strict parse: no unknown fields, nothing else).
  proto::PlanResult result;
  const absl::Status parsed = ProtoFromJson(r.out, &result);
  ASSERT_TRUE(parsed.ok()) << parsed << "\n" << r.Describe();
  EXPECT_TRUE(result.feasible()) << result.infeasible_reason();
  EXPECT_GT(result.plan().predicted().iteration_time_s(), 0) << r.Describe();
  EXPECT_EQ(result.plan().num_devices(), 4);
  EXPECT_GT(result.plan().stages_size(), 0);
  EXPECT_FALSE(result.baselines().empty());
}

TEST(CliPlannerTest, RemotePlanTableSaysThePlannerComputedIt) {
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner.Start({"--state_dir=" + TestPath("plan-table")}).ok()) << planner.log();
  const CliResult r = RunCli(Concat({"plan"}, SmallPlanFlags(planner.address())));
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_THAT(r.out, HasSubstr("computed by the planner")) << r.Describe();
  // The stage table's header, one row per stage, then the prediction and the baselines.
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(stage +layers +kinds +device +recompute)")))
      << r.Describe();
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\n +0 +0-\d+ +embedding)"))) << r.Describe();
  EXPECT_THAT(r.out, HasSubstr("predicted iteration"));
  EXPECT_THAT(r.out, HasSubstr("1f1b"));
  // The same tables as a plan tuned here (one renderer): every table header of the local
  // output is in the remote one, the device table with the planner's busy figures included.
  // Column widths follow the cells (two plans tuned on the wall clock may differ), so the
  // headers are compared with runs of spaces as one.
  const CliResult local = RunCli({"plan", "--model=zoo:llama3-8b", "--cluster=preset:h100-1node",
                                  "--devices=4", "--microbatches=8", "--time_budget=2"});
  ASSERT_EQ(local.exit_code, 0) << local.Describe();
  const std::regex header(R"((?:^|\n)( *(?:stage|device|baseline) +[a-z][^\n]*))");
  std::vector<std::string> local_headers, remote_headers;
  for (auto [text, into] : {std::pair{&local.out, &local_headers},
                            std::pair{&r.out, &remote_headers}}) {
    for (std::sregex_iterator m(text->begin(), text->end(), header), end; m != end; ++m) {
      into->push_back(std::regex_replace(std::string((*m)[1]), std::regex(" +"), " "));
    }
  }
  EXPECT_EQ(local_headers.size(), 3u) << local.Describe();
  EXPECT_EQ(remote_headers, local_headers) << r.Describe();
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\n0 +\d+(\.\d+)? [mu]?s +\d+\.\d%)")))
      << "device 0's busy time and bubble as the planner sent them\n" << r.Describe();
}

TEST(CliPlannerTest, RemoteLayoutTablesShowThePipelinesAndTheChoice) {
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner.Start({"--state_dir=" + TestPath("layout-table")}).ok()) << planner.log();
  const CliResult r = RunCli({"plan", "--planner=" + planner.address(), "--model=zoo:llama3-8b",
                              "--cluster=preset:h100-1node", "--microbatches=8",
                              "--time_budget=2", "--pp=2"});
  ASSERT_EQ(r.exit_code, 0) << r.Describe();
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(layout PP2 x TP\d x EP\d x DP\d \(pp (outer|inner)\) on 8 GPUs)")))
      << r.Describe();
  EXPECT_THAT(r.out, HasSubstr("pipelines (each device is one TP group"));
  EXPECT_THAT(r.out, HasSubstr("layouts tuned in full, on the planner"));
  EXPECT_THAT(r.out, HasSubstr("computed by the planner"));
}

TEST(CliPlannerTest, JobsCreateListGetWatchDelete) {
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner.Start({"--state_dir=" + TestPath("jobs")}).ok()) << planner.log();
  const std::string at = "--planner=" + planner.address();

  const CliResult created = RunCli(
      Concat({"jobs", "create", "--name=cli-job"}, SmallPlanFlags(planner.address())));
  ASSERT_EQ(created.exit_code, 0) << created.Describe();
  const std::string id = CreatedId(created.out);
  ASSERT_FALSE(id.empty()) << created.Describe();
  EXPECT_THAT(created.out, HasSubstr("(cli-job), planning"));

  const CliResult list = RunCli({"jobs", "list", at});
  ASSERT_EQ(list.exit_code, 0) << list.Describe();
  // job, name, phase, state, version, progress ("-": planning only), model.
  EXPECT_TRUE(std::regex_search(list.out,
                                std::regex(id + R"( +cli-job +\w+ +\w+ +\d+ +- +llama3-8b)")))
      << list.Describe();

  // Waits for the first plan: the watch prints it and exits after one version.
  const CliResult watch = RunCli({"jobs", "watch", at, "--job=" + id, "--count=1"});
  ASSERT_EQ(watch.exit_code, 0) << watch.Describe();
  EXPECT_THAT(watch.out, HasSubstr(id + " v1 (initial)")) << watch.Describe();
  EXPECT_THAT(watch.out, HasSubstr("on 4 devices"));

  const CliResult get = RunCli({"jobs", "get", at, "--job=" + id});
  ASSERT_EQ(get.exit_code, 0) << get.Describe();
  // A planning-only job: planned, nobody runs it.
  EXPECT_THAT(get.out, HasSubstr(id + " (cli-job): pending (plan ready)")) << get.Describe();
  EXPECT_THAT(get.out, HasSubstr(id + " v1 (initial)"));

  const CliResult deleted = RunCli({"jobs", "delete", at, "--job=" + id});
  ASSERT_EQ(deleted.exit_code, 0) << deleted.Describe();
  EXPECT_THAT(deleted.out, HasSubstr("deleted " + id));

  const CliResult gone = RunCli({"jobs", "get", at, "--job=" + id});
  EXPECT_NE(gone.exit_code, 0) << gone.Describe();
  EXPECT_THAT(gone.err, HasSubstr("'" + id + "'")) << gone.Describe();
  EXPECT_THAT(gone.err, HasSubstr("no job"));
  const CliResult empty = RunCli({"jobs", "list", at});
  ASSERT_EQ(empty.exit_code, 0) << empty.Describe();
  EXPECT_THAT(empty.out, Not(HasSubstr(id + " "))) << empty.Describe();
}

// A `jobs watch` on a lone planner that is killed and restarted (same port, same state) goes on
// watching after the version it printed, instead of failing: the client waits out the
// planner's absence within its fail-over window.
TEST(CliPlannerTest, JobsWatchGoesOnWhenALonePlannerRestarts) {
  const int port = testing::FreePort();
  const std::vector<std::string> args = {"--state_dir=" + TestPath("watch-restart"),
                                         "--port=" + std::to_string(port)};
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner.Start(args).ok()) << planner.log();
  const std::string at = "--planner=" + planner.address();
  const CliResult created =
      RunCli(Concat({"jobs", "create", "--name=watched"}, SmallPlanFlags(planner.address())));
  ASSERT_EQ(created.exit_code, 0) << created.Describe();
  const std::string id = CreatedId(created.out);
  ASSERT_EQ(RunCli({"jobs", "watch", at, "--job=" + id, "--count=1"}).exit_code, 0);

  // The watch's stdout and stderr as it prints them, read with a deadline; the shell prints
  // the watch's pid first (it then becomes the watch), so the test ends exactly that process.
  FILE* watch = popen(
      absl::StrCat("echo $$; exec ", kCli, " jobs watch ", at, " --job=", id, " 2>&1").c_str(),
      "r");
  ASSERT_NE(watch, nullptr);
  std::string seen;
  auto read_until = [&](const std::string& text) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    pollfd fd = {fileno(watch), POLLIN, 0};
    while (seen.find(text) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      if (poll(&fd, 1, 100) <= 0) continue;
      char buf[4096];
      const ssize_t n = read(fd.fd, buf, sizeof(buf));
      if (n <= 0) break;  // the watch ended
      seen.append(buf, n);
    }
    return seen.find(text) != std::string::npos;
  };
  const bool started = read_until(" v1 (initial)");
  const pid_t pid = static_cast<pid_t>(std::atol(seen.c_str()));
  if (started) {
    planner.Kill(SIGKILL);
    PlannerProcess restarted(kPlanner);
    EXPECT_TRUE(restarted.Start(args).ok()) << restarted.log();
    EXPECT_TRUE(read_until("after v1")) << seen;
    EXPECT_THAT(seen, HasSubstr("the planner at " + planner.address() + " went away"));
    EXPECT_THAT(seen, HasSubstr("watching on " + planner.address() + " after v1"));
  }
  EXPECT_TRUE(started) << seen;
  // Still watching: ended by the test.
  EXPECT_EQ(pid > 0 ? kill(pid, SIGTERM) : -1, 0) << "the watch ended: " << seen;
  pclose(watch);
}

TEST(CliPlannerTest, JobsCreateNeedsTheTokenThePlannerWasStartedWith) {
  const std::string token_file = TestPath("cli-token.txt");
  std::ofstream(token_file) << "s3cret\n";
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner.Start({"--state_dir=" + TestPath("token"), "--token_file=" + token_file})
                  .ok())
      << planner.log();

  const CliResult refused =
      RunCli(Concat({"jobs", "create"}, SmallPlanFlags(planner.address())));
  EXPECT_EQ(refused.exit_code, 1) << refused.Describe();
  EXPECT_THAT(refused.err, HasSubstr("bearer token")) << refused.Describe();
  // KNOWN BUG (cli/planner_client.cc FromGrpc): the CLI drops the gRPC status code, printing
  // "octopipe jobs: error: planner: authorization: missing bearer token (...)", although
  // planner_client.h documents the "--planner: NOT_FOUND: ..." form. This expectation pins
  // the documented behaviour and fails until FromGrpc names the code.
  EXPECT_THAT(refused.err, HasSubstr("UNAUTHENTICATED")) << refused.Describe();

  const CliResult accepted = RunCli(Concat({"jobs", "create", "--token_file=" + token_file},
                                           SmallPlanFlags(planner.address())));
  EXPECT_EQ(accepted.exit_code, 0) << accepted.Describe();
  EXPECT_FALSE(CreatedId(accepted.out).empty()) << accepted.Describe();
}

TEST(CliPlannerTest, JobsWithoutASubcommandPrintsUsageAndExitsTwo) {
  const CliResult r = RunCli({"jobs"});
  EXPECT_EQ(r.exit_code, 2) << r.Describe();
  EXPECT_THAT(r.out, HasSubstr("usage: octopipe jobs SUBCOMMAND")) << r.Describe();
  for (const char* sub : {"create", "list", "get", "delete", "watch"}) {
    EXPECT_THAT(r.out, HasSubstr(std::string("\n  ") + sub)) << sub;
  }

  const CliResult unknown = RunCli({"jobs", "frobnicate"});
  EXPECT_EQ(unknown.exit_code, 2) << unknown.Describe();
  EXPECT_THAT(unknown.err, HasSubstr("unknown subcommand 'frobnicate'"));
}

}  // namespace
}  // namespace octopipe
