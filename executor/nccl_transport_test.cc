// Pins NcclTransport's availability contract and, on hosts with GPUs, its data path.
//
// Without a GPU (our CI machines: cudaGetDeviceCount fails with error 35) Create must return
// kFailedPrecondition that says a GPU is needed and names the CUDA call and error. With two or
// more GPUs, two forked ranks exchange messages of several sizes and tags, concurrently and out
// of tag order. CUDA must not be initialized before fork(), so the test process asks a child
// how many devices there are and only touches CUDA itself when there are none.
#include "executor/nccl_transport.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace octopipe::executor {
namespace {

using ::testing::HasSubstr;

// The number of CUDA devices as seen by a forked child (0 when CUDA is unusable).
int GpuCountInChild() {
  const pid_t pid = fork();
  if (pid == 0) {
    absl::StatusOr<int> n = CudaDeviceCount();
    _exit(n.ok() ? std::min(*n, 100) : 0);
  }
  int wstatus = 0;
  if (waitpid(pid, &wstatus, 0) != pid || !WIFEXITED(wstatus)) return 0;
  return WEXITSTATUS(wstatus);
}

std::string FreshStoreDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/nccl_store_", info->name(), "_", getpid());
}

TEST(NcclTransportTest, WithoutGpuCreateIsFailedPreconditionNamingTheCudaError) {
  if (GpuCountInChild() > 0) GTEST_SKIP() << "this host has a GPU; covered by the tests below";
  EXPECT_FALSE(GpuAvailable());
  absl::StatusOr<int> count = CudaDeviceCount();
  ASSERT_FALSE(count.ok());
  EXPECT_EQ(count.status().code(), absl::StatusCode::kFailedPrecondition);

  NcclOptions options;
  options.rank = 0;
  options.size = 2;
  options.store_dir = FreshStoreDir();
  options.prefix = "run";
  absl::StatusOr<std::unique_ptr<Transport>> t = NcclTransport::Create(options);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(t.status().message());
  EXPECT_THAT(message, HasSubstr("NCCL transport needs a GPU"));
  EXPECT_THAT(message, HasSubstr("cudaGetDeviceCount"));
  std::printf("Create without a GPU: %s\n", t.status().ToString().c_str());
}

TEST(NcclTransportTest, BadOptionsAreInvalidArgumentBeforeTouchingCuda) {
  NcclOptions options;
  options.size = 2;
  options.rank = 5;
  EXPECT_EQ(NcclTransport::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
}

// Runs body(rank) in `n` forked children; true when all exit 0.
bool RunRanks(int n, const std::function<absl::Status(int)>& body) {
  std::vector<pid_t> pids;
  for (int rank = 0; rank < n; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      alarm(120);
      absl::Status s = body(rank);
      if (!s.ok()) std::fprintf(stderr, "rank %d failed: %s\n", rank, s.ToString().c_str());
      std::fflush(stderr);
      _exit(s.ok() ? 0 : 1);
    }
    pids.push_back(pid);
  }
  bool all_ok = true;
  for (pid_t pid : pids) {
    int wstatus = 0;
    all_ok &= waitpid(pid, &wstatus, 0) == pid && WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
  }
  return all_ok;
}

TEST(NcclTransportTest, SingleRankOnAGpu) {
  if (GpuCountInChild() == 0) GTEST_SKIP() << "no GPU on this host";
  EXPECT_TRUE(RunRanks(1, [](int) -> absl::Status {
    if (!GpuAvailable()) return absl::InternalError("child sees no GPU");
    NcclOptions options;
    absl::StatusOr<std::unique_ptr<Transport>> t = NcclTransport::Create(options);
    if (!t.ok()) return t.status();
    if ((*t)->name() != "nccl" || (*t)->size() != 1) return absl::InternalError("name/size");
    return absl::OkStatus();
  }));
}

std::vector<uint8_t> Payload(int src, uint32_t tag, int m, size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(src * 101 + tag * 13 + m * 7 + i);
  return v;
}

absl::Status TwoRankExchange(int rank, const std::string& dir) {
  NcclOptions options;
  options.rank = rank;
  options.size = 2;
  options.store_dir = dir;
  options.prefix = "exchange";
  options.timeout_s = 60;
  absl::StatusOr<std::unique_ptr<Transport>> created = NcclTransport::Create(options);
  if (!created.ok()) return created.status();
  Transport& t = **created;
  const int peer = 1 - rank;

  // Out of tag order: rank 0 sends tag 1 then tag 2; rank 1 asks for tag 2 first.
  if (rank == 0) {
    int32_t a = 11, b = 22;
    if (absl::Status s = t.Send(1, 1, &a, 4); !s.ok()) return s;
    if (absl::Status s = t.Send(1, 2, &b, 4); !s.ok()) return s;
  } else {
    int32_t a = 0, b = 0;
    if (absl::Status s = t.Recv(0, 2, &b, 4); !s.ok()) return s;
    if (absl::Status s = t.Recv(0, 1, &a, 4); !s.ok()) return s;
    if (a != 11 || b != 22) return absl::DataLossError("out-of-order tags mixed up");
  }

  // Both directions at once, one thread per (direction, tag), several sizes.
  const size_t sizes[] = {0, 1, 4096, (1 << 20) + 3, 8 << 20};
  std::mutex mu;
  absl::Status first_error;
  auto record = [&](absl::Status s) {
    std::lock_guard<std::mutex> lock(mu);
    if (first_error.ok()) first_error = std::move(s);
  };
  std::vector<std::thread> threads;
  for (uint32_t tag = 0; tag < 3; ++tag) {
    threads.emplace_back([&, tag] {
      int m = 0;
      for (size_t n : sizes) {
        std::vector<uint8_t> p = Payload(rank, tag, m++, n);
        if (absl::Status s = t.Send(peer, tag, p.data(), p.size()); !s.ok()) return record(s);
      }
    });
    threads.emplace_back([&, tag] {
      int m = 0;
      for (size_t n : sizes) {
        std::vector<uint8_t> want = Payload(peer, tag, m++, n);
        std::vector<uint8_t> got(n, 0xEE);
        if (absl::Status s = t.Recv(peer, tag, got.data(), n); !s.ok()) return record(s);
        if (got != want) return record(absl::DataLossError(absl::StrCat("tag ", tag, " size ", n)));
      }
    });
  }
  for (std::thread& th : threads) th.join();
  return first_error;
}

TEST(NcclTransportTest, TwoRanksExchangeOnTwoGpus) {
  const int gpus = GpuCountInChild();
  if (gpus == 0) GTEST_SKIP() << "no GPU on this host";
  if (gpus < 2) GTEST_SKIP() << "NCCL needs one GPU per rank; this host has " << gpus;
  const std::string dir = FreshStoreDir();
  EXPECT_TRUE(RunRanks(2, [&](int rank) { return TwoRankExchange(rank, dir); }));
}

}  // namespace
}  // namespace octopipe::executor
