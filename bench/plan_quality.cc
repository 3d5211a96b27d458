// The plan-quality table (issue 3): every model file in examples/models (the zoo at sequence
// length 4096 and the measured profiles at their own) on 8, 32 and 128 H100s (1, 4, 16 nodes),
// tuned by OctoPipe and compared with every baseline in the same simulator.
//
// Configuration per (model, GPUs), Megatron-style: the shallowest pipeline P >= 8 (or all GPUs
// when fewer) and the smallest tensor-parallel degree t in {1, 2, 4, 8} inside a node whose
// static memory takes at most half a GPU, data parallelism D = GPUs / (t P) for the rest with
// the optimizer state sharded over it; M = 4 P micro-batches. A TP group is one pipeline
// device; the cost model divides its work and memory by t (TP communication is not modelled).
// Data parallelism scales tokens/s but not the speed-up.
//
// --sizing=deep instead pipelines over min(GPUs, layers) devices without TP (the rest data
// parallel), the stress case for memory-bound deep pipelines.
//
//   bazel run -c opt //bench:plan_quality -- [--budget=10] [--only=SUBSTRING] [--gpus=8,32]
//       [--sizing=megatron|deep]
//
// Prints one JSON object per line, then a Markdown table.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <dirent.h>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/cluster_presets.h"
#include "core/convert.h"
#include "core/cost_model.h"
#include "core/json_text.h"
#include "simulator/problem_builder.h"
#include "tuner/tuner.h"

namespace octopipe {
namespace {

// `nodes` nodes of 8 H100s, grouped into TP groups of t GPUs: each group is one device with the
// per-GPU hardware figures (the cost model divides work and memory by t).
Cluster TpCluster(int nodes, int t) {
  Cluster c = *ClusterPreset(nodes == 1 ? "h100-1node" : nodes == 4 ? "h100-4nodes"
                                                                     : "h100-16nodes");
  for (Node& n : c.nodes) n.num_devices = 8 / t;
  c.name = absl::StrCat(c.name, t > 1 ? absl::StrCat("-tp", t) : "");
  return c;
}

double TotalStaticBytes(const ModelGraph& m, const Cluster& c) {
  CostModel cost;
  double total = 0;
  for (const Layer& l : m.layers) total += cost.Cost(l, m.training, c.device_hardware(0)).static_bytes;
  return total;
}

struct Row {
  std::string model;
  int gpus = 0, tp = 1, dp = 1, devices = 0, microbatches = 0, layers = 0;
  bool heterogeneous = false;
  TuneResult r;
};

// Heterogeneous: the layers between embedding and head are not one repeated block of at most
// two layers (Llama's attention+MLP, Mixtral's attention+MoE and Mamba2's mixer are
// homogeneous; Nemotron-H, Jamba, DeepSeek's dense-then-MoE and the VLMs are not).
bool Heterogeneous(const ModelGraph& m) {
  std::vector<LayerKind> body;
  for (const Layer& l : m.layers) {
    if (l.kind != LayerKind::kEmbedding && l.kind != LayerKind::kHead) body.push_back(l.kind);
  }
  for (size_t period = 1; period <= 2; ++period) {
    bool repeats = body.size() % period == 0;
    for (size_t i = period; i < body.size() && repeats; ++i) repeats = body[i] == body[i - period];
    if (repeats) return false;
  }
  return true;
}

}  // namespace
}  // namespace octopipe

