// Whole-file reads and writes with absl::Status errors that name the path.
//
// Codes: a missing file is kNotFound; a path that exists but cannot be read (a directory,
// no permission) or a file that cannot be written (missing directory, read-only) is
// kFailedPrecondition. Stateless; thread-safe (concurrent writers of one path race, as with
// any file).
#ifndef OCTOPIPE_CORE_FILE_IO_H_
#define OCTOPIPE_CORE_FILE_IO_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace octopipe {

absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Replaces the file's contents (creates it if needed; does not create directories).
absl::Status WriteStringToFile(const std::string& path, absl::string_view contents);

}  // namespace octopipe

#endif  // OCTOPIPE_CORE_FILE_IO_H_
