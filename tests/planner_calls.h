// Small calls to a planner shared by the end-to-end tests: a stub, a call context with a
// deadline and an optional bearer token, an agent registration and a unary heartbeat.
#ifndef OCTOPIPE_TESTS_PLANNER_CALLS_H_
#define OCTOPIPE_TESTS_PLANNER_CALLS_H_

#include <chrono>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "proto/planner.grpc.pb.h"

namespace octopipe::testing {

inline std::unique_ptr<proto::Planner::Stub> Connect(
    const std::string& address,
    std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials()) {
  return proto::Planner::NewStub(grpc::CreateChannel(address, creds));
}

inline std::unique_ptr<grpc::ClientContext> Ctx(const std::string& token = "",
                                                double timeout_s = 60) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
  return ctx;
}

inline grpc::StatusCode Register(proto::Planner::Stub* stub, const std::string& token,
                                 const std::string& node,
                                 const std::string& address = "127.0.0.1:1") {
  proto::RegisterAgentRequest r;
  r.set_node_id(node);
  r.set_num_devices(2);
  r.set_address(address);
  proto::RegisterAgentResponse resp;
  auto ctx = Ctx(token, 20);
  return stub->RegisterAgent(ctx.get(), r, &resp).error_code();
}

inline grpc::Status Beat(proto::Planner::Stub* stub, const std::string& token,
                         const std::string& node) {
  proto::HeartbeatRequest h;
  h.set_node_id(node);
  proto::HeartbeatResponse resp;
  auto ctx = Ctx(token, 20);
  return stub->Heartbeat(ctx.get(), h, &resp);
}

}  // namespace octopipe::testing

#endif  // OCTOPIPE_TESTS_PLANNER_CALLS_H_
