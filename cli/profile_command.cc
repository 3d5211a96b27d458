#include "cli/profile_command.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/numbers.h"
#include "cli/command_line.h"
#include "cli/inputs.h"
#include "cli/profile_measure.h"
#include "cli/profile_ranks.h"
#include "cli/table.h"
#include "core/convert.h"
#include "core/cost_model.h"
#include "core/json_text.h"
#include "core/status_macros.h"
#include "executor/engine.h"
#include "executor/host_probe.h"
#include "executor/layout_trainer.h"
#include "executor/model_spec.h"
#include "executor/reference_trainer.h"
#include "executor/trainer.h"
#include "simulator/classic_pipeline.h"
#include "simulator/evaluator.h"
#include "simulator/problem_builder.h"
#include "executor/transport_factory.h"

namespace octopipe::cli {
namespace {

using executor::ModelSpec;
using executor::Tensor;

constexpr OpKind kLayerKinds[] = {OpKind::kF, OpKind::kB, OpKind::kW, OpKind::kR};
// Pairs of adjacent runs (heavy, light) whose median ratio the per-message CPU fit matches.
constexpr int kMessageFitRounds = 3;
// Attempts at the message-cost fit when it hits its bound (disturbed runs), each adding
// kMessageFitRounds runs of both plans.
constexpr int kMessageFitAttempts = 3;
// The per-message CPU cost is at most this many times the engine's median message time.
constexpr double kMessageCpuCap = 4;

int Fail(std::ostream& err, const absl::Status& s, int code) {
  err << "octopipe profile: error: " << s.message() << "\n";
  return code;
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
    out[l].params = static_cast<double>(executor::ParamBytes(*layers[l]));
  }
  Tensor dy = Tensor::Constant(1, 1, 1.0f);
  for (int l = L - 1; l >= 0; --l) {
    dy = layers[l]->BackwardInput(dy, mb, &ctx[l]);
    out[l].after_b = static_cast<double>(executor::ContextBytes(ctx[l]));
  }
  return out;
}

// The buckets the gradient all-reduce is timed on: every layer's gradient in descending layer
// order, as the data-parallel sync runs them, and half the largest (so the fit sees two sizes
// when every layer has the same). A bucket is at most 16 MiB (a larger layer's is cut to it),
// and a layer that would take the buckets beyond 64 MiB together is left out: each rank holds
// them all at once (inproc ranks in one process).
std::vector<size_t> AllReduceBuckets(const std::vector<LayerBytes>& bytes) {
  constexpr double kMaxBucket = 16.0 * 1024 * 1024, kMaxTotal = 64.0 * 1024 * 1024;
  std::vector<size_t> out;
  double total = 0, largest = 0;
  for (auto b = bytes.rbegin(); b != bytes.rend(); ++b) {
    const double size = std::min(b->params, kMaxBucket);
    if (size < sizeof(float) || total + size > kMaxTotal) continue;
    out.push_back(static_cast<size_t>(size) / sizeof(float) * sizeof(float));
    total += size;
    largest = std::max(largest, size);
  }
  if (largest >= 2 * sizeof(float)) {
    out.push_back(static_cast<size_t>(largest / 2) / sizeof(float) * sizeof(float));
  }
  return out;
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

double PhysicalMemory() {
  return static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

}  // namespace

absl::Status ValidateMeasuredProfile(const ModelGraph& model) {
  for (int i = 0; i < model.num_layers(); ++i) {
    const Layer& l = model.layers[i];
    // Measured split at some (TP, EP): every layer it applies to (EP > 1: the MoE layers).
    for (const Layer& other : model.layers) {
      for (const MeasuredSharded& a : other.measured.sharded) {
        if (a.ep_degree > 1 && l.kind != LayerKind::kMoe) continue;
        if (l.measured.Sharded(a.tp_degree, a.ep_degree, l.kind == LayerKind::kMoe) == nullptr) {
          return absl::InvalidArgumentError(absl::StrCat(
              "layers[", i, "] (", l.name, "): measured.sharded has no entry for TP ",
              a.tp_degree, " x EP ", a.ep_degree, " (", other.name, " has one)"));
        }
      }
    }
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

namespace {

// The command's flags, with their defaults.
void DefineFlags(CommandLine& flags, ProfileFlags* f) {
  flags.String("model", &f->model, "ref:pattern=LETTERS,hidden=..,... (executor/model_spec.h)");
  flags.String("out", &f->prefix, "output prefix: writes PREFIX.model.json and PREFIX.cluster.json");
  flags.Int("ranks", &f->ranks, "pipeline ranks to measure on (processes, or threads for inproc)");
  flags.String("transport", &f->transport, "gloo, nccl, auto or inproc (as octopipe train)");
  flags.Int("repeat", &f->repeat, "measured iterations after one warm-up (median reported)");
  flags.Int("microbatches", &f->microbatches, "micro-batches per iteration; 0 = the spec's");
  flags.Int("max_launches", &f->max_launches,
            "the F/B/W runs are launched afresh (ranks mirrored every other launch, so each\n"
            "layer is timed on every rank) at least twice and until the model's summed layer\n"
            "medians move by at most --stable; at most this many launches");
  flags.Double("stable", &f->stable,
               "relative change of the summed per-layer medians between launches that counts\n"
               "as settled (0.02 = 2%)");
  flags.Bool("pool", &f->pool,
             "give layers the executor builds identically (same kind and shapes) the median of\n"
             "all their samples (less noise); --pool=false keeps each layer's own median");
  flags.Double("timeout", &f->timeout, "seconds a rank waits on a peer before failing");
  flags.Double("rotate_cores_ms", &f->rotate_cores_ms,
               "every this many ms, move each rank's computing thread to the next CPU (as\n"
               "`octopipe train --rotate_cores_ms`: profile and runs then both see the mean\n"
               "core where the cores differ); 0 = off");
  flags.Double("memory", &f->memory,
               "device memory in bytes to record and check the model against; 0 = this\n"
               "machine's physical memory / ranks");
  flags.String("tp", &f->tp,
               "tensor-parallel degrees to measure the layers split at as well (each layer's\n"
               "F, B, W, R per TP rank with its all-reduces, run as `train` runs a TP layout:\n"
               "PP ranks/d x TP d; written as measured.sharded, which plans at that degree use\n"
               "instead of the whole layer's times / d): a comma-separated list of degrees\n"
               "that divide --ranks, `auto` (every power of two from 2 to --ranks that divides\n"
               "it and the model's layers allow) or `off`");
  flags.String("ep", &f->ep,
               "expert-parallel degrees to measure the MoE layers at as well (F, B, W, R per rank\n"
               "with the dispatch and combine all-to-alls, run as PP ranks/d x DP d x EP d, each\n"
               "replica --microbatches / d micro-batches): a list of degrees dividing --ranks,\n"
               "the experts and the micro-batches, `auto` (every such power of two; none for a\n"
               "model without MoE layers) or `off`");
  flags.String("check", &f->check,
               "only check a measured model file (every layer has F, B, W, R seconds > 0) and\n"
               "exit: 0 if it is a complete profile, 2 naming the first bad layer otherwise");
}

// --check: exit 0 when `path` is a complete measured profile, 2 naming the first bad layer.
int CheckProfileFile(const std::string& path, std::ostream& out, std::ostream& err) {
  absl::StatusOr<ModelGraph> g = LoadModelArg(path);
  if (!g.ok()) return Fail(err, absl::InvalidArgumentError(absl::StrCat("--check: ", g.status().message())), 2);
  if (absl::Status s = ValidateMeasuredProfile(*g); !s.ok()) {
    return Fail(err, absl::InvalidArgumentError(absl::StrCat("--check: ", s.message())), 2);
  }
  out << path << ": a complete measured profile of " << g->num_layers() << " layers\n";
  return 0;
}

// The model spec the flags name, with --microbatches applied; kInvalidArgument with the usage
// error (exit 2) for a missing or bad flag, or an --out whose directory does not exist (checked
// before measuring, not after).
absl::StatusOr<ModelSpec> SpecFromFlags(const ProfileFlags& f) {
  auto usage = [](const std::string& msg) { return absl::InvalidArgumentError(msg); };
  if (f.model.empty()) return usage("--model is required (ref:pattern=...)");
  if (f.prefix.empty()) return usage("--out is required (a path prefix)");
  if (f.ranks < 1) return usage(absl::StrCat("--ranks must be >= 1, got ", f.ranks));
  if (f.repeat < 1) return usage(absl::StrCat("--repeat must be >= 1, got ", f.repeat));
  if (f.max_launches < 1) {
    return usage(absl::StrCat("--max_launches must be >= 1, got ", f.max_launches));
  }
  if (!(f.stable >= 0)) return usage(absl::StrCat("--stable must be >= 0, got ", f.stable));
  if (!(f.rotate_cores_ms >= 0)) {
    return usage(absl::StrCat("--rotate_cores_ms must be >= 0 (0 = off), got ", f.rotate_cores_ms));
  }
  if (absl::StatusOr<executor::TransportKind> kind = executor::ParseTransportKind(f.transport);
      !kind.ok()) {
    return usage(absl::StrCat("--", kind.status().message()));
  }
  absl::StatusOr<ModelSpec> spec = executor::ParseModelSpec(f.model);
  if (!spec.ok()) return usage(absl::StrCat("--model: ", spec.status().message()));
  const std::filesystem::path dir =
      std::filesystem::path(ResolvePath(f.prefix + ".model.json")).parent_path();
  std::error_code ec;
  if (!dir.empty() && !std::filesystem::is_directory(dir, ec)) {
    return usage(absl::StrCat("--out: '", dir.string(), "' is not a directory"));
  }
  if (f.microbatches > 0) spec->microbatches = static_cast<int>(f.microbatches);
  return spec;
}

// The device memory to record (--memory, or this machine's physical memory / ranks), or
// kResourceExhausted (exit 3) when the model cannot fit it — as a bound, everything on one
// device: weights, gradients, AdamW state and the micro-batches' activations, over the ranks.
absl::StatusOr<double> DeviceMemoryFor(const ModelSpec& spec, const std::vector<LayerBytes>& bytes,
                                       const ProfileFlags& f) {
  const int64_t ranks = f.ranks;
  const double device_memory =
      f.memory > 0 ? f.memory : PhysicalMemory() / static_cast<double>(ranks);
  double need = 0;
  for (const LayerBytes& b : bytes) need += 4 * b.params + spec.microbatches * std::max(b.after_f, b.after_b);
  if (need / static_cast<double>(ranks) > device_memory) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "--model needs about %.0f bytes per rank (weights, gradients, AdamW state "
        "and %d micro-batches of activations over %d ranks) but a device has %.0f",
        need / ranks, spec.microbatches, ranks, device_memory));
  }
  return device_memory;
}

// Layers the executor builds identically (same kind and shapes) cost the same: each gets the
// median of all their samples, which is less noisy than any one layer's (--pool). Returns
// layer -> how many layers its figures pool.
std::map<int, int> PoolIdenticalLayers(const ModelGraph& graph, const std::vector<LayerBytes>& bytes,
                                       std::map<std::pair<int, int>, std::vector<double>>* samples) {
  std::map<int, int> pooled_over;
  std::map<std::tuple<int, double, double, double, double, double>, std::vector<int>> groups;
  for (int l = 0; l < graph.num_layers(); ++l) {
    const LayerBytes& b = bytes[l];
    groups[{static_cast<int>(graph.layers[l].kind), b.params, b.after_f, b.after_b, b.input,
            b.output}]
        .push_back(l);
  }
  for (const auto& [signature, members] : groups) {
    if (members.size() < 2) continue;
    for (OpKind k : kLayerKinds) {
      std::vector<double> all;
      for (int l : members) {
        auto it = samples->find({l, static_cast<int>(k)});
        if (it != samples->end()) all.insert(all.end(), it->second.begin(), it->second.end());
      }
      for (int l : members) {
        if (samples->count({l, static_cast<int>(k)})) (*samples)[{l, static_cast<int>(k)}] = all;
      }
    }
    for (int l : members) pooled_over[l] = static_cast<int>(members.size());
  }
  return pooled_over;
}

// The measured model file (each layer's medians and the executor's bytes) and its table.
struct MeasuredModel {
  ModelGraph model;
  TextTable table{{"layer", "F", "B", "W", "R", "spread", "act after F", "after B", "params"}};
  // Per split (tp, ep): each layer's times and their F+B+W against the whole layer's / tp.
  std::map<std::pair<int, int>, TextTable> split;
  double worst_spread = 0;
};

MeasuredModel MeasuredModelFile(const ModelGraph& graph, const ModelSpec& spec,
                                const std::vector<LayerBytes>& bytes, const Measurements& m,
                                const std::map<int, int>& pooled_over, const ProfileFlags& f) {
  MeasuredModel out;
  ModelGraph& measured = out.model;
  measured = graph;
  measured.name = absl::StrCat("measured-", spec.pattern);
  measured.source = absl::StrCat("octopipe profile of ", f.model, " over ", f.transport, " with ",
                                 f.ranks, " ranks, median of ", m.launches, " launches x ",
                                 f.repeat, " iterations",
                                 f.pool ? ", identical layers pooled" : "");
  for (const auto& [split, samples] : m.split) {
    absl::StrAppend(&measured.source, split == m.split.begin()->first ? ", also at " : ", ",
                    SplitName(split));
  }
  for (int l = 0; l < measured.num_layers(); ++l) {
    Layer& layer = measured.layers[l];
    const LayerBytes& b = bytes[l];
    auto pooled = pooled_over.find(l);
    std::vector<std::string> row = {pooled != pooled_over.end()
                                        ? absl::StrCat(layer.name, " (x", pooled->second, ")")
                                        : layer.name};
    double spread = 0;
    for (OpKind k : kLayerKinds) {
      auto it = m.samples.find({l, static_cast<int>(k)});
      if (it == m.samples.end()) continue;
      const double median = Median(it->second);
      spread = std::max(spread, Spread(it->second));
      switch (k) {
        case OpKind::kF: layer.measured.forward_s = median; break;
        case OpKind::kB: layer.measured.backward_input_s = median; break;
        case OpKind::kW: layer.measured.weight_grad_s = median; break;
        default: layer.measured.recompute_s = median; break;
      }
      row.push_back(FormatSeconds(median));
    }
    out.worst_spread = std::max(out.worst_spread, spread);
    layer.measured.activation_bytes = b.after_f;
    layer.measured.activation_bytes_w = b.after_b;
    layer.measured.input_bytes = b.input;
    layer.measured.output_bytes = b.output;
    layer.measured.param_bytes = b.params;
    while (row.size() < 5) row.push_back("-");
    row.push_back(FormatPercent(spread));
    for (double v : {b.after_f, b.after_b, b.params}) row.push_back(absl::StrFormat("%.0f", v));
    out.table.AddRow(row);
  }
  for (const auto& [split, samples] : m.split) {
    const auto [tp, ep] = split;
    TextTable& t = out.split
                       .emplace(split, TextTable({"layer", "F", "B", "W", "R",
                                                  absl::StrCat("F+B+W vs whole / ", tp),
                                                  "act after F", "after B", "params"}))
                       .first->second;
    for (int l = 0; l < measured.num_layers(); ++l) {
      Layer& layer = measured.layers[l];
      if (ep > 1 && layer.kind != LayerKind::kMoe) continue;  // EP splits only MoE layers
      double v[4] = {0, 0, 0, 0};
      bool complete = true;
      for (int k = 0; k < 4; ++k) {
        auto it = samples.find({l, static_cast<int>(kLayerKinds[k])});
        if (it == samples.end() || it->second.empty()) {
          complete = false;
          break;
        }
        v[k] = Median(it->second);
      }
      if (!complete) continue;  // ValidateMeasuredProfile names what is missing
      MeasuredSharded entry{tp, ep, v[0], v[1], v[2], v[3]};
      if (auto b = m.split_bytes.find(split); b != m.split_bytes.end()) {
        if (auto at = b->second.find(l); at != b->second.end()) {
          entry.activation_bytes = at->second.after_f;
          entry.activation_bytes_w = at->second.after_b;
          entry.param_bytes = at->second.params;
        }
      }
      layer.measured.sharded.push_back(entry);
      const double whole = *layer.measured.forward_s + *layer.measured.backward_input_s +
                           *layer.measured.weight_grad_s;
      t.AddRow({layer.name, FormatSeconds(v[0]), FormatSeconds(v[1]), FormatSeconds(v[2]),
                FormatSeconds(v[3]), absl::StrFormat("%.2fx", (v[0] + v[1] + v[2]) / (whole / tp)),
                absl::StrFormat("%.0f", entry.activation_bytes),
                absl::StrFormat("%.0f", entry.activation_bytes_w),
                absl::StrFormat("%.0f", entry.param_bytes)});
    }
  }
  // The host-speed reference a run's probe is compared with: the probe's workload by the
  // medians just written (executor/host_probe.h says why not the probe's own few samples).
  measured.host_probe_s = executor::ProbeWorkloadSeconds(measured);
  return out;
}

// The measured cluster file: one node of --ranks devices with the GEMM rate, copy bandwidth,
// memory and per-op overhead, the link fitted over the ping-pong's message sizes, and the
// all-reduce's bus bandwidth and step latency fitted over its sizes (LinkSpec).
struct MeasuredCluster {
  Cluster cluster;
  double flops = 0, copy_bandwidth = 0;
  double pingpong_latency = 0;
};

absl::StatusOr<MeasuredCluster> MeasuredClusterFile(const Measurements& m,
                                                    const std::vector<LayerBytes>& bytes,
                                                    double device_memory, const ProfileFlags& f) {
  MeasuredCluster out;
  std::tie(out.flops, out.copy_bandwidth) = MeasureDevice();
  LinkSpec link_spec{std::numeric_limits<double>::infinity(), 0};
  if (!m.link.empty()) {
    ASSIGN_OR_RETURN(LinkFit fit, FitLink(m.link));
    link_spec = LinkSpec{fit.bandwidth, fit.latency_s};
    out.pingpong_latency = fit.latency_s;
  }
  // The engine's messages cost more than the transport's ping-pong (thread hand-offs on both
  // sides): the latency is what the engine's own messages took beyond bytes / bandwidth.
  const double message_bytes = bytes[0].output;
  if (m.message_s.size() >= 3) {
    const double transfer = std::isinf(link_spec.bandwidth) ? 0 : message_bytes / link_spec.bandwidth;
    link_spec.latency_s = std::max(0.0, Median(m.message_s) - transfer);
  }
  // seconds = a + bytes / b over the all-reduce's sizes; a ring of n moves 2 (n - 1) / n of the
  // bytes in 2 (n - 1) steps, so the bus bandwidth is that share of b (for n = 2, b itself) and
  // each step's latency a / (2 (n - 1)).
  // A fitted step latency of 0 (FitLink clamps a negative intercept) is written as 0, which
  // reads as "the link's latency": a few tens of microseconds more per call, where the fit
  // found none. Samples of one size (no fit) leave both fields out.
  const double n = static_cast<double>(f.ranks);
  auto ring = [n](const std::vector<std::pair<double, double>>& samples)
      -> std::optional<std::pair<double, double>> {  // bus bandwidth, step latency
    absl::StatusOr<LinkFit> fit = FitLink(samples);  // none without two sizes
    if (!fit.ok()) return std::nullopt;
    return std::pair{2 * (n - 1) / n * fit->bandwidth, fit->latency_s / (2 * (n - 1))};
  };
  if (auto idle = ring(m.allreduce)) {
    std::tie(link_spec.allreduce_bandwidth, link_spec.allreduce_latency_s) = *idle;
    // The same fit of the all-reduces timed while every rank computed: the overlapped
    // figures, never faster than the idle ones (compute does not speed the collective up; a
    // noisy fit may say so).
    if (auto busy = ring(m.allreduce_overlapped)) {
      link_spec.allreduce_overlapped_bandwidth = std::min(idle->first, busy->first);
      link_spec.allreduce_overlapped_latency_s = std::max(idle->second, busy->second);
    }
  }
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  Cluster& cluster = out.cluster;
  cluster.name = absl::StrCat("measured-", host, "-", f.transport);
  cluster.executor_ranks = true;  // the devices are this executor's ranks
  HardwareSpec hw;
  hw.name = "measured-executor";
  hw.peak_flops = out.flops;
  hw.memory_bytes = device_memory;
  hw.memory_bandwidth = out.copy_bandwidth;
  hw.op_overhead_s = Median(m.overhead);
  cluster.hardware.push_back(hw);
  cluster.nodes.push_back(Node{host, hw.name, static_cast<int>(f.ranks), link_spec});
  cluster.inter_node_link = link_spec;
  return out;
}

// Phase 3: a message-heavy run (interleaved, 2 stages per rank, every boundary between ranks)
// fits the per-message CPU cost against the profile run (`plan`) and sets it on the cluster's
// hardware. Returns how it was fitted, or why not, for the summary; warns on `err` when the fit
// hits its bound.
absl::StatusOr<std::string> FitMessageCost(const ModelSpec& spec, const ModelGraph& graph,
                                           const ModelGraph& measured, const Plan& plan,
                                           const ProfileFlags& f, Measurements* m,
                                           Cluster* cluster, std::ostream& err) {
  if (f.ranks < 2) return std::string("not fitted (needs 2 ranks and 2 layers per stage)");
  absl::StatusOr<Plan> heavy = ClassicPlan(ScheduleKind::kInterleaved, static_cast<int>(f.ranks),
                                           2, spec.microbatches, graph);
  if (!heavy.ok()) return std::string("not fitted (needs 2 ranks and 2 layers per stage)");
  double heavy_s = std::numeric_limits<double>::infinity();
  const int iterations = static_cast<int>(std::max<int64_t>(3, f.repeat / 2));
  // A burst of noise on one run could fit any cost: a message's CPU at one end is bounded by
  // kMessageCpuCap times the larger of what the engine's own messages took to arrive at an
  // idle rank and the CPU the ranks' other threads spent per message (measured directly:
  // since messages start without threads of their own they arrive in ~55 us, and a bound of
  // 4x that alone was below the fit on a quiet machine — every attempt hit it).
  const double per_message = std::max(m->message_s.size() >= 3 ? Median(m->message_s) : 0.0,
                                      m->comm_cpu.empty() ? 0.0 : Median(m->comm_cpu));
  const double cap = per_message > 0 ? kMessageCpuCap * per_message : 0.01;
  double c = 0;
  int attempts = 0;
  std::vector<double> ratios;  // heavy / light of each pair of adjacent runs, over all attempts
  // A fit at its bound means the runs were disturbed (a quiet machine fits 0.1-0.3 ms where
  // the bound is ~1 ms), and the bound would inflate every message-heavy prediction by 20-40%:
  // measure again (the fastest runs over all attempts), up to kMessageFitAttempts times.
  for (; attempts < kMessageFitAttempts; ++attempts) {
    if (attempts > 0) {
      err << "octopipe profile: the per-message CPU fit hit its bound ("
          << FormatSeconds(cap) << "): the runs were disturbed; measuring again ("
          << attempts + 1 << " of " << kMessageFitAttempts << ")\n";
    }
    for (int round = 0; round < kMessageFitRounds; ++round) {
      // Paired runs, the order alternating: the machine's speed drifts on a shared host, and
      // the ratio of two adjacent runs cancels what they share.
      double pair[2] = {0, 0};  // heavy, light
      for (int k = 0; k < 2; ++k) {
        const bool run_heavy = (k == 0) == (round % 2 == 0);
        ASSIGN_OR_RETURN(std::vector<std::string> reports,
                         RunProfileRanks(spec, run_heavy ? *heavy : plan, Launch(f), iterations,
                                  /*ping=*/false));
        ASSIGN_OR_RETURN(std::vector<Json> parsed, ParseReports(reports));
        pair[run_heavy ? 0 : 1] = MedianIteration(parsed);
      }
      heavy_s = std::min(heavy_s, pair[0]);
      m->light_s = std::min(m->light_s, pair[1]);
      ratios.push_back(pair[0] / pair[1]);
    }
    // The pairs' ratios scatter by several percent on a shared host: for one model over four
    // profiles 1.00-1.04, the fit 0-360 us, while the ranks' communication threads used the same
    // CPU per message each time (123-132 us) and the message-heavy predictions followed the fit
    // (layout_win: PP2 +2.2% at 0 us, +6.8% at 360 us). So the fit takes a lower bound of the
    // ratio (light = 1, heavy = the ratio): the median less half the range of the pairs'
    // ratios. Not clamped at 1: the simulator's own heavy / light ratio at no message cost can
    // be below 1 (attention-odd: 0.90), and FitMessageCpu fits 0 below it.
    ASSIGN_OR_RETURN(c, FitMessageCpu(measured, *cluster, plan, 1.0, *heavy,
                                      RatioLowerBound(ratios), cap));
    if (c < cap * (1 - 1e-6)) break;
  }
  cluster->hardware[0].message_cpu_s = c;
  if (attempts == kMessageFitAttempts) {
    err << "octopipe profile: warning: the per-message CPU fit hit its bound ("
        << FormatSeconds(cap) << ", " << kMessageCpuCap
        << "x the engine's message time or CPU) in all " << kMessageFitAttempts
        << " attempts: the machine is busy; profile again on a quiet machine\n";
  }
  const auto [least, most] = std::minmax_element(ratios.begin(), ratios.end());
  return absl::StrCat(
      "fitted from ", heavy->num_stages(), "-stage interleaved runs against the ",
      "profile's plan, median ratio ", absl::StrFormat("%.3f", Median(ratios)), " of ",
      ratios.size(), " adjacent pairs (", absl::StrFormat("%.3f-%.3f", *least, *most),
      "; fitted to ", absl::StrFormat("%.3f", RatioLowerBound(ratios)),
      ", the median less half the range; fastest ", FormatSeconds(heavy_s), " vs ",
      FormatSeconds(m->light_s), ")");
}

// (bytes, seconds) samples grouped by size.
std::map<double, std::vector<double>> BySize(const std::vector<std::pair<double, double>>& v) {
  std::map<double, std::vector<double>> out;
  for (const auto& [bytes, s] : v) out[bytes].push_back(s);
  return out;
}

// Each measured size's median against the fit, as "; per size, median vs the fit: B1 T1 (+x%),
// ..." (largest first): where the line misses, the DP sync of a plan whose buckets are of that
// size is mispredicted by as much.
std::string AllReduceResiduals(const Measurements& m, const LinkSpec& link,
                               const ProfileFlags& f) {
  const std::map<double, std::vector<double>> by_size = BySize(m.allreduce);
  std::string out = "; per size, median vs the fit:";
  for (auto it = by_size.rbegin(); it != by_size.rend(); ++it) {
    // As the DP sync is predicted (a step latency the fit clamped to 0 falls back to the link's).
    const double fit = RingAllReduceSeconds(it->first, static_cast<int>(f.ranks), link);
    const double median = Median(it->second);
    absl::StrAppend(&out, it == by_size.rbegin() ? " " : ", ",
                    absl::StrFormat("%.0f B %s (%+.1f%%)", it->first, FormatSeconds(median),
                                    fit > 0 ? 100 * (median / fit - 1) : 0.0));
  }
  return out;
}

// What the summary says of the all-reduce timed while every rank computed, against the idle
// one: the DP sync overlapped with the backward is predicted at this rate.
std::string OverlappedAllReduceLine(const Measurements& m, const LinkSpec& link) {
  if (m.allreduce_overlapped.empty() || link.allreduce_overlapped_bandwidth == 0) {
    return "gradient all-reduce beside compute: not measured; costed as the idle one\n";
  }
  const std::map<double, std::vector<double>> idle = BySize(m.allreduce);
  const std::map<double, std::vector<double>> busy = BySize(m.allreduce_overlapped);
  std::string sizes;
  for (auto it = busy.rbegin(); it != busy.rend(); ++it) {
    auto i = idle.find(it->first);
    if (i == idle.end()) continue;
    absl::StrAppend(&sizes, sizes.empty() ? " " : ", ",
                    absl::StrFormat("%.0f B %.2fx", it->first,
                                    Median(it->second) / Median(i->second)));
  }
  return absl::StrCat("gradient all-reduce beside compute (every rank computing the model on ",
                      "another thread): bus bandwidth ",
                      absl::StrFormat("%.3g", link.allreduce_overlapped_bandwidth), " B/s, ",
                      FormatSeconds(link.allreduce_overlapped_latency_s),
                      " per ring step; per size, median against the idle one:", sizes, "\n");
}

// What the summary says of the gradient all-reduce.
std::string AllReduceLine(const Measurements& m, const LinkSpec& link, const ProfileFlags& f) {
  if (m.allreduce.empty() || link.allreduce_bandwidth == 0) {
    return absl::StrCat("gradient all-reduce: not measured (",
                        f.ranks < 2 ? "one rank" : "too few sizes to fit",
                        "): costed at the link's bandwidth and latency\n");
  }
  double least = m.allreduce[0].first, most = least;
  for (const auto& [bytes, s] : m.allreduce) {
    least = std::min(least, bytes);
    most = std::max(most, bytes);
  }
  return absl::StrCat("gradient all-reduce over ", f.ranks, " ranks: bus bandwidth ",
                      absl::StrFormat("%.3g", link.allreduce_bandwidth), " B/s (",
                      std::isinf(link.bandwidth)
                          ? std::string("the link's is unbounded")
                          : absl::StrFormat("%.2gx the link's", link.allreduce_bandwidth /
                                                                   link.bandwidth),
                      "), ", FormatSeconds(link.allreduce_latency_s),
                      " per ring step (fitted over ", absl::StrFormat("%.0f", least), "-",
                      absl::StrFormat("%.0f", most), " bytes, copies in and out included)",
                      AllReduceResiduals(m, link, f), "\n", OverlappedAllReduceLine(m, link));
}

// The host's speed while a split was measured against the F/B/W launches' (`probe`: their
// median probe), and a warning where it differs by more than kProbeDrift: the split's times
// carry the difference, and plans at its degrees are predicted off by as much.
std::string SplitProbeLine(const Measurements& m, std::pair<int, int> split, double probe) {
  auto it = m.split_probe.find(split);
  if (it == m.split_probe.end() || it->second.empty() || !(probe > 0)) return "";
  const double at = executor::MedianProbeSeconds(it->second);
  const double ratio = at / probe;
  std::string line =
      absl::StrCat("the host-speed probe timed ", FormatSeconds(at), " (median over ",
                   it->second.size(), " rank-launches, ", absl::StrFormat("%.3fx", ratio),
                   " the F/B/W launches')");
  auto attempts = m.split_attempts.find(split);
  if (attempts != m.split_attempts.end() && attempts->second > 1) {
    absl::StrAppend(&line, "; measured ", attempts->second, " times because the probe was ",
                    absl::StrFormat("more than %.0f%%", 100 * kProbeDrift),
                    " off, the attempt closest to them kept");
  }
  if (std::abs(ratio - 1) > kProbeDrift) {
    absl::StrAppend(&line, ": the host ran at another speed while this split was measured, and "
                           "its times carry that; profile again on a quieter machine");
  }
  return line + "\n";
}

void PrintSummary(std::ostream& out, const ProfileFlags& f, const ModelSpec& spec,
                  const MeasuredModel& model, const MeasuredCluster& mc, const Measurements& m,
                  const std::string& message_fit, const std::string& model_path,
                  const std::string& cluster_path, double elapsed_s) {
  const HardwareSpec& hw = mc.cluster.hardware[0];
  const LinkSpec& link_spec = mc.cluster.inter_node_link;
  const double probe = executor::MedianProbeSeconds(m.probe);
  const double probe_vs_medians =
      model.model.host_probe_s > 0 ? probe / model.model.host_probe_s : 0;
  out << "profiled " << f.model << " on " << f.ranks << " ranks over " << f.transport << ": "
      << m.launches << " launches (every other one with the ranks mirrored) x " << f.repeat
      << " measured iterations of " << spec.microbatches << " micro-batches (median; summed "
      << "medians moved " << FormatPercent(m.last_change) << " in the last launch; spread = "
      << "(max - min) / median; (xN): pooled over N identical layers)\n\n"
      << model.table.Render() << "\n";
  for (const auto& [split, table] : model.split) {
    const auto [tp, ep] = split;
    out << "split " << SplitName(split) << " (per rank, the "
        << (ep > 1 ? "dispatch and combine all-to-alls" : "all-reduces") << " included; PP "
        << f.ranks / (tp * ep) << " x TP" << tp
        << (ep > 1 ? absl::StrCat(" x DP", ep, " x EP", ep, "; MoE layers only") : "") << "):\n"
        << table.Render() << SplitProbeLine(m, split, probe) << "\n";
  }
  out
      << "per-op executor overhead " << FormatSeconds(hw.op_overhead_s) << " (spread "
      << FormatPercent(Spread(m.overhead)) << "); largest layer spread "
      << FormatPercent(model.worst_spread) << "\n"
      << "link: latency " << FormatSeconds(link_spec.latency_s) << ", bandwidth "
      << absl::StrFormat("%.3g", link_spec.bandwidth) << " B/s (fitted over " << m.link.size()
      << " message sizes; ping-pong latency " << FormatSeconds(mc.pingpong_latency) << ", the "
      << "engine's " << m.message_s.size() << " messages " << FormatSeconds(Median(m.message_s))
      << " median)\n"
      << AllReduceLine(m, link_spec, f)
      << "per-message CPU cost " << FormatSeconds(hw.message_cpu_s) << " at each end, "
      << message_fit << "; the ranks' communication threads used "
      << FormatSeconds(m.comm_cpu.empty() ? 0.0 : Median(m.comm_cpu))
      << " of CPU per message (median over " << m.comm_cpu.size() << " rank-iterations)\n"
      << "device: " << absl::StrFormat("%.3g", mc.flops) << " FLOP/s (GEMM), "
      << absl::StrFormat("%.3g", mc.copy_bandwidth) << " B/s copy, "
      << absl::StrFormat("%.3g", hw.memory_bytes) << " bytes\n"
      << "host-speed reference " << FormatSeconds(model.model.host_probe_s)
      << " (the probe's workload, one micro-batch through every layer, by the medians above); "
      << "the probe timed " << FormatSeconds(probe) << " (median over " << m.probe.size()
      << " rank-launches, spread " << FormatPercent(Spread(m.probe)) << ", "
      << absl::StrFormat("%.3fx", probe_vs_medians) << " the medians)"
      << (std::abs(probe_vs_medians - 1) > kProbeDrift
              ? ": the host ran at another speed while the probe was timed than while the "
                "layers were"
              : "")
      << "; `octopipe train --profile=PREFIX --host_probe=N` compares the host's speed with "
         "the reference\n"
      << "wrote " << model_path << " and " << cluster_path << " in "
      << absl::StrFormat("%.1f", elapsed_s) << " s\n";
}

}  // namespace

int RunProfile(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  ProfileFlags f;
  CommandLine flags("profile",
                "Measures the executor's reference model on this machine and transport: every\n"
                "layer's F, B, W, R seconds and bytes (PREFIX.model.json), the per-op overhead\n"
                "and the link's latency and bandwidth (PREFIX.cluster.json). Then plan with\n"
                "`octopipe plan --model=PREFIX.model.json --cluster=PREFIX.cluster.json`.");
  DefineFlags(flags, &f);
  if (absl::Status s = flags.Parse(args); !s.ok()) return Fail(err, s, 2);
  if (flags.help_requested()) {
    out << flags.Usage();
    return 0;
  }
  if (!f.check.empty()) return CheckProfileFile(f.check, out, err);
  absl::StatusOr<ModelSpec> spec = SpecFromFlags(f);
  if (!spec.ok()) return Fail(err, spec.status(), 2);
  absl::StatusOr<std::vector<std::pair<int, int>>> splits = Splits(f, *spec);
  if (!splits.ok()) return Fail(err, splits.status(), 2);
  const auto started = std::chrono::steady_clock::now();

  // What the executor holds, whether it fits, and the plans that measure it.
  absl::StatusOr<std::vector<LayerBytes>> bytes = MeasureBytes(*spec);
  if (!bytes.ok()) {
    return Fail(err, absl::InvalidArgumentError(absl::StrCat(
                         "--model: the executor cannot build it: ", bytes.status().message())), 2);
  }
  absl::StatusOr<double> device_memory = DeviceMemoryFor(*spec, *bytes, f);
  if (!device_memory.ok()) return Fail(err, device_memory.status(), 3);
  const ModelGraph graph = executor::ToModelGraph(*spec);
  const int ranks = static_cast<int>(f.ranks);
  absl::StatusOr<Plan> plan = ProfilePlan(ranks, spec->microbatches, graph, /*recompute=*/false);
  if (!plan.ok()) return Fail(err, absl::InvalidArgumentError(absl::StrCat("--ranks: ", plan.status().message())), 2);
  absl::StatusOr<Plan> plan_r = ProfilePlan(ranks, spec->microbatches, graph, /*recompute=*/true);
  if (!plan_r.ok()) return Fail(err, absl::InvalidArgumentError(absl::StrCat("--ranks: ", plan_r.status().message())), 2);

  absl::StatusOr<Measurements> m =
      MeasureLayers(*spec, *plan, *plan_r, f, AllReduceBuckets(*bytes), err);
  if (!m.ok()) return Fail(err, m.status(), 1);
  if (absl::Status s = MeasureSplits(*spec, graph, *splits, f, &*m, err); !s.ok()) {
    return Fail(err, s, 1);
  }
  std::map<int, int> pooled_over;
  if (f.pool) {
    pooled_over = PoolIdenticalLayers(graph, *bytes, &m->samples);
    for (auto& [split, samples] : m->split) PoolIdenticalLayers(graph, *bytes, &samples);
  }
  const MeasuredModel model = MeasuredModelFile(graph, *spec, *bytes, *m, pooled_over, f);
  if (absl::Status s = ValidateMeasuredProfile(model.model); !s.ok()) return Fail(err, s, 1);
  absl::StatusOr<MeasuredCluster> mc = MeasuredClusterFile(*m, *bytes, *device_memory, f);
  if (!mc.ok()) return Fail(err, mc.status(), 1);
  absl::StatusOr<std::string> message_fit =
      FitMessageCost(*spec, graph, model.model, *plan, f, &*m, &mc->cluster, err);
  if (!message_fit.ok()) return Fail(err, message_fit.status(), 1);

  const std::string model_path = ResolvePath(f.prefix + ".model.json");
  const std::string cluster_path = ResolvePath(f.prefix + ".cluster.json");
  if (absl::Status s = WriteModelFile(model_path, model.model); !s.ok()) return Fail(err, s, 1);
  if (absl::Status s = WriteClusterFile(cluster_path, mc->cluster); !s.ok()) return Fail(err, s, 1);
  PrintSummary(out, f, *spec, model, *mc, *m, *message_fit, model_path, cluster_path,
               Seconds(started));
  return 0;
}

}  // namespace octopipe::cli
