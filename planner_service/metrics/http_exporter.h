// HttpExporter: serves a metrics Registry to Prometheus over HTTP on one background thread pool.
//
//   GET /metrics  -> 200, Content-Type `text/plain; version=0.0.4`, body Registry::RenderText()
//   GET /healthz  -> 200, "ok\n"
//   anything else -> 404
//
// Lifecycle: construct, `Start()` (binds and starts serving; `port()` is then the bound port,
// the one the kernel picked if the options asked for port 0), `Stop()` (stops accepting, closes
// the socket and joins the serving threads; idempotent; the destructor calls it). An exporter
// serves at most once: Start after Start or after Stop is kFailedPrecondition.
//
// Thread safety: Start and Stop may be called from any thread, not concurrently with the
// destructor. The registry is borrowed and must outlive the exporter; it is only read, through
// its thread-safe RenderText. Built on cpp-httplib, which stays out of this header.
#ifndef OCTOPIPE_PLANNER_SERVICE_METRICS_HTTP_EXPORTER_H_
#define OCTOPIPE_PLANNER_SERVICE_METRICS_HTTP_EXPORTER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "planner_service/metrics/metrics.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace octopipe::metrics {

// The Content-Type of /metrics: Prometheus text exposition format 0.0.4.
inline constexpr char kTextContentType[] = "text/plain; version=0.0.4";

struct HttpExporterOptions {
  // Address to bind. The loopback default keeps metrics private to the machine; use "0.0.0.0"
  // for a Prometheus server on another host.
  std::string host = "127.0.0.1";
  // TCP port; 0 lets the kernel pick a free one (read it back with port()). Tests use 0.
  int port = 0;
  // Requests served concurrently. Each keep-alive connection (Prometheus keeps its scrape
  // connection open) holds a thread for up to 5 s of idleness; more threads cost memory only.
  int threads = 4;
};

class HttpExporter {
 public:
  HttpExporter(const Registry& registry, HttpExporterOptions options);
  ~HttpExporter();
  HttpExporter(const HttpExporter&) = delete;
  HttpExporter& operator=(const HttpExporter&) = delete;

  // Binds host:port and starts serving. kInvalidArgument for a port outside [0, 65535] or no
  // threads; kUnavailable if the address cannot be bound (in use, unknown host);
  // kFailedPrecondition if already started or stopped.
  absl::Status Start() ABSL_LOCKS_EXCLUDED(mu_);

  // Stops serving and joins the server thread. Safe to call more than once, or without Start.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // The bound port after a successful Start; 0 before.
  int port() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  enum class State { kNew, kServing, kStopped };

  const Registry& registry_;
  const HttpExporterOptions options_;
  mutable absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kNew;
  int port_ ABSL_GUARDED_BY(mu_) = 0;
  std::unique_ptr<httplib::Server> server_ ABSL_GUARDED_BY(mu_);
  std::thread thread_ ABSL_GUARDED_BY(mu_);
};

}  // namespace octopipe::metrics

#endif  // OCTOPIPE_PLANNER_SERVICE_METRICS_HTTP_EXPORTER_H_
