#include "cli/profile_command.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/command_line.h"
#include "cli/inputs.h"
#include "cli/table.h"
#include "core/convert.h"
#include "core/json_text.h"
#include "core/status_macros.h"
#include "executor/engine.h"
#include "executor/inproc_transport.h"
#include "executor/model_spec.h"
#include "executor/reference_trainer.h"
#include "executor/trainer.h"
#include "executor/transport_factory.h"
#include "simulator/classic_pipeline.h"
#include "simulator/evaluator.h"
#include "simulator/problem_builder.h"

namespace octopipe::cli {
namespace {

using executor::ModelSpec;
using executor::Tensor;

constexpr OpKind kLayerKinds[] = {OpKind::kF, OpKind::kB, OpKind::kW, OpKind::kR};
// Tags for the link measurement, clear of the engine's (which are < 2 * stages * microbatches).
constexpr uint32_t kPingTag = 1u << 30;
constexpr int kPingRounds = 15;
// Runs of each plan the per-message CPU fit takes the fastest of.
constexpr int kMessageFitRounds = 2;
// The per-message CPU cost is at most this many times the engine's median message time.
constexpr double kMessageCpuCap = 4;

int Fail(std::ostream& err, const absl::Status& s, int code) {
  err << "octopipe profile: error: " << s.message() << "\n";
  return code;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double Spread(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  const double m = Median(v);
  return m > 0 ? (*hi - *lo) / m : 0;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// What the executor holds per layer for one micro-batch, from one F and B through the model.
struct LayerBytes {
  double after_f = 0, after_b = 0, params = 0, input = 0, output = 0;
};

absl::StatusOr<std::vector<LayerBytes>> MeasureBytes(const ModelSpec& spec) {
  ASSIGN_OR_RETURN(auto layers, executor::BuildModel(spec.pattern, spec.dims));
  const executor::MicroBatch mb = executor::IterationData(spec, 7, 0, 1)[0];
  const int L = static_cast<int>(layers.size());
  std::vector<LayerBytes> out(L);
  std::vector<executor::LayerContext> ctx(L);
  Tensor x;
  for (int l = 0; l < L; ++l) {
    out[l].input = static_cast<double>(x.size()) * sizeof(float);
    x = layers[l]->Forward(x, mb, &ctx[l]);
    out[l].output = l + 1 < L ? static_cast<double>(x.size()) * sizeof(float) : 0;
    out[l].after_f = static_cast<double>(executor::ContextBytes(ctx[l]));
    for (Tensor* p : layers[l]->params()) out[l].params += static_cast<double>(p->size()) * 4;
  }
  Tensor dy = Tensor::Constant(1, 1, 1.0f);
  for (int l = L - 1; l >= 0; --l) {
    dy = layers[l]->BackwardInput(dy, mb, &ctx[l]);
    out[l].after_b = static_cast<double>(executor::ContextBytes(ctx[l]));
  }
  return out;
}

// ZB-H1: each layer's F, B and W run as separate ops. With `recompute` every stage is
// recomputed, so R runs too (right before B, so B then runs on a freshly built context: that is
// why F, B and W are taken from the run without recompute).
absl::StatusOr<Plan> ProfilePlan(int ranks, int microbatches, const ModelGraph& graph,
                                 bool recompute) {
  ASSIGN_OR_RETURN(Plan plan, ClassicPlan(ScheduleKind::kZbH1, ranks, 0, microbatches, graph));
  if (!recompute) return plan;
  for (StageAssignment& st : plan.stages) st.recompute = true;
  for (std::vector<Op>& ops : plan.schedule.ops) {
    std::vector<Op> with_r;
    for (const Op& op : ops) {
      if (op.kind == OpKind::kB || op.kind == OpKind::kBW) {
        with_r.push_back(Op{OpKind::kR, op.stage, op.microbatch});
      }
      with_r.push_back(op);
    }
    ops = std::move(with_r);
  }
  plan.schedule_name = "profile (zb-h1, recompute)";
  return plan;
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

// One rank: 1 + repeat iterations of the profile plan, then (with `ping`) the ping-pong.
// Returns JSON:
//   {"layers": [[iteration, layer, kind, mean seconds over micro-batches], ...],
//    "overhead": [mean per-op executor overhead of each measured iteration],
//    "wall": [this rank's wall seconds of each measured iteration],
//    "ops": [[iteration, stage, micro-batch, kind, start, end, previous op's end], ...] (times
//            on the machine-wide steady clock, seconds),
//    "link": [[bytes, one-way seconds], ...]}
absl::StatusOr<std::string> ProfileRank(const ModelSpec& spec, const Plan& plan, int rank,
                                        executor::Transport* transport, int repeat, bool ping) {
  executor::TrainOptions options;
  options.iterations = repeat + 1;
  ASSIGN_OR_RETURN(executor::RankResult result,
                   executor::TrainRank(spec, plan, rank, transport, options));
  Json layers = Json::array();
  std::vector<double> overhead, wall;
  for (int it = 1; it <= repeat; ++it) wall.push_back(result.iterations[it].wall_s);
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
  std::vector<std::pair<double, double>> link;
  if (ping) {
    ASSIGN_OR_RETURN(link, PingPong(transport, message_bytes));
  }
  Json link_json = Json::array();
  for (const auto& [bytes, s] : link) link_json.push_back({bytes, s});
  return JsonText({{"layers", std::move(layers)},
                   {"overhead", overhead},
                   {"wall", wall},
                   {"ops", std::move(ops)},
                   {"link", std::move(link_json)}});
}

// Runs ProfileRank on every rank: threads over the in-process transport, or one process per
// rank over a real one. Returns each rank's JSON, or the first rank's error.
absl::StatusOr<std::vector<std::string>> RunRanks(const ModelSpec& spec, const Plan& plan,
                                                  int N, const std::string& transport,
                                                  int repeat, double timeout, bool ping) {
  std::vector<std::string> reports(N), errors(N);
  if (transport == "inproc") {
    executor::InProcHub hub(N, executor::InProcOptions{.timeout_s = timeout});
    std::vector<std::thread> threads;
    for (int r = 0; r < N; ++r) {
      threads.emplace_back([&, r] {
        auto t = hub.Endpoint(r);
        absl::StatusOr<std::string> res = ProfileRank(spec, plan, r, t.get(), repeat, ping);
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
            t.ok() ? ProfileRank(spec, plan, r, t->get(), repeat, ping)
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

// The device: a GEMM's FLOP rate and a large copy's bandwidth, medians of a few runs.
std::pair<double, double> MeasureDevice() {
  constexpr int n = 256;
  Tensor a = Tensor::Random(n, n), b = Tensor::Random(n, n), c(n, n);
  std::vector<double> gemm, copy;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    c.noalias() = a * b;
    gemm.push_back(2.0 * n * n * n / Seconds(t0));
  }
  std::vector<char> src(64 << 20, 1), dst(64 << 20);
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(dst.data(), src.data(), src.size());
    copy.push_back(2.0 * static_cast<double>(src.size()) / Seconds(t0));
  }
  return {Median(gemm), Median(copy)};
}

// What a message costs in the engine itself (send and receive threads, mailbox hand-off
// included): for each consumer op whose input came from another rank and that sat idle while
// it travelled, consumer start - producer end. `reports` are ProfileRank's, by rank.
std::vector<double> MessageTimes(const Plan& plan, const std::vector<Json>& reports) {
  struct Times {
    double start, end, prev_end;
  };
  std::map<std::tuple<int, int, int, int>, Times> ops;  // (iteration, stage, mb, kind)
  for (const Json& j : reports) {
    for (const Json& x : j.at("ops")) {
      ops[{x.at(0).get<int>(), x.at(1).get<int>(), x.at(2).get<int>(), x.at(3).get<int>()}] =
          Times{x.at(4).get<double>(), x.at(5).get<double>(), x.at(6).get<double>()};
    }
  }
  const int S = plan.num_stages();
  std::vector<double> out;
  for (const auto& [key, c] : ops) {
    const auto [it, s, m, kind] = key;
    std::vector<std::tuple<int, int, int, int>> producers;
    if (kind == static_cast<int>(OpKind::kF) && s > 0 &&
        plan.stages[s - 1].device != plan.stages[s].device) {
      producers.push_back({it, s - 1, m, static_cast<int>(OpKind::kF)});
    }
    if ((kind == static_cast<int>(OpKind::kB) || kind == static_cast<int>(OpKind::kBW)) &&
        s + 1 < S && plan.stages[s + 1].device != plan.stages[s].device) {
      producers.push_back({it, s + 1, m, static_cast<int>(OpKind::kB)});
      producers.push_back({it, s + 1, m, static_cast<int>(OpKind::kBW)});
    }
    for (const auto& pk : producers) {
      auto p = ops.find(pk);
      if (p == ops.end() || !(c.prev_end < p->second.end)) continue;
      out.push_back(c.start - p->second.end);
    }
  }
  return out;
}

absl::StatusOr<std::vector<Json>> ParseReports(const std::vector<std::string>& reports) {
  std::vector<Json> parsed;
  for (const std::string& text : reports) {
    parsed.push_back(Json::parse(text, nullptr, /*allow_exceptions=*/false));
    if (parsed.back().is_discarded()) {
      return absl::InternalError("a rank's profile report is not valid JSON");
    }
  }
  return parsed;
}

// The measured iteration time of a run: per iteration the slowest rank's wall time, median.
double MedianIteration(const std::vector<Json>& reports) {
  std::vector<double> slowest;
  for (const Json& j : reports) {
    const Json& wall = j.at("wall");
    if (slowest.size() < wall.size()) slowest.resize(wall.size(), 0.0);
    for (size_t i = 0; i < wall.size(); ++i) {
      slowest[i] = std::max(slowest[i], wall[i].get<double>());
    }
  }
  return Median(slowest);
}

// The simulator's iteration time for `plan` on the measured files with message_cpu_s = c.
absl::StatusOr<double> Predict(const ModelGraph& model, Cluster cluster, const Plan& plan,
                               double c) {
  for (HardwareSpec& hw : cluster.hardware) hw.message_cpu_s = c;
  ASSIGN_OR_RETURN(ProblemBuilder builder,
                   ProblemBuilder::Create(model, cluster, CostModel(), plan.num_devices));
  ASSIGN_OR_RETURN(PipelineProblem problem, builder.Build(plan));
  ASSIGN_OR_RETURN(SimResult r, Simulate(problem, plan.schedule));
  return r.iteration_time_s;
}

double PhysicalMemory() {
  return static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

}  // namespace

absl::Status ValidateMeasuredProfile(const ModelGraph& model) {
  for (int i = 0; i < model.num_layers(); ++i) {
    const Layer& l = model.layers[i];
    const std::pair<const char*, const std::optional<double>*> times[] = {
        {"forward_s", &l.measured.forward_s},
        {"backward_input_s", &l.measured.backward_input_s},
        {"weight_grad_s", &l.measured.weight_grad_s},
        {"recompute_s", &l.measured.recompute_s}};
    for (const auto& [name, value] : times) {
      const std::string where = absl::StrCat("layers[", i, "] (", l.name, "): measured.", name);
      if (!value->has_value()) return absl::InvalidArgumentError(absl::StrCat(where, " is missing"));
      if (!(**value > 0) || !std::isfinite(**value)) {
        return absl::InvalidArgumentError(absl::StrCat(where, " must be > 0, got ", **value));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<double> FitMessageCpu(const ModelGraph& model, const Cluster& cluster,
                                     const Plan& light, double light_s, const Plan& heavy,
                                     double heavy_s, double max_c) {
  const double target = heavy_s / light_s;
  auto ratio = [&](double c) -> absl::StatusOr<double> {
    ASSIGN_OR_RETURN(double h, Predict(model, cluster, heavy, c));
    ASSIGN_OR_RETURN(double l, Predict(model, cluster, light, c));
    return h / l;
  };
  if (!(max_c > 0)) return 0.0;
  double lo = 0, hi = max_c;
  ASSIGN_OR_RETURN(double at_lo, ratio(lo));
  if (at_lo >= target) return 0.0;
  ASSIGN_OR_RETURN(double at_hi, ratio(hi));
  if (at_hi <= target) return hi;
  for (int i = 0; i < 40; ++i) {
    const double mid = 0.5 * (lo + hi);
    ASSIGN_OR_RETURN(double at_mid, ratio(mid));
    (at_mid < target ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

absl::StatusOr<LinkFit> FitLink(const std::vector<std::pair<double, double>>& samples) {
  const double n = static_cast<double>(samples.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : samples) {
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  const double den = n * sxx - sx * sx;
  if (samples.size() < 2 || !(den > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "link samples: need at least two distinct message sizes, got ", samples.size(), " samples"));
  }
  const double slope = (n * sxy - sx * sy) / den;
  LinkFit fit;
  if (slope > 0) {
    fit.bandwidth = 1 / slope;
    fit.latency_s = std::max(0.0, (sy - slope * sx) / n);
  } else {
    fit.bandwidth = std::numeric_limits<double>::infinity();
    fit.latency_s = std::max(0.0, sy / n);
  }
  return fit;
}

int RunProfile(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string model, prefix, transport = "gloo", check;
  int64_t ranks = 2, repeat = 5, microbatches = 0;
  double timeout = 60, memory = 0;
  bool pool = true;
  CommandLine flags("profile",
                "Measures the executor's reference model on this machine and transport: every\n"
                "layer's F, B, W, R seconds and bytes (PREFIX.model.json), the per-op overhead\n"
                "and the link's latency and bandwidth (PREFIX.cluster.json). Then plan with\n"
                "`octopipe plan --model=PREFIX.model.json --cluster=PREFIX.cluster.json`.");
  flags.String("model", &model, "ref:pattern=LETTERS,hidden=..,... (executor/model_spec.h)");
  flags.String("out", &prefix, "output prefix: writes PREFIX.model.json and PREFIX.cluster.json");
  flags.Int("ranks", &ranks, "pipeline ranks to measure on (processes, or threads for inproc)");
  flags.String("transport", &transport, "gloo, nccl, auto or inproc (as octopipe train)");
  flags.Int("repeat", &repeat, "measured iterations after one warm-up (median reported)");
  flags.Int("microbatches", &microbatches, "micro-batches per iteration; 0 = the spec's");
  flags.Bool("pool", &pool,
             "give layers the executor builds identically (same kind and shapes) the median of\n"
             "all their samples (less noise); --pool=false keeps each layer's own median");
  flags.Double("timeout", &timeout, "seconds a rank waits on a peer before failing");
  flags.Double("memory", &memory,
               "device memory in bytes to record and check the model against; 0 = this\n"
               "machine's physical memory / ranks");
  flags.String("check", &check,
               "only check a measured model file (every layer has F, B, W, R seconds > 0) and\n"
               "exit: 0 if it is a complete profile, 2 naming the first bad layer otherwise");
  if (absl::Status s = flags.Parse(args); !s.ok()) return Fail(err, s, 2);
  if (flags.help_requested()) {
    out << flags.Usage();
    return 0;
  }
  if (!check.empty()) {
    absl::StatusOr<ModelGraph> g = LoadModelArg(check);
    if (!g.ok()) return Fail(err, absl::InvalidArgumentError(absl::StrCat("--check: ", g.status().message())), 2);
    if (absl::Status s = ValidateMeasuredProfile(*g); !s.ok()) {
      return Fail(err, absl::InvalidArgumentError(absl::StrCat("--check: ", s.message())), 2);
    }
    out << check << ": a complete measured profile of " << g->num_layers() << " layers\n";
    return 0;
  }
  auto usage = [&](const std::string& msg) {
    return Fail(err, absl::InvalidArgumentError(msg), 2);
  };
  if (model.empty()) return usage("--model is required (ref:pattern=...)");
  if (prefix.empty()) return usage("--out is required (a path prefix)");
  if (ranks < 1) return usage(absl::StrCat("--ranks must be >= 1, got ", ranks));
  if (repeat < 1) return usage(absl::StrCat("--repeat must be >= 1, got ", repeat));
  if (transport != "gloo" && transport != "nccl" && transport != "auto" && transport != "inproc") {
    return usage(absl::StrCat("--transport must be gloo, nccl, auto or inproc, got '", transport, "'"));
  }
  absl::StatusOr<ModelSpec> spec = executor::ParseModelSpec(model);
  if (!spec.ok()) return usage(absl::StrCat("--model: ", spec.status().message()));
  {
    // Fail before measuring, not after, when the files cannot be written there.
    const std::filesystem::path dir =
        std::filesystem::path(ResolvePath(prefix + ".model.json")).parent_path();
    std::error_code ec;
    if (!dir.empty() && !std::filesystem::is_directory(dir, ec)) {
      return usage(absl::StrCat("--out: '", dir.string(), "' is not a directory"));
    }
  }
  if (microbatches > 0) spec->microbatches = static_cast<int>(microbatches);
  const auto started = std::chrono::steady_clock::now();

  // What the executor holds, and whether it fits.
  absl::StatusOr<std::vector<LayerBytes>> bytes = MeasureBytes(*spec);
  if (!bytes.ok()) {
    return usage(absl::StrCat("--model: the executor cannot build it: ", bytes.status().message()));
  }
  const double device_memory = memory > 0 ? memory : PhysicalMemory() / static_cast<double>(ranks);
  double need = 0;  // all on one device, as a bound: weights + grads + AdamW state + activations
  for (const LayerBytes& b : *bytes) need += 4 * b.params + spec->microbatches * std::max(b.after_f, b.after_b);
  if (need / static_cast<double>(ranks) > device_memory) {
    return Fail(err, absl::ResourceExhaustedError(absl::StrFormat(
                         "--model needs about %.0f bytes per rank (weights, gradients, AdamW state "
                         "and %d micro-batches of activations over %d ranks) but a device has %.0f",
                         need / ranks, spec->microbatches, ranks, device_memory)),
                3);
  }
  const ModelGraph graph = executor::ToModelGraph(*spec);
  absl::StatusOr<Plan> plan =
      ProfilePlan(static_cast<int>(ranks), spec->microbatches, graph, /*recompute=*/false);
  if (!plan.ok()) return usage(absl::StrCat("--ranks: ", plan.status().message()));
  absl::StatusOr<Plan> plan_r =
      ProfilePlan(static_cast<int>(ranks), spec->microbatches, graph, /*recompute=*/true);
  if (!plan_r.ok()) return usage(absl::StrCat("--ranks: ", plan_r.status().message()));

  // Phase 1: F, B, W, the per-op overhead, the messages and the ping-pong; phase 2: R.
  std::map<std::pair<int, int>, std::vector<double>> samples;  // (layer, kind) -> per iteration
  std::vector<double> overhead;
  std::vector<std::pair<double, double>> link;
  std::vector<double> message_s;  // producer end -> consumer start, consumer idle meanwhile
  double light_s = 0;              // the profile run's median iteration
  for (int phase = 0; phase < 2; ++phase) {
    absl::StatusOr<std::vector<std::string>> reports =
        RunRanks(*spec, phase == 0 ? *plan : *plan_r, static_cast<int>(ranks), transport,
                 static_cast<int>(repeat), timeout, /*ping=*/phase == 0);
    if (!reports.ok()) return Fail(err, reports.status(), 1);
    absl::StatusOr<std::vector<Json>> parsed_or = ParseReports(*reports);
    if (!parsed_or.ok()) return Fail(err, parsed_or.status(), 1);
    const std::vector<Json>& parsed = *parsed_or;
    for (const Json& j : parsed) {
      for (const Json& v : j.at("layers")) {
        const int kind = v.at(2).get<int>();
        if ((phase == 1) != (kind == static_cast<int>(OpKind::kR))) continue;
        samples[{v.at(1).get<int>(), kind}].push_back(v.at(3).get<double>());
      }
      if (phase == 1) continue;
      for (const Json& v : j.at("overhead")) overhead.push_back(v.get<double>());
      for (const Json& v : j.at("link")) link.push_back({v.at(0).get<double>(), v.at(1).get<double>()});
    }
    if (phase == 0) {
      message_s = MessageTimes(*plan, parsed);
      light_s = MedianIteration(parsed);
    }
  }

  // Layers the executor builds identically (same kind and shapes) cost the same: with --pool
  // each gets the median of all their samples, which is less noisy than any one layer's.
  std::map<int, int> pooled_over;  // layer -> how many layers its figures pool
  if (pool) {
    std::map<std::tuple<int, double, double, double, double, double>, std::vector<int>> groups;
    for (int l = 0; l < graph.num_layers(); ++l) {
      const LayerBytes& b = (*bytes)[l];
      groups[{static_cast<int>(graph.layers[l].kind), b.params, b.after_f, b.after_b, b.input,
              b.output}]
          .push_back(l);
    }
    for (const auto& [signature, members] : groups) {
      if (members.size() < 2) continue;
      for (OpKind k : kLayerKinds) {
        std::vector<double> all;
        for (int l : members) {
          auto it = samples.find({l, static_cast<int>(k)});
          if (it != samples.end()) all.insert(all.end(), it->second.begin(), it->second.end());
        }
        for (int l : members) {
          if (samples.count({l, static_cast<int>(k)})) samples[{l, static_cast<int>(k)}] = all;
        }
      }
      for (int l : members) pooled_over[l] = static_cast<int>(members.size());
    }
  }

  // The model file.
  ModelGraph measured = graph;
  measured.name = absl::StrCat("measured-", spec->pattern);
  measured.source = absl::StrCat("octopipe profile of ", model, " over ", transport, " with ",
                                 ranks, " ranks, median of ", repeat, " iterations",
                                 pool ? ", identical layers pooled" : "");
  TextTable table({"layer", "F", "B", "W", "R", "spread", "act after F", "after B", "params"});
  double worst_spread = 0;
  for (int l = 0; l < measured.num_layers(); ++l) {
    Layer& layer = measured.layers[l];
    const LayerBytes& b = (*bytes)[l];
    std::vector<std::string> row = {
        pooled_over.count(l) ? absl::StrCat(layer.name, " (x", pooled_over[l], ")") : layer.name};
    double spread = 0;
    for (OpKind k : kLayerKinds) {
      auto it = samples.find({l, static_cast<int>(k)});
      if (it == samples.end()) continue;
      const double m = Median(it->second);
      spread = std::max(spread, Spread(it->second));
      switch (k) {
        case OpKind::kF: layer.measured.forward_s = m; break;
        case OpKind::kB: layer.measured.backward_input_s = m; break;
        case OpKind::kW: layer.measured.weight_grad_s = m; break;
        default: layer.measured.recompute_s = m; break;
      }
      row.push_back(FormatSeconds(m));
    }
    worst_spread = std::max(worst_spread, spread);
    layer.measured.activation_bytes = b.after_f;
    layer.measured.activation_bytes_w = b.after_b;
    layer.measured.input_bytes = b.input;
    layer.measured.output_bytes = b.output;
    layer.measured.param_bytes = b.params;
    while (row.size() < 5) row.push_back("-");
    row.push_back(FormatPercent(spread));
    for (double v : {b.after_f, b.after_b, b.params}) row.push_back(absl::StrFormat("%.0f", v));
    table.AddRow(row);
  }
  if (absl::Status s = ValidateMeasuredProfile(measured); !s.ok()) return Fail(err, s, 1);

  // The cluster file.
  const auto [flops, copy_bandwidth] = MeasureDevice();
  LinkSpec link_spec{std::numeric_limits<double>::infinity(), 0};
  double pingpong_latency = 0;
  if (!link.empty()) {
    absl::StatusOr<LinkFit> fit = FitLink(link);
    if (!fit.ok()) return Fail(err, fit.status(), 1);
    link_spec = LinkSpec{fit->bandwidth, fit->latency_s};
    pingpong_latency = fit->latency_s;
  }
  // The engine's messages cost more than the transport's ping-pong (thread hand-offs on both
  // sides): the latency is what the engine's own messages took beyond bytes / bandwidth.
  const double message_bytes = (*bytes)[0].output;
  if (message_s.size() >= 3) {
    const double transfer = std::isinf(link_spec.bandwidth) ? 0 : message_bytes / link_spec.bandwidth;
    link_spec.latency_s = std::max(0.0, Median(message_s) - transfer);
  }
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  Cluster cluster;
  cluster.name = absl::StrCat("measured-", host, "-", transport);
  HardwareSpec hw;
  hw.name = "measured-executor";
  hw.peak_flops = flops;
  hw.memory_bytes = device_memory;
  hw.memory_bandwidth = copy_bandwidth;
  hw.op_overhead_s = Median(overhead);
  cluster.hardware.push_back(hw);
  cluster.nodes.push_back(Node{host, hw.name, static_cast<int>(ranks), link_spec});
  cluster.inter_node_link = link_spec;

  // Phase 3: a message-heavy run (interleaved, 2 stages per rank, every boundary between ranks)
  // fits the per-message CPU cost against the profile run.
  std::string message_fit = "not fitted (needs 2 ranks and 2 layers per stage)";
  if (ranks >= 2) {
    absl::StatusOr<Plan> heavy = ClassicPlan(ScheduleKind::kInterleaved, static_cast<int>(ranks),
                                             2, spec->microbatches, graph);
    if (heavy.ok()) {
      // Noise on a shared machine only ever slows a run down: each plan's fastest of a few
      // interleaved runs is the estimate.
      double heavy_s = std::numeric_limits<double>::infinity();
      const int iterations = static_cast<int>(std::max<int64_t>(3, repeat / 2));
      for (int round = 0; round < kMessageFitRounds; ++round) {
        for (const Plan* p : {&*heavy, &*plan}) {
          absl::StatusOr<std::vector<std::string>> reports = RunRanks(
              *spec, *p, static_cast<int>(ranks), transport, iterations, timeout, /*ping=*/false);
          if (!reports.ok()) return Fail(err, reports.status(), 1);
          absl::StatusOr<std::vector<Json>> parsed = ParseReports(*reports);
          if (!parsed.ok()) return Fail(err, parsed.status(), 1);
          double& best = p == &*heavy ? heavy_s : light_s;
          best = std::min(best, MedianIteration(*parsed));
        }
      }
      // A burst of noise on one run could fit any cost: a message's CPU at one end is bounded
      // by kMessageCpuCap times what the engine's own messages took to arrive at an idle rank.
      const double cap =
          message_s.size() >= 3 ? std::max(0.0, kMessageCpuCap * Median(message_s)) : 0.01;
      absl::StatusOr<double> c =
          FitMessageCpu(measured, cluster, *plan, light_s, *heavy, heavy_s, cap);
      if (!c.ok()) return Fail(err, c.status(), 1);
      cluster.hardware[0].message_cpu_s = *c;
      if (*c >= cap * (1 - 1e-6)) {
        err << "octopipe profile: warning: the per-message CPU fit hit its bound ("
            << FormatSeconds(cap) << ", " << kMessageCpuCap
            << "x the engine's message time): the runs were probably disturbed by other load; "
               "profile again on a quiet machine\n";
      }
      message_fit = absl::StrCat("fitted from ", heavy->num_stages(), "-stage interleaved runs (",
                                 FormatSeconds(heavy_s), ", fastest of ", kMessageFitRounds,
                                 ") against the profile's plan (", FormatSeconds(light_s),
                                 ", fastest of ", kMessageFitRounds + 1, ")");
    }
  }

  const std::string model_path = ResolvePath(prefix + ".model.json");
  const std::string cluster_path = ResolvePath(prefix + ".cluster.json");
  if (absl::Status s = WriteModelFile(model_path, measured); !s.ok()) return Fail(err, s, 1);
  if (absl::Status s = WriteClusterFile(cluster_path, cluster); !s.ok()) return Fail(err, s, 1);

  out << "profiled " << model << " on " << ranks << " ranks over " << transport << ": "
      << repeat << " measured iterations of " << spec->microbatches << " micro-batches (median; "
      << "spread = (max - min) / median; (xN): pooled over N identical layers)\n\n"
      << table.Render() << "\n"
      << "per-op executor overhead " << FormatSeconds(hw.op_overhead_s) << " (spread "
      << FormatPercent(Spread(overhead)) << "); largest layer spread "
      << FormatPercent(worst_spread) << "\n"
      << "link: latency " << FormatSeconds(link_spec.latency_s) << ", bandwidth "
      << absl::StrFormat("%.3g", link_spec.bandwidth) << " B/s (fitted over " << link.size()
      << " message sizes; ping-pong latency " << FormatSeconds(pingpong_latency) << ", the "
      << "engine's " << message_s.size() << " messages " << FormatSeconds(Median(message_s))
      << " median)\n"
      << "per-message CPU cost " << FormatSeconds(cluster.hardware[0].message_cpu_s) << " at each end, "
      << message_fit << "\n"
      << "device: " << absl::StrFormat("%.3g", flops) << " FLOP/s (GEMM), "
      << absl::StrFormat("%.3g", copy_bandwidth) << " B/s copy, "
      << absl::StrFormat("%.3g", device_memory) << " bytes\n"
      << "wrote " << model_path << " and " << cluster_path << " in "
      << absl::StrFormat("%.1f", Seconds(started)) << " s\n";
  return 0;
}

}  // namespace octopipe::cli
