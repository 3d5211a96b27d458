#include "tests/planner_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <regex>

#include "absl/strings/str_cat.h"

namespace octopipe::testing {

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
  for (const std::string& a : args) {
    has_port |= a.rfind("--port=", 0) == 0;
    has_metrics |= a.rfind("--metrics_port=", 0) == 0;
    argv.push_back(a);
  }
  if (!has_port) argv.push_back("--port=0");
  if (!has_metrics) argv.push_back("--metrics_port=0");
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError("pipe failed");
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
  stderr_fd_ = fds[0];
  log_.clear();
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(int(timeout_s * 1000));
  const std::regex serving(R"(serving on [^ ]+:(\d+).*metrics on [^ ]+:(-?\d+))");
  const std::regex serving_plain(R"(serving on [^ ]+:(\d+))");
  while (true) {
    std::smatch m;
    const size_t nl = log_.find("serving on");
    if (nl != std::string::npos && log_.find('\n', nl) != std::string::npos) {
      const std::string line = log_.substr(nl, log_.find('\n', nl) - nl);
      if (std::regex_search(line, m, serving)) {
        port_ = std::stoi(m[1]);
        metrics_port_ = std::stoi(m[2]);
      } else if (std::regex_search(line, m, serving_plain)) {
        port_ = std::stoi(m[1]);
      }
      // Keep draining stderr in the background so the child never blocks on a full pipe.
      const int fd = stderr_fd_;
      drain_ = std::thread([this, fd] {
        char b[4096];
        ssize_t n;
        while ((n = read(fd, b, sizeof(b))) > 0) {
          std::lock_guard<std::mutex> lock(log_mu_);
          log_.append(b, n);
        }
      });
      return absl::OkStatus();
    }
    const int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                          deadline - std::chrono::steady_clock::now())
                                          .count());
    if (left <= 0) return absl::DeadlineExceededError(absl::StrCat("planner not ready:\n", log_));
    pollfd p{stderr_fd_, POLLIN, 0};
    if (poll(&p, 1, left) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(stderr_fd_, buf, sizeof(buf));
    if (n <= 0) {
      int status = 0;
      waitpid(pid_, &status, 0);
      pid_ = -1;
      return absl::FailedPreconditionError(absl::StrCat("planner exited (status ", status,
                                                        ") before serving:\n", log_));
    }
    log_.append(buf, n);
  }
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

std::string PlannerProcess::log() const {
  std::lock_guard<std::mutex> lock(log_mu_);
  return log_;
}

}  // namespace octopipe::testing
