// The real octopipe-planner binary at start-up: a token file is trimmed (CRLF too) and an empty
// one refused; TLS files that are not PEM, a key that does not match the
// certificate, or a directory are reported naming the file and the fault, not as a port that
// cannot be listened on. Also: bad flag values exit 2 naming the flag, --help explains every
// flag, and --log_json writes one JSON line per RPC. A planner.db that cannot be written is
// refused at start-up.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/test_dirs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/planner.grpc.pb.h"
#include "tests/planner_process.h"

namespace octopipe {
namespace {

using ::octopipe::testing::TestPath;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::PlannerProcess;

constexpr char kPlanner[] = "planner_service/octopipe-planner";

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

// Runs the planner with `args` and waits for it to exit; a planner that starts serving is
// stopped by `timeout` after 60 s (exit 124), which fails the callers' expectations.
RunResult RunPlanner(const std::vector<std::string>& args) {
  std::string command = absl::StrCat("timeout 60 ", kPlanner, " --port=0 --metrics_port=-1");
  for (const std::string& a : args) absl::StrAppend(&command, " '", a, "'");
  absl::StrAppend(&command, " 2>&1");
  RunResult r;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) r.output.append(buf, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The planner's stderr once it contains `text`, or as it is after 30 s. The planner writes a
// line before it answers the call, but the test reads stderr on another thread.
std::string LogWith(const PlannerProcess& planner, const std::string& text) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::string log = planner.log();
  while (log.find(text) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    log = planner.log();
  }
  return log;
}

void WriteFile(const std::string& path, const std::string& content) {
  std::ofstream(path, std::ios::binary) << content;
}

// Two self-signed certificate/key pairs, a and b, made once with the openssl CLI.
class TlsFilesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (const char* name : {"a", "b"}) {
      const std::string cmd = absl::StrCat(
          "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost -keyout '",
          TestPath(name), ".key' -out '", TestPath(name), ".pem' >/dev/null 2>&1");
      ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    }
  }
};

// A --port_file that cannot be written stops the planner before it serves (exit 2, naming the
// path): a script waiting for the file would otherwise wait forever.
TEST_F(TlsFilesTest, UnwritablePortFileIsRefusedBeforeServing) {
  const RunResult r = RunPlanner({"--state_dir=" + TestPath("s0"),
                                  "--port_file=" + TestPath("no-such-dir") + "/planner.port"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--port_file: cannot write '" + TestPath("no-such-dir") +
                                  "/planner.port.tmp'"));
  EXPECT_THAT(r.output, Not(HasSubstr("serving on")));
}

TEST_F(TlsFilesTest, CertificateThatIsNotPemNamesTheFile) {
  WriteFile(TestPath("garbage.pem"), "this is not a certificate\n");
  const RunResult r =
      RunPlanner({"--state_dir=" + TestPath("s1"), "--tls_cert=" + TestPath("garbage.pem"),
                  "--tls_key=" + TestPath("a.key")});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output,
              HasSubstr("--tls_cert: '" + TestPath("garbage.pem") + "' holds no PEM certificate"));
  EXPECT_THAT(r.output, Not(HasSubstr("cannot listen")));
}

TEST_F(TlsFilesTest, KeyThatDoesNotMatchTheCertificateNamesBoth) {
  const RunResult r =
      RunPlanner({"--state_dir=" + TestPath("s2"), "--tls_cert=" + TestPath("a.pem"),
                  "--tls_key=" + TestPath("b.key")});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output,
              HasSubstr("--tls_key: '" + TestPath("b.key") +
                        "' does not match the certificate in '" + TestPath("a.pem") + "'"));
}

TEST_F(TlsFilesTest, KeyFileHoldingACertificateIsNoPrivateKey) {
  const RunResult r =
      RunPlanner({"--state_dir=" + TestPath("s3"), "--tls_cert=" + TestPath("a.pem"),
                  "--tls_key=" + TestPath("a.pem")});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--tls_key: '" + TestPath("a.pem") + "' holds no"));
}

TEST_F(TlsFilesTest, DirectoryIsReportedAsADirectory) {
  ASSERT_EQ(mkdir(TestPath("certdir").c_str(), 0755), 0);
  const RunResult r =
      RunPlanner({"--state_dir=" + TestPath("s4"), "--tls_cert=" + TestPath("certdir"),
                  "--tls_key=" + TestPath("a.key")});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--tls_cert: '" + TestPath("certdir") + "' is a directory"));
}

