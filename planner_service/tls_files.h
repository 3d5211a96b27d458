// LoadServerTls: reads the planner's TLS files and checks them before gRPC sees them, so that a
// bad file is reported by name and cause ("--tls_key: '/etc/k.pem' does not match the
// certificate in '/etc/c.pem'") instead of as a port that cannot be listened on.
//
// Checks: each path names a readable regular file (not a directory, not empty); the
// certificate and the client CA hold at least one PEM certificate; the key holds a PEM private
// key that matches the certificate's public key. Errors are kInvalidArgument naming the flag
// and the path. Stateless and thread-safe.
#ifndef OCTOPIPE_PLANNER_SERVICE_TLS_FILES_H_
#define OCTOPIPE_PLANNER_SERVICE_TLS_FILES_H_

#include <string>

#include <grpcpp/security/server_credentials.h>

#include "absl/status/statusor.h"

namespace octopipe::planner {

struct TlsFiles {
  std::string cert;       // --tls_cert: server certificate chain (PEM)
  std::string key;        // --tls_key: its private key (PEM)
  std::string client_ca;  // --tls_client_ca: CA that signs client certificates; empty: no mTLS
};

// The gRPC SSL options for `files`, with client certificates required when a client CA is
// given.
absl::StatusOr<grpc::SslServerCredentialsOptions> LoadServerTls(const TlsFiles& files);

}  // namespace octopipe::planner

#endif  // OCTOPIPE_PLANNER_SERVICE_TLS_FILES_H_
