// PlannerProcess: runs the real octopipe-planner binary as a child process for end-to-end
// tests and waits for readiness on its --port_file (the ports it bound, written atomically once
// it serves; inotify, no sleeps). Its stderr is kept for log(). Kill() sends a signal; the
// destructor kills and reaps it.
#ifndef OCTOPIPE_TESTS_PLANNER_PROCESS_H_
#define OCTOPIPE_TESTS_PLANNER_PROCESS_H_

#include <sys/types.h>

#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"

namespace octopipe::testing {

class PlannerProcess {
 public:
  // `binary` is the planner's path (runfiles-relative works under bazel test).
  explicit PlannerProcess(std::string binary) : binary_(std::move(binary)) {}
  ~PlannerProcess();

  // Starts with `args` (plus --port=0 --metrics_port=0 and a --port_file in TEST_TMPDIR unless
  // given) and waits up to `timeout_s` for the port file. On failure the status carries the
  // process's stderr.
  absl::Status Start(const std::vector<std::string>& args, double timeout_s = 60);
  // Sends `sig` and waits for the exit; returns the wait status.
  int Kill(int sig);
  // Sends `sig` without waiting (SIGSTOP, SIGCONT).
  void Signal(int sig);
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }  // -1 when not running

  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string log() const;

 private:
  std::string binary_;
  pid_t pid_ = -1;
  int stderr_fd_ = -1;
  int port_ = 0;
  int metrics_port_ = -1;
  mutable std::mutex log_mu_;
  std::string log_;  // guarded by log_mu_ once drain_ runs
  std::thread drain_;
};

// A loopback port that was free a moment ago (the kernel's pick for port 0), for a process
// that must keep its port across restarts.
int FreePort();
// Whether the planner at `address` leads: its health service octopipe.leader is SERVING
// (500 ms deadline; false when it does not answer).
bool LeadsPlanners(const std::string& address);

// GET http://127.0.0.1:PORT/metrics (a planner's or an agent's), the body ("" on failure).
std::string ScrapeMetrics(int port);
// The value of `series` (exactly as the page writes it, e.g. `name{job_id="j"}`) on a metrics
// page, nullopt when the page has no such series.
std::optional<double> MetricValue(const std::string& page, const std::string& series);

}  // namespace octopipe::testing

#endif  // OCTOPIPE_TESTS_PLANNER_PROCESS_H_
