#include "planner_service/rpc_log.h"

#include <chrono>
#include <memory>
#include <string>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <grpcpp/support/interceptor.h>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "logging/logging.h"

namespace octopipe::planner {
namespace {

using grpc::experimental::InterceptionHookPoints;

// Only our own service's requests are known to be protobuf messages (the health service, for
// one, receives raw bytes), so only they are read for a job id.
constexpr absl::string_view kPlannerPrefix = "/octopipe.proto.Planner/";

// The request's string field `job_id`; "" when it has none.
std::string JobIdOf(const google::protobuf::Message& request) {
  const google::protobuf::FieldDescriptor* field =
      request.GetDescriptor()->FindFieldByName("job_id");
  if (field == nullptr || field->is_repeated() ||
      field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_STRING) {
    return "";
  }
  return request.GetReflection()->GetString(request, field);
}

// Calls agents and watchers repeat every fraction of a second: summarised when OK.
bool Repeated(absl::string_view method) {
  if (!absl::ConsumePrefix(&method, kPlannerPrefix)) return false;
  for (absl::string_view m : {"Heartbeat", "ReportStageTimes", "ListJobs", "GetJob", "ListAgents"}) {
    if (method == m) return true;
  }
  return false;
}

spdlog::level::level_enum LevelOf(absl::string_view method, grpc::StatusCode code) {
  if (absl::StartsWith(method, "/grpc.health.")) return spdlog::level::debug;
  if (code == grpc::StatusCode::INTERNAL || code == grpc::StatusCode::UNKNOWN ||
      code == grpc::StatusCode::DATA_LOSS) {
    return spdlog::level::warn;
  }
  if (code == grpc::StatusCode::OK && Repeated(method)) return spdlog::level::debug;
  return spdlog::level::info;
}



class RpcLogInterceptor final : public grpc::experimental::Interceptor {
 public:
  RpcLogInterceptor(absl::string_view method, RpcSummary* summary,
                    const RpcLogInterceptorFactory::LatencySink* on_latency)
      : method_(method),
        start_(std::chrono::steady_clock::now()),
        summary_(summary),
        on_latency_(on_latency) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE) &&
        absl::StartsWith(method_, kPlannerPrefix) && methods->GetRecvMessage() != nullptr) {
      job_id_ = JobIdOf(*static_cast<const google::protobuf::Message*>(
          methods->GetRecvMessage()));
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      Log(methods->GetSendStatus());
    }
    methods->Proceed();
  }

 private:
  void Log(const grpc::Status& status) const {
    const double latency_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
            .count();
    if (*on_latency_) (*on_latency_)(ShortName(), latency_ms / 1000);
    const spdlog::level::level_enum level = LevelOf(method_, status.error_code());
    if (level == spdlog::level::debug && Repeated(method_)) {
      summary_->Count(ShortName(), std::chrono::steady_clock::now());
    }
    std::shared_ptr<spdlog::logger> logger = logging::Logger("rpc");
    if (!logger->should_log(level)) return;  // the line below is built only when written
    std::vector<logging::Field> fields = {{"method", ShortName()}};
    if (!job_id_.empty()) fields.emplace_back("job", logging::Abbreviated(job_id_));
    fields.emplace_back(
        "code", absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())));
    fields.emplace_back("latency_ms", static_cast<int64_t>(latency_ms * 1000) / 1000.0);
    if (!status.ok()) fields.emplace_back("error", logging::Abbreviated(status.error_message()));
    logging::Event(*logger, level, "rpc", fields);
  }

  // "CreateJob" for "/octopipe.proto.Planner/CreateJob"; other services keep the full name.
  const std::string& ShortName() const { return short_name_; }

  const std::string method_;
  const std::string short_name_ = absl::StartsWith(method_, kPlannerPrefix)
                                      ? method_.substr(kPlannerPrefix.size())
                                      : method_;
  const std::chrono::steady_clock::time_point start_;
  RpcSummary* const summary_;
  const RpcLogInterceptorFactory::LatencySink* const on_latency_;  // the factory's
  std::string job_id_;
};

}  // namespace

void RpcSummary::Count(const std::string& method, std::chrono::steady_clock::time_point now) {
  std::map<std::string, int64_t> flush;
  double seconds = 0;
  {
    absl::MutexLock lock(&mu_);
    if (since_ == std::chrono::steady_clock::time_point{}) since_ = now;
    ++counts_[method];
    if (now - since_ < interval_) return;
    seconds = std::chrono::duration<double>(now - since_).count();
    flush.swap(counts_);
    since_ = now;
  }
  std::vector<logging::Field> fields = {{"seconds", seconds}};
  for (const auto& [m, n] : flush) fields.emplace_back(m, n);
  logging::Event(*logging::Logger("rpc"), spdlog::level::info, "rpc summary", fields);
}

grpc::experimental::Interceptor* RpcLogInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  return new RpcLogInterceptor(info->method() != nullptr ? info->method() : "", &summary_,
                               &on_latency_);
}

}  // namespace octopipe::planner
