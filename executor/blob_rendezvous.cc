#include "executor/blob_rendezvous.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "executor/tcp_store.h"

namespace octopipe::executor {
namespace {

absl::Status CheckPlace(const BlobRendezvous& r) {
  if (r.key.empty()) return absl::InvalidArgumentError("rendezvous: the key is empty");
  if (r.store_address.empty() && r.store_dir.empty()) {
    return absl::InvalidArgumentError(
        "rendezvous: store_address and store_dir are empty; ranks need a TCP store or a "
        "shared directory");
  }
  return absl::OkStatus();
}

std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(std::max(0.0, seconds) * 1000));
}

std::string PathOf(const BlobRendezvous& r) { return absl::StrCat(r.store_dir, "/", r.key); }

}  // namespace

absl::Status PublishBlob(const BlobRendezvous& r, const std::string& bytes) {
  if (absl::Status s = CheckPlace(r); !s.ok()) return s;
  if (!r.store_address.empty()) {
    TcpStore store(r.store_address, Millis(r.timeout_s));
    return store.Put(r.key, bytes);
  }
  std::error_code ec;
  std::filesystem::create_directories(r.store_dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("rendezvous: cannot create store_dir '", r.store_dir, "': ", ec.message()));
  }
  const std::string path = PathOf(r);
  if (std::filesystem::exists(path, ec)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rendezvous: '", path, "' exists from an earlier run; use a fresh key"));
  }
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out.good()) {
      return absl::FailedPreconditionError(absl::StrCat("rendezvous: cannot write '", tmp, "'"));
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("rendezvous: cannot rename '", tmp, "' to '", path, "': ", ec.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> AwaitBlob(const BlobRendezvous& r, int rank) {
  if (absl::Status s = CheckPlace(r); !s.ok()) return s;
  if (!r.store_address.empty()) {
    TcpStore store(r.store_address, Millis(r.timeout_s));
    absl::StatusOr<std::string> got = store.Fetch(r.key, Millis(r.timeout_s));
    if (absl::IsNotFound(got.status())) {
      return absl::DeadlineExceededError(absl::StrCat("rank ", rank, ": '", r.key,
                                                      "' did not appear in the store at ",
                                                      r.store_address, " within ",
                                                      r.timeout_s, " s"));
    }
    return got;
  }
  const Clock& clock = ClockOrReal(r.clock);
  const double deadline = clock.NowSeconds() + r.timeout_s;
  const std::string path = PathOf(r);
  std::error_code ec;
  // Polling a file is the only readiness signal a shared directory offers (no inotify on NFS).
  while (!std::filesystem::exists(path, ec)) {
    if (clock.NowSeconds() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("rank ", rank, ": '", path,
                                                      "' did not appear within ", r.timeout_s,
                                                      " s"));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace octopipe::executor
