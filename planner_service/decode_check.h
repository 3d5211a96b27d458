// Undecodable request bytes answered by the service, not by gRPC's bare UNIMPLEMENTED.
//
// gRPC 1.51's callback handlers (grpcpp/impl/codegen/server_callback_handlers.h) answer a
// request whose bytes do not parse with UNIMPLEMENTED and an empty message, before any handler
// runs: RunHandler only calls the service when deserialisation succeeded. These method handlers
// wrap the generated ones. A failed parse becomes an empty request that is marked undecodable,
// and the call goes to `on_undecodable` (which answers INVALID_ARGUMENT naming the method)
// instead of the service method. Everything else — allocation, reactors, interceptors — is the
// wrapped gRPC handler's. Installed with grpc::Service::MarkMethodCallback (see service.cc).
#ifndef OCTOPIPE_PLANNER_SERVICE_DECODE_CHECK_H_
#define OCTOPIPE_PLANNER_SERVICE_DECODE_CHECK_H_

#include <functional>
#include <utility>

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/server_callback_handlers.h>

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"

namespace octopipe::planner {

// Addresses of requests that did not parse, between Deserialize and the handler (the two run
// back to back for one call). Thread-safe.
class UndecodableMarks {
 public:
  void Mark(const void* request) {
    absl::MutexLock lock(&mu_);
    marked_.insert(request);
  }
  // True (and forgets it) when `request` was marked.
  bool Take(const void* request) {
    absl::MutexLock lock(&mu_);
    return marked_.erase(request) > 0;
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_set<const void*> marked_ ABSL_GUARDED_BY(mu_);
};

template <class Req, class Resp>
class DecodeCheckingUnaryHandler : public grpc::internal::MethodHandler {
 public:
  using Handler =
      std::function<grpc::ServerUnaryReactor*(grpc::CallbackServerContext*, const Req*, Resp*)>;
  using OnUndecodable = std::function<grpc::ServerUnaryReactor*(grpc::CallbackServerContext*)>;

  DecodeCheckingUnaryHandler(Handler handler, OnUndecodable on_undecodable)
      : inner_([this, handler = std::move(handler), on_undecodable = std::move(on_undecodable)](
                   grpc::CallbackServerContext* ctx, const Req* request, Resp* response) {
          if (marks_.Take(request)) return on_undecodable(ctx);
          return handler(ctx, request, response);
        }) {}

  void RunHandler(const HandlerParameter& param) override { inner_.RunHandler(param); }

  void* Deserialize(grpc_call* call, grpc_byte_buffer* req, grpc::Status* status,
                    void** handler_data) override {
    void* request = inner_.Deserialize(call, req, status, handler_data);
    if (status->ok()) return request;
    // The wrapped handler allocated the request (and its response) before parsing.
    Req* empty = static_cast<grpc::MessageHolder<Req, Resp>*>(*handler_data)->request();
    empty->Clear();
    marks_.Mark(empty);
    *status = grpc::Status::OK;
    return empty;
  }

 private:
  UndecodableMarks marks_;  // before inner_, whose handler uses it
  grpc::internal::CallbackUnaryHandler<Req, Resp> inner_;
};

template <class Req, class Resp>
class DecodeCheckingStreamingHandler : public grpc::internal::MethodHandler {
 public:
  using Handler = std::function<grpc::ServerWriteReactor<Resp>*(grpc::CallbackServerContext*,
                                                                const Req*)>;
  using OnUndecodable =
      std::function<grpc::ServerWriteReactor<Resp>*(grpc::CallbackServerContext*)>;

  DecodeCheckingStreamingHandler(Handler handler, OnUndecodable on_undecodable)
      : inner_([this, handler = std::move(handler), on_undecodable = std::move(on_undecodable)](
                   grpc::CallbackServerContext* ctx, const Req* request) {
          if (marks_.Take(request)) return on_undecodable(ctx);
          return handler(ctx, request);
        }) {}

  void RunHandler(const HandlerParameter& param) override { inner_.RunHandler(param); }

  void* Deserialize(grpc_call* call, grpc_byte_buffer* req, grpc::Status* status,
                    void** handler_data) override {
    void* request = inner_.Deserialize(call, req, status, handler_data);
    if (status->ok()) return request;
    // The wrapped handler destroyed its request; an empty one on the call's arena, which the
    // writer destroys at the end of the call like any request.
    Req* empty = new (grpc::g_core_codegen_interface->grpc_call_arena_alloc(call, sizeof(Req)))
        Req();
    marks_.Mark(empty);
    *status = grpc::Status::OK;
    return empty;
  }

 private:
  UndecodableMarks marks_;
  grpc::internal::CallbackServerStreamingHandler<Req, Resp> inner_;
};

// A server stream that only finishes with `status` (for a request that did not parse).
template <class Resp>
class FinishedWriteReactor : public grpc::ServerWriteReactor<Resp> {
 public:
  explicit FinishedWriteReactor(grpc::Status status) { this->Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

}  // namespace octopipe::planner

#endif  // OCTOPIPE_PLANNER_SERVICE_DECODE_CHECK_H_
