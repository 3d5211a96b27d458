#include "core/file_io.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace octopipe {

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (st.type() == std::filesystem::file_type::not_found) {
    return absl::NotFoundError(absl::StrCat("file '", path, "': not found"));
  }
  if (st.type() == std::filesystem::file_type::directory) {
    return absl::FailedPreconditionError(absl::StrCat("file '", path, "': is a directory"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::FailedPreconditionError(
        absl::StrCat("file '", path, "': cannot open for reading: ", std::strerror(errno)));
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) {
    return absl::FailedPreconditionError(absl::StrCat("file '", path, "': read failed"));
  }
  return contents.str();
}

absl::Status WriteStringToFile(const std::string& path, absl::string_view contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    return absl::FailedPreconditionError(
        absl::StrCat("file '", path, "': cannot open for writing: ", std::strerror(errno)));
  }
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  out.close();
  if (!out) {
    return absl::FailedPreconditionError(absl::StrCat("file '", path, "': write failed"));
  }
  return absl::OkStatus();
}

}  // namespace octopipe