TEST_F(TlsFilesTest, ClientCaThatIsNotPemNamesTheFile) {
  WriteFile(TestPath("ca-garbage.pem"), "-----BEGIN NOTHING-----\n");
  const RunResult r = RunPlanner(
      {"--state_dir=" + TestPath("s5"), "--tls_cert=" + TestPath("a.pem"),
       "--tls_key=" + TestPath("a.key"), "--tls_client_ca=" + TestPath("ca-garbage.pem")});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--tls_client_ca: '" + TestPath("ca-garbage.pem") +
                                  "' holds no PEM certificate"));
}

TEST_F(TlsFilesTest, MatchingPairServes) {
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner
                  .Start({"--state_dir=" + TestPath("s6"), "--tls_cert=" + TestPath("a.pem"),
                          "--tls_key=" + TestPath("a.key")})
                  .ok())
      << planner.log();
  EXPECT_THAT(planner.log(), HasSubstr("(TLS)"));
}

TEST(TokenFileTest, EmptyOrBlankTokenFileIsRefused) {
  for (const std::string& content : {std::string(""), std::string(" \r\n\t\n")}) {
    WriteFile(TestPath("blank.token"), content);
    const RunResult r =
        RunPlanner({"--state_dir=" + TestPath("t1"), "--token_file=" + TestPath("blank.token")});
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_THAT(r.output,
                HasSubstr("--token_file: '" + TestPath("blank.token") + "' holds no token"));
  }
}

TEST(TokenFileTest, MissingTokenFileNamesIt) {
  const RunResult r =
      RunPlanner({"--state_dir=" + TestPath("t2"), "--token_file=" + TestPath("no-such.token")});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--token_file: cannot read '" + TestPath("no-such.token") + "'"));
}

// A token file written on Windows ends in CRLF: the token is the word without it, so clients
// presenting "s3cret" get in and others do not. --log_json: each RPC is one JSON line.
TEST(TokenFileTest, CrlfIsTrimmedAndRpcsAreLoggedAsJson) {
  WriteFile(TestPath("crlf.token"), "s3cret\r\n");
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner
                  .Start({"--state_dir=" + TestPath("t3"), "--token_file=" + TestPath("crlf.token"),
                          "--log_json"})
                  .ok())
      << planner.log();
  auto stub = proto::Planner::NewStub(
      grpc::CreateChannel(planner.address(), grpc::InsecureChannelCredentials()));
  auto delete_job = [&](const std::string& token) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    ctx.AddMetadata("authorization", "Bearer " + token);
    proto::DeleteJobRequest request;
    request.set_job_id("job-absent");
    proto::DeleteJobResponse response;
    return stub->DeleteJob(&ctx, request, &response).error_code();
  };
  EXPECT_EQ(delete_job("s3cret"), grpc::StatusCode::NOT_FOUND);  // authorized; no such job
  EXPECT_EQ(delete_job("wrong"), grpc::StatusCode::UNAUTHENTICATED);
  const std::string unauthenticated =
      "\"method\":\"DeleteJob\",\"job\":\"job-absent\",\"code\":\"UNAUTHENTICATED\"";
  EXPECT_THAT(LogWith(planner, unauthenticated), HasSubstr(unauthenticated));
  EXPECT_THAT(planner.log(), HasSubstr("\"logger\":\"rpc\",\"msg\":\"rpc\",\"method\":"
                                       "\"DeleteJob\",\"job\":\"job-absent\",\"code\":"
                                       "\"NOT_FOUND\""));
}

// Agent events are logged on the "agents" logger: registration, then a drain.
TEST(LogTest, AgentRegistrationAndDrainAreJsonLines) {
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner.Start({"--state_dir=" + TestPath("l1"), "--log_json"}).ok()) << planner.log();
  auto stub = proto::Planner::NewStub(
      grpc::CreateChannel(planner.address(), grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext ctx;
    proto::RegisterAgentRequest request;
    request.set_node_id("node-7");
    request.set_num_devices(4);
    request.set_address("10.0.0.7:1");
    proto::RegisterAgentResponse response;
    ASSERT_TRUE(stub->RegisterAgent(&ctx, request, &response).ok());
  }
  {
    grpc::ClientContext ctx;
    proto::NodeRequest request;
    request.set_node_id("node-7");
    proto::NodeResponse response;
    ASSERT_TRUE(stub->DrainNode(&ctx, request, &response).ok());
  }
  const std::string drained =
      "\"logger\":\"agents\",\"msg\":\"node drained\",\"node\":\"node-7\"";
  EXPECT_THAT(LogWith(planner, drained), HasSubstr(drained));
  EXPECT_THAT(planner.log(), HasSubstr("\"logger\":\"agents\",\"msg\":\"agent registered\","
                                       "\"node\":\"node-7\",\"devices\":4"));
}

