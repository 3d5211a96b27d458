#include "cli/profile_ranks.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <sstream>
#include <thread>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "calibration/profile_fit.h"
#include "core/json_text.h"
#include "core/status_macros.h"
#include "executor/collective.h"
#include "executor/data.h"
#include "executor/engine.h"
#include "executor/inproc_transport.h"
#include "executor/layout_trainer.h"
#include "executor/reference_trainer.h"
#include "executor/trainer.h"
#include "executor/transport_factory.h"

namespace octopipe::cli {
namespace {

using executor::ModelSpec;

// Tags for the link measurement, clear of the engine's (which are < 2 * stages * microbatches).
constexpr uint32_t kPingTag = 1u << 30;
constexpr int kPingRounds = 15;
// Timed rounds over the buckets of the gradient all-reduce measurement (after two warm-up
// rounds).
constexpr int kAllReduceRounds = 5;
// Host-speed probes (executor/host_probe.h) each rank times before each F/B/W launch.
constexpr int kProbeRepeats = 3;

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Ping-pong between ranks 0 and 1: (bytes, one-way seconds), the median of kPingRounds rounds
// per size. Other ranks return nothing.
absl::StatusOr<std::vector<std::pair<double, double>>> PingPong(executor::Transport* t,
                                                                size_t message_bytes) {
  std::vector<std::pair<double, double>> out;
  if (t->size() < 2 || t->rank() > 1) return out;
  const int peer = 1 - t->rank();
  std::vector<char> buf(4 * message_bytes + 64);
  uint32_t tag = kPingTag;
  for (size_t bytes : {message_bytes / 4, message_bytes / 2, message_bytes, 2 * message_bytes,
                       4 * message_bytes}) {
    bytes = std::max<size_t>(bytes, 64);
    std::vector<double> one_way;
    for (int i = 0; i < kPingRounds + 2; ++i, ++tag) {
      const auto t0 = std::chrono::steady_clock::now();
      if (t->rank() == 0) {
        RETURN_IF_ERROR(t->Send(peer, tag, buf.data(), bytes));
        RETURN_IF_ERROR(t->Recv(peer, tag, buf.data(), bytes));
      } else {
        RETURN_IF_ERROR(t->Recv(peer, tag, buf.data(), bytes));
        RETURN_IF_ERROR(t->Send(peer, tag, buf.data(), bytes));
      }
      if (i >= 2) one_way.push_back(Seconds(t0) / 2);  // the first rounds warm up
    }
    out.push_back({static_cast<double>(bytes), Median(one_way)});
  }
  return out;
}

// The reference model's F, B and W of one micro-batch, over and over on a thread of its own
// from construction until destruction: the compute a gradient all-reduce overlaps in a run
// (the backward of the device's earlier stages, or other ranks' on the same cores). Each pass
// also copies the gradients out (RunReferenceIteration), a little more memory traffic than a
// backward has.
class BusyCompute {
 public:
  static absl::StatusOr<std::unique_ptr<BusyCompute>> Start(const ModelSpec& spec) {
    ASSIGN_OR_RETURN(std::vector<std::unique_ptr<executor::Layer>> layers,
                     executor::BuildModel(spec.pattern, spec.dims));
    return std::unique_ptr<BusyCompute>(new BusyCompute(
        std::move(layers), executor::MakeMicroBatches(spec.dims, /*seed=*/7, 0, 1)));
  }
  ~BusyCompute() {
    stop_.store(true);
    thread_.join();
  }

 private:
  BusyCompute(std::vector<std::unique_ptr<executor::Layer>> layers,
              std::vector<executor::MicroBatch> data)
      : layers_(std::move(layers)), data_(std::move(data)), thread_([this] {
          while (!stop_.load()) executor::RunReferenceIteration(layers_, data_);
        }) {}

