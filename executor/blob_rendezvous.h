// BlobRendezvous: one rank of a run publishes a blob (e.g. NCCL's unique ids) that the other
// ranks wait for, either through a TcpStore served by one process of the run (no shared file
// system needed across nodes: how agents rendezvous) or through a directory every rank sees
// (a file written under a temporary name, then renamed into place, so a reader never sees a
// partial one).
//
//   BlobRendezvous r{.store_address = "10.0.0.1:7000", .key = "job-1/v3/r0/nccl_ids"};
//   rank 0:      RETURN_IF_ERROR(PublishBlob(r, bytes));
//   other ranks: ASSIGN_OR_RETURN(std::string bytes, AwaitBlob(r, rank));
//
// Errors: kInvalidArgument when neither place (or no key) is given; kFailedPrecondition when
// the directory cannot be written or the key's file exists from an earlier run (use a fresh
// key); kUnavailable when the store cannot be reached; kDeadlineExceeded naming the key and the
// place when the blob did not appear within `timeout_s`.
//
// Thread-compatible: each call opens its own connection.
#ifndef OCTOPIPE_EXECUTOR_BLOB_RENDEZVOUS_H_
#define OCTOPIPE_EXECUTOR_BLOB_RENDEZVOUS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/clock.h"

namespace octopipe::executor {

struct BlobRendezvous {
  std::string store_address;  // "HOST:PORT" of a TcpStoreServer; takes precedence
  std::string store_dir;      // otherwise: a directory every rank sees
  std::string key;            // fresh for every run (the file name inside store_dir)
  double timeout_s = 60;      // how long AwaitBlob waits (and PublishBlob tries to connect)
  const Clock* clock = nullptr;  // for the directory's deadline; null: the real clock
};

absl::Status PublishBlob(const BlobRendezvous& r, const std::string& bytes);
absl::StatusOr<std::string> AwaitBlob(const BlobRendezvous& r, int rank);

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_BLOB_RENDEZVOUS_H_