TEST(FlagsTest, BadValuesFailNamingTheFlag) {
  RunResult r = RunPlanner({"--state_dir=" + TestPath("f1"), "--log_level=loud"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--log level: 'loud'"));
  r = RunPlanner({"--state_dir=" + TestPath("f2"), "--workers=many"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("workers"));
  r = RunPlanner({"--state_dir=" + TestPath("f4"), "--heartbeat_batch_ms=nan"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output,
              HasSubstr("--heartbeat_batch_ms must be 0 or between 0.5 and 100, got nan"));
  r = RunPlanner({"--state_dir=" + TestPath("f6"), "--heartbeat_batch_ms=0.001"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--heartbeat_batch_ms must be 0 or between 0.5 and 100"));
  r = RunPlanner({"--state_dir=" + TestPath("f5"), "--heartbeat_timeout_s=-1"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--heartbeat_timeout_s must be a positive number"));
  r = RunPlanner({"--state_dir=" + TestPath("f3"), "--no_such_flag=1"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("no_such_flag"));
}

TEST(FlagsTest, HelpExplainsEveryFlag) {
  const RunResult r = RunPlanner({"--help"});
  EXPECT_THAT(r.output, HasSubstr("The OctoPipe planner service"));
  for (const char* flag :
       {"host", "port", "port_file", "state_dir", "metrics_port", "metrics_host",
        "metrics_threads", "metrics_request_timeout_ms", "tls_cert", "tls_key", "tls_client_ca",
        "token", "token_file", "max_request_bytes", "max_layers", "max_devices", "max_plan_bytes",
        "max_time_budget_s", "default_time_budget_s", "workers", "max_queued",
        "heartbeat_timeout_s", "heartbeat_batch_ms", "replan_start_deviation", "replan_stop_deviation",
        "replan_min_gain", "replan_cooldown_s", "log_level", "log_json"}) {
    EXPECT_THAT(r.output, HasSubstr(absl::StrCat("--", flag, " ("))) << flag;
  }
  // Only the planner's own flags, not those of the libraries it links.
  EXPECT_THAT(r.output, Not(HasSubstr("--flagfile")));
}

// Makes a file immutable (`chattr +i`) for its lifetime: the one way to make a file unwritable
// for root (tests run as root, where chmod blocks nothing). ok() is false where the filesystem
// or the sandbox does not allow it (then nothing was changed).
class ImmutableFile {
 public:
  explicit ImmutableFile(std::string path) : path_(std::move(path)) {
    if (std::system(("chattr +i '" + path_ + "' 2>/dev/null").c_str()) != 0) return;
    set_ = true;
    const int fd = open(path_.c_str(), O_WRONLY | O_APPEND);
    blocks_writes_ = fd < 0;
    if (fd >= 0) close(fd);
  }
  ~ImmutableFile() {
    if (set_) std::system(("chattr -i '" + path_ + "'").c_str());
  }
  bool ok() const { return set_ && blocks_writes_; }

 private:
  std::string path_;
  bool set_ = false;
  bool blocks_writes_ = false;
};

// Was: accepted at start-up, every mutating call failing later.
TEST(StateDirTest, UnwritableDatabaseIsRefusedAtStartUp) {
  const std::string dir = TestPath("readonly-db");
  {
    PlannerProcess planner(kPlanner);
    ASSERT_TRUE(planner.Start({"--state_dir=" + dir}).ok()) << planner.log();
    planner.Kill(SIGTERM);
  }
  std::remove((dir + "/planner.db-wal").c_str());
  std::remove((dir + "/planner.db-shm").c_str());
  ImmutableFile immutable(dir + "/planner.db");
  if (!immutable.ok()) {
    GTEST_SKIP() << "chattr +i is not permitted here (no CAP_LINUX_IMMUTABLE); as root nothing "
                    "else makes a file unwritable";
  }
  const RunResult r = RunPlanner({"--state_dir=" + dir});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << "the planner served an unwritable database:\n" << r.output;
  EXPECT_THAT(r.output, HasSubstr(dir + "/planner.db"));
  EXPECT_THAT(r.output, HasSubstr("read-only"));
}

}  // namespace
}  // namespace octopipe
