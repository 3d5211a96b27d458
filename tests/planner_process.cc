#include "tests/planner_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/inotify.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "proto/health.grpc.pb.h"

namespace octopipe::testing {

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

bool LeadsPlanners(const std::string& address) {
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service("octopipe.leader");
  grpc::health::v1::HealthCheckResponse response;
  return stub->Check(&ctx, request, &response).ok() &&
         response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

std::string ScrapeMetrics(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (fd >= 0) close(fd);
    return "";
  }
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  (void)!write(fd, req.data(), req.size());
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

std::optional<double> MetricValue(const std::string& page, const std::string& series) {
  const std::string prefix = series + " ";
  for (size_t pos = page.find(prefix); pos != std::string::npos;
       pos = page.find(prefix, pos + 1)) {
    if (pos > 0 && page[pos - 1] != '\n') continue;
    return std::strtod(page.c_str() + pos + prefix.size(), nullptr);
  }
  return std::nullopt;
}

PlannerProcess::~PlannerProcess() {
  if (pid_ > 0) Kill(SIGKILL);
  if (drain_.joinable()) drain_.join();
  if (stderr_fd_ >= 0) close(stderr_fd_);
}

absl::Status PlannerProcess::Start(const std::vector<std::string>& args, double timeout_s) {
  std::vector<std::string> argv = {binary_};
  bool has_port = false, has_metrics = false;
  std::string port_file;
  for (const std::string& a : args) {
    has_port |= a.rfind("--port=", 0) == 0;
    has_metrics |= a.rfind("--metrics_port=", 0) == 0;
    if (a.rfind("--port_file=", 0) == 0) port_file = a.substr(std::strlen("--port_file="));
    argv.push_back(a);
  }
  if (!has_port) argv.push_back("--port=0");
  if (!has_metrics) argv.push_back("--metrics_port=0");
  if (port_file.empty()) {
    static std::atomic<int> counter{0};
    const char* dir = std::getenv("TEST_TMPDIR");
    port_file = absl::StrCat(dir != nullptr ? dir : "/tmp", "/planner-", getpid(), "-",
                             counter++, ".port");
    argv.push_back("--port_file=" + port_file);
  }
  std::remove(port_file.c_str());
  // The planner renames the finished file into place: watch its directory for that.
  const std::string dir = port_file.substr(0, port_file.rfind('/'));
  const int watch_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (watch_fd < 0 || inotify_add_watch(watch_fd, dir.c_str(), IN_MOVED_TO | IN_CLOSE_WRITE) < 0) {
    if (watch_fd >= 0) close(watch_fd);
    return absl::InternalError(absl::StrCat("inotify on ", dir, " failed"));
  }
  int fds[2];
  if (pipe(fds) != 0) {
    close(watch_fd);
    return absl::InternalError("pipe failed");
  }
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> cargv;
    for (std::string& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  close(fds[1]);
  pid_ = pid;
  if (stderr_fd_ >= 0) close(stderr_fd_);  // of an earlier run, already drained
  stderr_fd_ = fds[0];
  {
    std::lock_guard<std::mutex> lock(log_mu_);
    log_.clear();
  }
  // Drains stderr for the process's whole life, so it never blocks on a full pipe.
  drain_ = std::thread([this, fd = stderr_fd_] {
    char b[4096];
    ssize_t n;
    while ((n = read(fd, b, sizeof(b))) > 0) {
      std::lock_guard<std::mutex> lock(log_mu_);
      log_.append(b, n);
    }
  });
  // Ready when --port_file holds "PORT\nMETRICS_PORT\n"; failed when the process exits first.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(int(timeout_s * 1000));
  absl::Status result = absl::OkStatus();
  while (true) {
    std::ifstream in(port_file);
    int port = 0, metrics_port = -1;
    if (in >> port >> metrics_port) {
      port_ = port;
      metrics_port_ = metrics_port;
      break;
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      if (drain_.joinable()) drain_.join();
      result = absl::FailedPreconditionError(
          absl::StrCat("planner exited (status ", status, ") before serving:\n", log()));
      break;
    }
    const int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                          deadline - std::chrono::steady_clock::now())
                                          .count());
    if (left <= 0) {
      result = absl::DeadlineExceededError(absl::StrCat("planner not ready:\n", log()));
      break;
    }
    // Wakes on a file event in the directory, or every 100 ms to notice an exit.
    pollfd p{watch_fd, POLLIN, 0};
    if (poll(&p, 1, std::min(left, 100)) > 0) {
      char events[4096];
      while (read(watch_fd, events, sizeof(events)) > 0) {
      }
    }
  }
  close(watch_fd);
  return result;
}

int PlannerProcess::Kill(int sig) {
  if (pid_ <= 0) return -1;
  kill(pid_, sig);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  if (drain_.joinable()) drain_.join();  // the pipe closes when the process is gone
  return status;
}

void PlannerProcess::Signal(int sig) {
  if (pid_ > 0) kill(pid_, sig);
}

std::string PlannerProcess::log() const {
  std::lock_guard<std::mutex> lock(log_mu_);
  return log_;
}

}  // namespace octopipe::testing
