#include "planner_service/audit_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/clock.h"
#include "nlohmann/json.hpp"

namespace octopipe::planner {

absl::StatusOr<std::unique_ptr<AuditLog>> AuditLog::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--audit_log: cannot open '", path, "' for appending: ", std::strerror(errno)));
  }
  std::FILE* file = ::fdopen(fd, "a");
  if (file == nullptr) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat("--audit_log: cannot open '", path, "'"));
  }
  return std::unique_ptr<AuditLog>(new AuditLog(file));
}

AuditLog::~AuditLog() { std::fclose(file_); }

void AuditLog::Record(const Principal* who, const std::string& method,
                      const std::string& target, const absl::Status& result) {
  nlohmann::json line = {
      {"unix_ms", UnixMillis()},
      {"identity", who != nullptr ? who->name : "unidentified"},
      {"role", who != nullptr ? AccessRoleName(who->role) : ""},
      {"method", method},
      {"target", target.substr(0, 64)},
      {"code", absl::StatusCodeToString(result.code())},
  };
  if (!result.ok()) line["message"] = std::string(result.message().substr(0, 256));
  // Invalid UTF-8 in a target or message is replaced, never thrown.
  const std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  absl::MutexLock lock(&mu_);
  std::fputs(text.c_str(), file_);
  std::fputc('\n', file_);
  std::fflush(file_);
}

}  // namespace octopipe::planner
