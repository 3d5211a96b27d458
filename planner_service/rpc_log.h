// RpcLogInterceptorFactory: a gRPC server interceptor that logs one line per finished RPC on
// the "rpc" logger (logging/logging.h) and reports its latency to an optional sink: method, job id (the request's `job_id` field, when it
// has one, cut to 64 bytes), status code and latency from the call's arrival to its status.
// Health checks log at debug, server faults (INTERNAL, UNKNOWN, DATA_LOSS) at warn, everything
// else at info — except the calls agents and watchers repeat every fraction of a second
// (Heartbeat, ReportStageTimes, ListJobs, GetJob, ListAgents): answered OK they log at debug,
// and one info line ("rpc summary") at most once a minute counts them by method.
//
// Install with ServerBuilder::experimental().SetInterceptorCreators. One interceptor object
// exists per call and is used by one thread at a time (gRPC's contract); the factory is
// stateless and thread-safe.
#ifndef OCTOPIPE_PLANNER_SERVICE_RPC_LOG_H_
#define OCTOPIPE_PLANNER_SERVICE_RPC_LOG_H_

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <utility>

#include <grpcpp/support/server_interceptor.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace octopipe::planner {

// Counts of the repeated calls logged at debug, flushed as one info line per interval.
class RpcSummary {
 public:
  explicit RpcSummary(std::chrono::steady_clock::duration interval = std::chrono::minutes(1))
      : interval_(interval) {}
  // Counts a call of `method`; logs the summary when the interval has passed since the last.
  void Count(const std::string& method, std::chrono::steady_clock::time_point now);

 private:
  const std::chrono::steady_clock::duration interval_;
  absl::Mutex mu_;
  std::map<std::string, int64_t> counts_ ABSL_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point since_ ABSL_GUARDED_BY(mu_){};
};

class RpcLogInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  // `on_latency` (may be empty) is told each finished call's short method name ("Heartbeat")
  // and its latency in seconds, from the thread finishing it.
  using LatencySink = std::function<void(const std::string& method, double seconds)>;
  explicit RpcLogInterceptorFactory(LatencySink on_latency = {})
      : on_latency_(std::move(on_latency)) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

 private:
  RpcSummary summary_;
  const LatencySink on_latency_;
};

}  // namespace octopipe::planner

#endif  // OCTOPIPE_PLANNER_SERVICE_RPC_LOG_H_