int main(int argc, char** argv) {
  using namespace octopipe;
  double budget = 10;
  std::string only;
  std::vector<int> gpu_counts = {8, 32, 128};
  bool deep = false;  // --sizing=deep: pipeline over min(GPUs, layers) devices
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--budget=", 0) == 0) {
      absl::SimpleAtod(a.substr(9), &budget);
    } else if (a.rfind("--only=", 0) == 0) {
      only = a.substr(7);
    } else if (a == "--sizing=deep") {
      deep = true;
    } else if (a == "--sizing=megatron") {
      deep = false;
    } else if (a.rfind("--gpus=", 0) == 0) {
      gpu_counts.clear();
      for (absl::string_view g : absl::StrSplit(a.substr(7), ',')) {
        int n = 0;
        if (absl::SimpleAtoi(g, &n)) gpu_counts.push_back(n);
      }
    } else {
      std::fprintf(stderr,
                   "usage: plan_quality [--budget=S] [--only=SUBSTRING] [--gpus=8,32,128]\n"
                   "                    [--sizing=megatron|deep]\n");
      return 2;
    }
  }
  std::vector<std::string> files;
  if (DIR* dir = opendir("examples/models")) {
    while (dirent* e = readdir(dir)) {
      const std::string n = e->d_name;
      if (n.size() > 5 && n.substr(n.size() - 5) == ".json") files.push_back(n);
    }
    closedir(dir);
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "no model files under examples/models (run with bazel run)\n");
    return 1;
  }
  std::vector<Row> rows;
  for (const std::string& file : files) {
    if (!only.empty() && file.find(only) == std::string::npos) continue;
    absl::StatusOr<ModelGraph> model = LoadModelFile("examples/models/" + file);
    if (!model.ok()) {
      std::fprintf(stderr, "%s: %s\n", file.c_str(), std::string(model.status().message()).c_str());
      return 1;
    }
    for (int gpus : gpu_counts) {
      Row row;
      row.model = model->name;
      row.gpus = gpus;
      row.layers = model->num_layers();
      row.heterogeneous = Heterogeneous(*model);
      ModelGraph m = *model;
      Cluster cluster;
      // Megatron-style sizing: the shallowest pipeline (at least 8 deep, or all GPUs when
      // fewer) and the smallest TP degree whose weights, gradients and optimizer state take at
      // most half a GPU, the remaining GPUs as data parallelism with the optimizer state
      // sharded over it (distributed optimizer). When nothing fits, the deepest pipeline
      // without TP, and the tuner's infeasible answer says what memory it would need.
      bool found = false;
      for (int t : {1, 2, 4, 8}) {
        if (deep) break;
        for (int P = std::min(8, gpus / t); P <= gpus / t && P <= m.num_layers() && !found;
             P *= 2) {
          m.training.tp_degree = t;
          m.training.zero_degree = gpus / (t * P);
          const Cluster c = TpCluster(gpus / 8, t);
          if (TotalStaticBytes(m, c) / P <= 0.5 * c.usable_memory(0)) {
            row.tp = t;
            row.devices = P;
            cluster = c;
            found = true;
          }
        }
        if (found) break;
      }
      if (!found) {
        row.tp = 1;
        row.devices = std::min(gpus, m.num_layers());
        m.training.tp_degree = 1;
        m.training.zero_degree = gpus / row.devices;
        cluster = TpCluster(gpus / 8, 1);
      }
      row.dp = gpus / (row.tp * row.devices);
      row.microbatches = 4 * row.devices;
      TunerOptions o;
      o.num_devices = row.devices;
      o.num_microbatches = row.microbatches;
      o.time_budget_s = budget;
      absl::StatusOr<TuneResult> r = Tune(m, cluster, CostModel(), o);
      if (!r.ok()) {
        std::fprintf(stderr, "%s on %d GPUs: %s\n", file.c_str(), gpus,
                     std::string(r.status().message()).c_str());
        continue;
      }
      row.r = std::move(*r);
      const TuneResult& t = row.r;
      double base_time = 0, base_bubble = 0;
      for (const BaselineResult& b : t.baselines) {
        if (b.name == t.best_baseline) {
          base_time = b.result.iteration_time_s;
          base_bubble = b.result.bubble_ratio;
        }
      }
      double peak = 0;
      for (const DeviceResult& d : t.predicted.devices) peak = std::max(peak, d.peak_memory_bytes);
      const Json line = {{"model", row.model},
                         {"gpus", row.gpus},
                         {"tp", row.tp},
                         {"dp", row.dp},
                         {"pipeline_devices", row.devices},
                         {"microbatches", row.microbatches},
                         {"layers", row.layers},
                         {"heterogeneous", row.heterogeneous},
                         {"feasible", t.feasible},
                         {"origin", PlanOriginText(t)},
                         {"best_baseline", t.best_baseline},
                         {"best_baseline_iteration_time_s", base_time},
                         {"best_baseline_bubble_ratio", base_bubble},
                         {"iteration_time_s", t.predicted.iteration_time_s},
                         {"bubble_ratio", t.predicted.bubble_ratio},
                         {"steady_state_bubble_ratio", t.predicted.steady_state_bubble_ratio},
                         {"speedup_vs_best_baseline", t.speedup_vs_best_baseline},
                         {"vocab_parallel", t.vocab_parallel},
                         {"max_peak_memory_bytes", peak},
                         {"tuning_wall_s", t.tuning_wall_s},
                         {"evaluations", t.evaluations},
                         {"budget_exhausted", t.budget_exhausted}};
      std::printf("%s\n", JsonText(line).c_str());
      std::fflush(stdout);
      rows.push_back(std::move(row));
    }
  }
  std::printf("\n| model | GPUs | TP x PP x DP | M | best baseline | its iteration | its bubble | OctoPipe "
              "| bubble | speed-up | peak mem | tuning |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  double het_sum = 0;
  int het_n = 0;
  double min_speedup = 1e9;
  for (const Row& row : rows) {
    const TuneResult& t = row.r;
    double base_time = 0, base_bubble = 0, peak = 0;
    for (const BaselineResult& b : t.baselines) {
      if (b.name == t.best_baseline) {
        base_time = b.result.iteration_time_s;
        base_bubble = b.result.bubble_ratio;
      }
    }
    for (const DeviceResult& d : t.predicted.devices) peak = std::max(peak, d.peak_memory_bytes);
    if (!t.feasible) {
      std::printf("| %s | %d | %dx%dx%d | %d | infeasible: %s | | | | | | | %.2f s |\n",
                  row.model.c_str(), row.gpus, row.tp, row.devices, row.dp, row.microbatches,
                  t.infeasible_reason.c_str(), t.tuning_wall_s);
      continue;
    }
    if (t.best_baseline.empty()) {
      std::printf("| %s%s | %d | %dx%dx%d | %d | no baseline fits | | | %.3f s | %.1f%% | fits where no baseline does | %.1f GB | %.2f s |\n",
                  row.model.c_str(), row.heterogeneous ? "" : " (homogeneous)", row.gpus,
                  row.tp, row.devices, row.dp, row.microbatches, t.predicted.iteration_time_s,
                  t.predicted.bubble_ratio * 100, peak / 1e9, t.tuning_wall_s);
      continue;
    }
    std::printf("| %s%s | %d | %dx%dx%d | %d | %s | %.3f s | %.1f%% | %.3f s | %.1f%% | %.3fx | %.1f GB | %.2f s |\n",
                row.model.c_str(), row.heterogeneous ? "" : " (homogeneous)", row.gpus, row.tp,
                row.devices, row.dp, row.microbatches,
                t.best_baseline.empty() ? "none fits" : t.best_baseline.c_str(), base_time,
                base_bubble * 100, t.predicted.iteration_time_s, t.predicted.bubble_ratio * 100,
                t.speedup_vs_best_baseline, peak / 1e9, t.tuning_wall_s);
    if (!t.best_baseline.empty()) {
      min_speedup = std::min(min_speedup, t.speedup_vs_best_baseline);
      if (row.heterogeneous) {
        het_sum += t.speedup_vs_best_baseline;
        ++het_n;
      }
    }
  }
  if (het_n > 0) {
    std::printf("\nheterogeneous models: mean speed-up %.3fx over %d configurations; "
                "smallest speed-up overall %.3fx\n", het_sum / het_n, het_n, min_speedup);
  }
  return 0;
}
