// Point-to-point bandwidth and latency of GlooTransport between two processes on loopback —
// the numbers behind the executor's CPU path (one blocking Send/Recv at a time per peer, as
// the executor's per-peer threads issue them).
//
//   bazel run -c opt //bench:gloo_bandwidth -- [--min_bytes=4096] [--max_bytes=67108864]
//                                              [--target_bytes=268435456]
//
// For each power-of-two size from min_bytes to max_bytes, prints one JSON line:
//   bytes         message size
//   gbytes_per_s  one-way streaming: rank 0 sends `iters` messages, rank 1 acknowledges each
//                 with 1 byte (Gloo sends are rendezvous, so this is what one sender gets);
//                 10^9 bytes per second
//   latency_us    half the round-trip time of a ping-pong of this size
//   iters         messages behind gbytes_per_s (about target_bytes in all, 4..2000)
//   allreduce_us  one 2-member all-reduce (sum) of this many bytes of floats through the
//                 transport's collective (NewCollective), mean of kAllReduces calls;
//                 allreduce_median_us, allreduce_max_us: their median and slowest
// The process forks: the parent is rank 0 and prints, the child is rank 1.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "core/json_text.h"
#include "executor/gloo_transport.h"

namespace {

using octopipe::executor::GlooOptions;
using octopipe::executor::GlooTransport;
using octopipe::executor::Transport;

constexpr uint32_t kDataTag = 1;
constexpr uint32_t kAckTag = 2;
constexpr uint32_t kPingTag = 3;
constexpr int kWarmup = 2;
constexpr int kPingPongs = 20;
constexpr int kAllReduces = 20;

int Iterations(size_t bytes, size_t target_bytes) {
  return static_cast<int>(std::clamp<size_t>(target_bytes / bytes, 4, 2000));
}

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

#define CHECK_OK(expr)                                                    \
  do {                                                                    \
    absl::Status s_ = (expr);                                             \
    if (!s_.ok()) {                                                       \
      std::fprintf(stderr, "rank %d: %s\n", rank, s_.ToString().c_str()); \
      return 1;                                                           \
    }                                                                     \
  } while (0)

// Both ranks run the same schedule; rank 0 times it and prints.
int Run(int rank, const std::string& store_dir, size_t min_bytes, size_t max_bytes,
        size_t target_bytes) {
  GlooOptions options;
  options.rank = rank;
  options.size = 2;
  options.store_dir = store_dir;
  options.prefix = "bw";
  options.timeout_s = 120;
  absl::StatusOr<std::unique_ptr<Transport>> created = GlooTransport::Create(options);
  CHECK_OK(created.status());
  Transport& t = **created;
  const int peer = 1 - rank;
  std::vector<char> buf(max_bytes, static_cast<char>(rank + 1));
  char ack = 0;

  absl::StatusOr<std::unique_ptr<octopipe::executor::Collective>> group =
      t.NewCollective({0, 1}, "bench");
  CHECK_OK(group.status());
  std::vector<float> values(max_bytes / sizeof(float) + 1, 1.0f);
  for (size_t n = min_bytes; n <= max_bytes; n *= 2) {
    const int iters = Iterations(n, target_bytes);
    double stream_s = 0;
    for (int phase = 0; phase < 2; ++phase) {  // 0: warm-up, 1: timed.
      const int count = phase == 0 ? kWarmup : iters;
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < count; ++i) {
        if (rank == 0) {
          CHECK_OK(t.Send(peer, kDataTag, buf.data(), n));
          CHECK_OK(t.Recv(peer, kAckTag, &ack, 1));
        } else {
          CHECK_OK(t.Recv(peer, kDataTag, buf.data(), n));
          CHECK_OK(t.Send(peer, kAckTag, &ack, 1));
        }
      }
      stream_s = Seconds(start);
    }
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kPingPongs; ++i) {
      if (rank == 0) {
        CHECK_OK(t.Send(peer, kPingTag, buf.data(), n));
        CHECK_OK(t.Recv(peer, kPingTag, buf.data(), n));
      } else {
        CHECK_OK(t.Recv(peer, kPingTag, buf.data(), n));
        CHECK_OK(t.Send(peer, kPingTag, buf.data(), n));
      }
    }
    const double pingpong_s = Seconds(start);
    const size_t floats = std::max<size_t>(1, n / sizeof(float));
    CHECK_OK((*group)->AllReduceSum(values.data(), floats));  // warm-up
    std::vector<double> reduce_s;
    for (int i = 0; i < kAllReduces; ++i) {
      const auto one = std::chrono::steady_clock::now();
      CHECK_OK((*group)->AllReduceSum(values.data(), floats));
      reduce_s.push_back(Seconds(one));
    }
    double allreduce_s = 0;
    for (double x : reduce_s) allreduce_s += x;
    std::sort(reduce_s.begin(), reduce_s.end());
    if (rank == 0) {
      const octopipe::Json line = {
          {"bytes", static_cast<int64_t>(n)},
          {"gbytes_per_s", static_cast<double>(n) * iters / stream_s / 1e9},
          {"latency_us", pingpong_s / kPingPongs / 2 * 1e6},
          {"allreduce_us", allreduce_s / kAllReduces * 1e6},
          {"allreduce_median_us", reduce_s[reduce_s.size() / 2] * 1e6},
          {"allreduce_max_us", reduce_s.back() * 1e6},
          {"iters", iters}};
      std::printf("%s\n", octopipe::JsonText(line).c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}

int Usage() {
  std::fprintf(stderr,
               "usage: gloo_bandwidth [--min_bytes=N] [--max_bytes=N] [--target_bytes=N]\n"
               "  0 < min_bytes <= max_bytes\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  size_t min_bytes = 4 << 10, max_bytes = 64 << 20, target_bytes = 256 << 20;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    bool ok = false;
    if (a.rfind("--min_bytes=", 0) == 0) {
      ok = absl::SimpleAtoi(a.substr(12), &min_bytes);
    } else if (a.rfind("--max_bytes=", 0) == 0) {
      ok = absl::SimpleAtoi(a.substr(12), &max_bytes);
    } else if (a.rfind("--target_bytes=", 0) == 0) {
      ok = absl::SimpleAtoi(a.substr(15), &target_bytes);
    }
    if (!ok) return Usage();
  }
  if (min_bytes == 0 || min_bytes > max_bytes) return Usage();
  char dir_template[] = "/tmp/gloo_bandwidth_XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string store_dir = dir_template;

  const pid_t child = fork();
  if (child < 0) {
    std::perror("fork");
    return 1;
  }
  if (child == 0) _exit(Run(1, store_dir, min_bytes, max_bytes, target_bytes));
  const int rc = Run(0, store_dir, min_bytes, max_bytes, target_bytes);
  int wstatus = 0;
  waitpid(child, &wstatus, 0);
  std::error_code ec;
  std::filesystem::remove_all(store_dir, ec);
  const bool child_ok = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
  if (!child_ok) std::fprintf(stderr, "rank 1 failed (wait status %d)\n", wstatus);
  return rc != 0 ? rc : (child_ok ? 0 : 1);
}
