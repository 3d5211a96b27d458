#include "planner_service/rpc_log.h"

#include <chrono>
#include <memory>
#include <string>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <grpcpp/support/interceptor.h>

#include "absl/status/status.h"
#include "absl/strings/match.h"
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

spdlog::level::level_enum LevelOf(absl::string_view method, grpc::StatusCode code) {
  if (absl::StartsWith(method, "/grpc.health.")) return spdlog::level::debug;
  if (code == grpc::StatusCode::INTERNAL || code == grpc::StatusCode::UNKNOWN ||
      code == grpc::StatusCode::DATA_LOSS) {
    return spdlog::level::warn;
  }
  return spdlog::level::info;
}

class RpcLogInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit RpcLogInterceptor(absl::string_view method)
      : method_(method), start_(std::chrono::steady_clock::now()) {}

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
    std::vector<logging::Field> fields = {{"method", ShortName()}};
    if (!job_id_.empty()) fields.emplace_back("job", job_id_);
    fields.emplace_back(
        "code", absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())));
    fields.emplace_back("latency_ms", static_cast<int64_t>(latency_ms * 1000) / 1000.0);
    if (!status.ok()) fields.emplace_back("error", status.error_message());
    logging::Event(*logging::Logger("rpc"), LevelOf(method_, status.error_code()), "rpc", fields);
  }

  // "CreateJob" for "/octopipe.proto.Planner/CreateJob"; other services keep the full name.
  std::string ShortName() const {
    return absl::StartsWith(method_, kPlannerPrefix)
               ? method_.substr(kPlannerPrefix.size())
               : method_;
  }

  const std::string method_;
  const std::chrono::steady_clock::time_point start_;
  std::string job_id_;
};

}  // namespace

grpc::experimental::Interceptor* RpcLogInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  return new RpcLogInterceptor(info->method() != nullptr ? info->method() : "");
}

}  // namespace octopipe::planner
