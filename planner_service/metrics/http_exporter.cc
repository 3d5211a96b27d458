#include "planner_service/metrics/http_exporter.h"

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "httplib.h"

namespace octopipe::metrics {

HttpExporter::HttpExporter(const Registry& registry, HttpExporterOptions options)
    : registry_(registry), options_(std::move(options)) {}

HttpExporter::~HttpExporter() { Stop(); }

absl::Status HttpExporter::Start() {
  absl::MutexLock lock(&mu_);
  if (state_ != State::kNew) {
    return absl::FailedPreconditionError(
        "metrics exporter: Start called twice (an exporter serves once; create a new one)");
  }
  if (options_.port < 0 || options_.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics exporter: port ", options_.port, " is outside [0, 65535]"));
  }
  if (options_.threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics exporter: threads is ", options_.threads, "; need at least 1"));
  }

  auto server = std::make_unique<httplib::Server>();
  const size_t threads = static_cast<size_t>(options_.threads);
  server->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // httplib's default sets SO_REUSEPORT, which lets a second process bind the same port and
  // silently share the scrapes. Plain SO_REUSEADDR still allows a quick restart (TIME_WAIT)
  // but makes a port in use an error.
  server->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  const Registry* registry = &registry_;
  server->Get("/metrics", [registry](const httplib::Request&, httplib::Response& res) {
    res.set_content(registry->RenderText(), kTextContentType);
  });
  server->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });

  int port = options_.port;
  bool bound;
  if (port == 0) {
    port = server->bind_to_any_port(options_.host);
    bound = port > 0;
  } else {
    bound = server->bind_to_port(options_.host, port);
  }
  if (!bound) {
    return absl::UnavailableError(absl::StrCat("metrics exporter: cannot bind ", options_.host,
                                               ":", options_.port,
                                               " (address in use or unknown host)"));
  }

  // httplib's stop() does nothing until the accept loop has started, so a Stop() right after
  // Start() would leave the thread running forever. Wait for the loop (or for the thread to
  // give up) before reporting success. The socket already listens, so connections made
  // meanwhile queue in the backlog rather than fail.
  auto exited = std::make_shared<std::atomic<bool>>(false);
  httplib::Server* raw = server.get();
  std::thread thread([raw, exited] {
    raw->listen_after_bind();
    exited->store(true);
  });
  while (!raw->is_running() && !exited->load()) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (!raw->is_running()) {
    thread.join();
    return absl::UnavailableError(absl::StrCat("metrics exporter: the server on ", options_.host,
                                               ":", port, " stopped as it started"));
  }
  server_ = std::move(server);
  thread_ = std::move(thread);
  port_ = port;
  state_ = State::kServing;
  return absl::OkStatus();
}

void HttpExporter::Stop() {
  absl::MutexLock lock(&mu_);
  if (state_ == State::kServing) {
    server_->stop();  // closes the listening socket; the accept loop then drains and returns
    thread_.join();
  }
  state_ = State::kStopped;
}

int HttpExporter::port() const {
  absl::MutexLock lock(&mu_);
  return port_;
}

}  // namespace octopipe::metrics
