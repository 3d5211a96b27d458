// AuditLog: one JSON line per mutating call of the planner's API — when (unix_ms), who (the
// identity and its role, or "unidentified" when its credential was refused), the method, its
// target (a job or node id, at most 64 bytes) and the result (the status code's name and, on
// failure, its message, at most 256 bytes) — appended to a file and flushed line by line, so
// a crash loses at most the line being written. A line:
//   {"unix_ms":1764950000000,"identity":"node-a","role":"agent","method":"Heartbeat",
//    "target":"node-b","code":"PERMISSION_DENIED","message":"identity 'node-a' (agent) ..."}
// Which calls are recorded is the service's choice (planner_service/service.h).
// Thread-safe.
#ifndef OCTOPIPE_PLANNER_SERVICE_AUDIT_LOG_H_
#define OCTOPIPE_PLANNER_SERVICE_AUDIT_LOG_H_

#include <cstdio>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "planner_service/access.h"

namespace octopipe::planner {

class AuditLog {
 public:
  // Opens `path` for appending (created with mode 0600 if missing). kInvalidArgument naming the
  // path when it cannot be opened.
  static absl::StatusOr<std::unique_ptr<AuditLog>> Open(const std::string& path);
  ~AuditLog();

  // `who` null: the caller's credential was not accepted.
  void Record(const Principal* who, const std::string& method, const std::string& target,
              const absl::Status& result);

 private:
  explicit AuditLog(std::FILE* file) : file_(file) {}
  absl::Mutex mu_;
  std::FILE* const file_;
};

}  // namespace octopipe::planner

#endif  // OCTOPIPE_PLANNER_SERVICE_AUDIT_LOG_H_
