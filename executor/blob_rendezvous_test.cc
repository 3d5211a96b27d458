#include "executor/blob_rendezvous.h"

#include <cstdlib>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "executor/tcp_store.h"
#include "gtest/gtest.h"
#include "core/test_dirs.h"

namespace octopipe::executor {
namespace {

using ::octopipe::testing::TestPath;


// A blob with every byte value, zeros included (NCCL's ids are binary).
std::string Binary() {
  std::string b;
  for (int i = 0; i < 1024; ++i) b.push_back(static_cast<char>(i % 256));
  return b;
}

TEST(BlobRendezvousTest, ThroughTheTcpStoreWithoutASharedDirectory) {
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server = TcpStoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  BlobRendezvous r;
  r.store_address = absl::StrCat("127.0.0.1:", (*server)->port());
  r.key = "job/v1/r0.nccl_ids";
  r.timeout_s = 30;
  // The waiters start first: they block until rank 0 publishes.
  std::vector<absl::StatusOr<std::string>> got(3, absl::UnknownError("not run"));
  std::vector<std::thread> waiters;
  for (int rank = 1; rank < 3; ++rank) {
    waiters.emplace_back([&, rank] { got[rank] = AwaitBlob(r, rank); });
  }
  ASSERT_TRUE(PublishBlob(r, Binary()).ok());
  for (std::thread& t : waiters) t.join();
  for (int rank = 1; rank < 3; ++rank) {
    ASSERT_TRUE(got[rank].ok()) << got[rank].status();
    EXPECT_EQ(*got[rank], Binary());
  }
}

TEST(BlobRendezvousTest, ThroughASharedDirectory) {
  BlobRendezvous r;
  r.store_dir = TestPath("blobs");
  r.key = "run-1.nccl_ids";
  r.timeout_s = 30;
  absl::StatusOr<std::string> got = absl::UnknownError("not run");
  std::thread waiter([&] { got = AwaitBlob(r, 1); });
  ASSERT_TRUE(PublishBlob(r, Binary()).ok());
  waiter.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, Binary());
  // The same key again is an earlier run's file: refused, not overwritten.
  absl::Status again = PublishBlob(r, "other");
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition) << again;
  EXPECT_NE(again.message().find("fresh key"), std::string::npos) << again;
}

TEST(BlobRendezvousTest, AbsentPublisherIsADeadlineNamingTheKeyAndThePlace) {
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server = TcpStoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  BlobRendezvous r;
  r.store_address = absl::StrCat("127.0.0.1:", (*server)->port());
  r.key = "never";
  r.timeout_s = 0.2;
  absl::StatusOr<std::string> got = AwaitBlob(r, 2);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded) << got.status();
  EXPECT_NE(got.status().message().find("'never'"), std::string::npos) << got.status();
  EXPECT_NE(got.status().message().find(r.store_address), std::string::npos) << got.status();

  BlobRendezvous dir;
  dir.store_dir = TestPath("empty");
  dir.key = "never";
  dir.timeout_s = 0.05;
  EXPECT_EQ(AwaitBlob(dir, 1).status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(BlobRendezvousTest, NoPlaceOrNoKeyIsInvalidArgument) {
  BlobRendezvous r;
  r.key = "k";
  EXPECT_EQ(PublishBlob(r, "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AwaitBlob(r, 1).status().code(), absl::StatusCode::kInvalidArgument);
  r.store_dir = TestPath("d");
  r.key = "";
  EXPECT_EQ(PublishBlob(r, "x").code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace octopipe::executor
