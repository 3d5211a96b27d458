// RpcLogInterceptorFactory: a gRPC server interceptor that logs one line per finished RPC on
// the "rpc" logger (logging/logging.h): method, job id (the request's `job_id` field, when it
// has one), status code and latency from the call's arrival to its status. Health checks log
// at debug, server faults (INTERNAL, UNKNOWN, DATA_LOSS) at warn, everything else at info.
//
// Install with ServerBuilder::experimental().SetInterceptorCreators. One interceptor object
// exists per call and is used by one thread at a time (gRPC's contract); the factory is
// stateless and thread-safe.
#ifndef OCTOPIPE_PLANNER_SERVICE_RPC_LOG_H_
#define OCTOPIPE_PLANNER_SERVICE_RPC_LOG_H_

#include <grpcpp/support/server_interceptor.h>

namespace octopipe::planner {

class RpcLogInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;
};

}  // namespace octopipe::planner

#endif  // OCTOPIPE_PLANNER_SERVICE_RPC_LOG_H_