  std::vector<std::unique_ptr<executor::Layer>> layers_;
  std::vector<executor::MicroBatch> data_;
  std::atomic<bool> stop_{false};
  std::thread thread_;  // last: starts once the members above exist
};

// The gradient all-reduce over every rank as the data-parallel gradient sync runs it
// (executor/layout_trainer.cc): one all-reduce per bucket of `buckets` (bytes, in the sync's
// order), each bucket's gradients in their own memory, copied into one shared buffer,
// all-reduced and copied back. (bytes, seconds) of every call of kAllReduceRounds rounds over
// the buckets, after two warm-up rounds. Every rank takes part; nothing with one rank. With
// `busy`, every rank computes that model on another thread meanwhile (BusyCompute): the sync
// overlapped with the backward.
absl::StatusOr<std::vector<std::pair<double, double>>> AllReduceTimes(
    executor::Transport* t, const std::vector<size_t>& buckets, const ModelSpec* busy) {
  std::vector<std::pair<double, double>> out;
  if (t->size() < 2 || buckets.empty()) return out;
  std::vector<int> members(t->size());
  std::iota(members.begin(), members.end(), 0);
  // The model is built first: a rank that cannot build it fails before the collective that
  // the others would wait in.
  std::unique_ptr<BusyCompute> compute;
  if (busy != nullptr) {
    ASSIGN_OR_RETURN(compute, BusyCompute::Start(*busy));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<executor::Collective> group,
                   t->NewCollective(members, busy != nullptr ? "profile/allreduce-overlapped"
                                                             : "profile/allreduce"));
  std::vector<std::vector<float>> grads;
  for (size_t bytes : buckets) grads.emplace_back(bytes / sizeof(float), 0.0f);
  std::vector<float> buffer;
  for (int round = 0; round < kAllReduceRounds + 2; ++round) {
    for (std::vector<float>& g : grads) {
      const auto t0 = std::chrono::steady_clock::now();
      buffer.resize(g.size());
      std::memcpy(buffer.data(), g.data(), g.size() * sizeof(float));
      RETURN_IF_ERROR(group->AllReduceSum(buffer.data(), g.size()));
      std::memcpy(g.data(), buffer.data(), g.size() * sizeof(float));
      // The first rounds warm up.
      if (round >= 2) out.push_back({static_cast<double>(g.size() * sizeof(float)), Seconds(t0)});
    }
  }
  return out;
}

// One rank: 1 + repeat iterations of the profile plan, then (with `ping`) the ping-pong and the
// all-reduces of `allreduce_bytes` (AllReduceTimes' buckets).
// Returns its JSON report (the format is RunProfileRanks').
absl::StatusOr<std::string> ProfileRank(const ModelSpec& spec, const Plan& plan, int rank,
                                        executor::Transport* transport, int repeat, bool ping,
                                        bool probe, double rotate_cores_ms,
                                        const LayoutPlan* layout,
                                        const std::vector<size_t>& allreduce_bytes) {
  executor::TrainOptions options;
  options.iterations = repeat + 1;
  options.core_rotation_s = rotate_cores_ms / 1e3;
  if (probe) options.host_probe_repeats = kProbeRepeats;
  ASSIGN_OR_RETURN(executor::RankResult result,
                   layout != nullptr
                       ? executor::TrainLayoutRank(spec, *layout, rank, transport, options)
                       : executor::TrainRank(spec, plan, rank, transport, options));
  Json layers = Json::array();
  std::vector<double> overhead, wall, comm_cpu;
  for (int it = 1; it <= repeat; ++it) {
    const executor::IterationStats& st = result.iterations[it];
    wall.push_back(st.wall_s);
    // Ranks that are threads of one process (inproc) would count each other's compute.
    if (st.messages > 0 && transport->name() != "inproc") {
      comm_cpu.push_back(st.comm_cpu_s() / st.messages);
    }
  }
  for (int it = 1; it <= repeat; ++it) {
    const executor::IterationStats& st = result.iterations[it];
    std::map<std::pair<int, int>, std::pair<double, int>> sum;  // (layer, kind) -> (s, n)
    std::map<std::tuple<int, int, int>, double> per_op;  // (stage, mb, op kind) -> layer seconds
    for (const executor::LayerOpTiming& t : st.layer_ops) {
      auto& s = sum[{t.layer, static_cast<int>(t.kind)}];
      s.first += t.seconds;
      ++s.second;
      per_op[{t.stage, t.microbatch, static_cast<int>(t.kind)}] += t.seconds;
    }
    for (const auto& [key, s] : sum) {
      layers.push_back({it, key.first, key.second, s.first / s.second});
    }
    // Overhead of an op: its duration beyond its layers' compute, plus the engine's own time
    // since the previous op ended that was not spent waiting for a message.
    double total = 0;
    for (size_t i = 0; i < st.ops.size(); ++i) {
      const executor::OpTiming& op = st.ops[i];
      double layers = 0;
      for (OpKind k : {OpKind::kF, OpKind::kB, OpKind::kW, OpKind::kR}) {
        const bool part = op.op.kind == k || (op.op.kind == OpKind::kBW &&
                                              (k == OpKind::kB || k == OpKind::kW));
        if (!part) continue;
        auto f = per_op.find({op.op.stage, op.op.microbatch, static_cast<int>(k)});
        if (f != per_op.end()) layers += f->second;
      }
      double gap = 0;
      if (i > 0) gap = std::max(0.0, op.start_s - st.ops[i - 1].end_s - op.wait_s);
      total += std::max(0.0, op.end_s - op.start_s - layers) + gap;
    }
    if (!st.ops.empty()) overhead.push_back(total / st.ops.size());
  }
  Json ops = Json::array();
  for (int it = 1; it <= repeat; ++it) {
    const executor::IterationStats& st = result.iterations[it];
    double prev_end = st.start_steady_s;
    for (const executor::OpTiming& op : st.ops) {
      ops.push_back({it, op.op.stage, op.op.microbatch, static_cast<int>(op.op.kind),
                     st.start_steady_s + op.start_s, st.start_steady_s + op.end_s, prev_end});
      prev_end = st.start_steady_s + op.end_s;
    }
  }
  const size_t message_bytes =
      static_cast<size_t>(spec.dims.batch) * spec.dims.seq_len * spec.dims.hidden * sizeof(float);
  std::vector<std::pair<double, double>> link, allreduce, overlapped;
  if (ping) {
    ASSIGN_OR_RETURN(link, PingPong(transport, message_bytes));
    ASSIGN_OR_RETURN(allreduce, AllReduceTimes(transport, allreduce_bytes, nullptr));
    ASSIGN_OR_RETURN(overlapped, AllReduceTimes(transport, allreduce_bytes, &spec));
  }
  // What each layer's context holds after F and after B ([layer, kind, bytes], the largest
  // over the measured iterations' micro-batches: an EP shard's follow the routing), and each
  // held layer's weight bytes ([layer, bytes]): the split launches' per-rank bytes.
  std::map<std::pair<int, int>, int64_t> most;
  for (int it = 1; it <= repeat; ++it) {
    for (const executor::LayerOpTiming& t : result.iterations[it].layer_ops) {
      if (t.held_bytes >= 0 && (t.kind == OpKind::kF || t.kind == OpKind::kB)) {
        int64_t& m = most[{t.layer, static_cast<int>(t.kind)}];
        m = std::max(m, t.held_bytes);
      }
    }
  }
  Json held = Json::array();
  for (const auto& [key, bytes] : most) held.push_back({key.first, key.second, bytes});
  Json params = Json::array();
  for (size_t l = 0; l < result.layers.size(); ++l) {
    if (result.layers[l] == nullptr) continue;
    params.push_back({static_cast<int>(l), executor::ParamBytes(*result.layers[l])});
  }
  auto pairs = [](const std::vector<std::pair<double, double>>& v) {
    Json out = Json::array();
    for (const auto& [bytes, s] : v) out.push_back({bytes, s});
    return out;
  };
  return JsonText({{"layers", std::move(layers)},
                   {"overhead", overhead},
                   {"wall", wall},
                   {"comm_cpu", comm_cpu},
                   {"ops", std::move(ops)},
                   {"link", pairs(link)},
                   {"allreduce", pairs(allreduce)},
                   {"allreduce_overlapped", pairs(overlapped)},
                   {"held_bytes", std::move(held)},
                   {"param_bytes", std::move(params)},
                   {"probe", result.host_probe.seconds}});
}

}  // namespace

absl::StatusOr<std::vector<std::string>> RunProfileRanks(
    const ModelSpec& spec, const Plan& plan, const RankLaunch& f, int repeat, bool ping,
    bool probe, const LayoutPlan* layout, const std::vector<size_t>& allreduce_bytes) {
  const int N = static_cast<int>(f.ranks);
  const executor::TransportKind transport = f.transport;
  const double timeout = f.timeout_s;
  std::vector<std::string> reports(N), errors(N);
  if (transport == executor::TransportKind::kInProc) {
    executor::InProcHub hub(N, executor::InProcOptions{.timeout_s = timeout});
    std::vector<std::thread> threads;
    for (int r = 0; r < N; ++r) {
      threads.emplace_back([&, r] {
        auto t = hub.Endpoint(r);
        absl::StatusOr<std::string> res = ProfileRank(spec, plan, r, t.get(), repeat, ping, probe,
                                                  f.rotate_cores_ms, layout, allreduce_bytes);
        if (res.ok()) {
          reports[r] = *res;
        } else {
          errors[r] = std::string(res.status().message());
          hub.Abort(r);
        }
      });
    }
    for (auto& t : threads) t.join();
  } else {
    std::string tmpl = (std::filesystem::temp_directory_path() / "octopipe-profile-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      return absl::InternalError(absl::StrCat("cannot create a run directory: ", std::strerror(errno)));
    }
    const std::string dir = tmpl;
    std::vector<pid_t> pids;
    for (int r = 0; r < N; ++r) {
      const pid_t pid = fork();
      if (pid < 0) {
        errors[r] = absl::StrCat("fork: ", std::strerror(errno));
        break;
      }
      if (pid == 0) {
        executor::TransportConfig tc;
        tc.rank = r;
        tc.size = N;
        tc.store_dir = dir + "/store";
        tc.prefix = "profile";
        tc.timeout_s = timeout;
        tc.cuda_device = r;
        auto t = executor::MakeTransport(transport, tc);
        absl::StatusOr<std::string> res =
            t.ok() ? ProfileRank(spec, plan, r, t->get(), repeat, ping, probe, f.rotate_cores_ms,
                                 layout, allreduce_bytes)
                   : absl::StatusOr<std::string>(t.status());
        const std::string base = absl::StrCat(dir, "/rank-", r);
        if (res.ok()) {
          std::ofstream(base + ".json") << *res;
          _exit(0);
        }
        std::ofstream(base + ".err") << res.status().message();
        _exit(1);
      }
      pids.push_back(pid);
    }
    for (int r = 0; r < static_cast<int>(pids.size()); ++r) {
      int status = 0;
      while (waitpid(pids[r], &status, 0) < 0 && errno == EINTR) {
      }
      const std::string base = absl::StrCat(dir, "/rank-", r);
      std::ifstream in(base + ".json"), e(base + ".err");
      std::stringstream s;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && in) {
        s << in.rdbuf();
        reports[r] = s.str();
      } else {
        s << e.rdbuf();
        errors[r] = s.str().empty() ? absl::StrCat("exited with status ", status) : s.str();
      }
    }
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  for (int r = 0; r < N; ++r) {
    if (!errors[r].empty()) {
      return absl::InternalError(absl::StrCat("rank ", r, " failed: ", errors[r]));
    }
  }
  return reports;
}

}  // namespace octopipe::cli
