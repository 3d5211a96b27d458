// The plan-quality table: every model file in examples/models (the zoo at sequence
// length 4096 and the measured profiles at their own) on 8, 32 and 128 H100s (1, 4, 16 nodes;
// --gpus=256,2048 for the largest), tuned by OctoPipe and compared with every baseline in the
// same simulator.
//
// Configuration per (model, GPUs): the layout search of tuner/layout.h — the same code as
// `octopipe plan` and the Plan RPC — chooses PP x TP x EP x DP for a global batch of
// 4 micro-batches per GPU (G = 4 x GPUs; each pipeline runs G / DP), with the TP all-reduces,
// EP all-to-alls and the DP gradient all-reduce costed; the table shows the slowest distinct
// pipeline against the baselines on that same pipeline. On DeepSeek-V3 at 2,048 GPUs a second
// row evaluates the published layout, PP16 x EP64 (x DP128, no TP), in the same simulator.
//
// --sizing=deep instead fixes the deepest pipeline (the largest PP <= layers dividing the
// GPUs) without TP or EP, the rest data parallel: the stress case for memory-bound deep
// pipelines.
//
//   bazel run -c opt //bench:plan_quality -- [--budget=10] [--only=SUBSTRING] [--gpus=8,32]
//       [--sizing=layout|deep]
//
// Prints one JSON object per line, then a Markdown table. Per row also whether the plan splits
// the vocabulary (VP; EP is in the layout), and the certified lower bound on the slowest
// pipeline (tuner/lower_bound.h: its binding term) with the plan's gap above it.
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
#include "tuner/layout.h"
#include "tuner/tuner.h"

namespace octopipe {
namespace {

// `nodes` nodes of 8 H100s (the h100-1node preset's node, links and reserve, repeated).
Cluster H100Nodes(int nodes) {
  Cluster c = *ClusterPreset("h100-1node");
  const Node node = c.nodes[0];
  c.nodes.clear();
  for (int i = 0; i < nodes; ++i) {
    c.nodes.push_back(node);
    c.nodes.back().name = absl::StrCat("node", i);
  }
  c.name = absl::StrCat("h100-", nodes, nodes == 1 ? "node" : "nodes");
  return c;
}

struct Row {
  std::string model;
  std::string label;  // "" or "published PP16 x EP64"
  int gpus = 0, layers = 0;
  bool heterogeneous = false;
  LayoutResult r;
  const TuneResult& tune() const { return r.pipelines.front().tune; }
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

// One JSON object per (model, GPUs[, label]) row.
void PrintJsonLine(const Row& row) {
  const TuneResult& t = row.tune();
  const LayoutResult& r = row.r;
  double base_time = 0, base_bubble = 0, peak = 0;
  for (const BaselineResult& b : t.baselines) {
    if (b.name == t.best_baseline) {
      base_time = b.result.iteration_time_s;
      base_bubble = b.result.bubble_ratio;
    }
  }
  for (const DeviceResult& d : t.predicted.devices) peak = std::max(peak, d.peak_memory_bytes);
  int tuned = 0;
  for (const LayoutConsidered& c : r.considered) {
    tuned += c.outcome == "tuned" || c.outcome == "chosen" ? 1 : 0;
  }
  const Json line = {{"model", row.model},
                     {"label", row.label},
                     {"gpus", row.gpus},
                     {"layout", r.layout.ToString()},
                     {"pp", r.layout.pp},
                     {"tp", r.layout.tp},
                     {"ep", r.layout.ep},
                     {"dp", r.layout.dp},
                     {"pipeline_devices", r.layout.pp},
                     {"distinct_pipelines", r.pipelines.size()},
                     {"microbatches", r.microbatches},
                     {"global_microbatches", r.global_microbatches},
                     {"layers", row.layers},
                     {"heterogeneous", row.heterogeneous},
                     {"feasible", r.feasible},
                     {"origin", PlanOriginText(t)},
                     {"best_baseline", t.best_baseline},
                     {"best_baseline_iteration_time_s", base_time},
                     {"best_baseline_bubble_ratio", base_bubble},
                     {"pipeline_iteration_time_s", t.predicted.iteration_time_s},
                     {"bubble_ratio", t.predicted.bubble_ratio},
                     {"steady_state_bubble_ratio", t.predicted.steady_state_bubble_ratio},
                     {"speedup_vs_best_baseline", t.speedup_vs_best_baseline},
                     {"vocab_parallel", t.vocab_parallel},
                     {"lower_bound_s", t.lower_bound.seconds},
                     {"lower_bound_binding", t.lower_bound.binding},
                     {"lower_bound_gap", t.lower_bound_gap},
                     {"dp_sync_s", r.dp_sync_s},
                     {"iteration_time_s", r.iteration_time_s},
                     {"tokens_per_s", r.tokens_per_s},
                     {"max_peak_memory_bytes", peak},
                     {"layouts_considered", r.considered.size()},
                     {"layouts_tuned", tuned},
                     {"tuning_wall_s", r.tuning_wall_s},
                     {"evaluations", t.evaluations},
                     {"budget_exhausted", t.budget_exhausted}};
  std::printf("%s\n", JsonText(line).c_str());
  std::fflush(stdout);
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
    } else if (a == "--sizing=layout" || a == "--sizing=megatron") {
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
                   "                    [--sizing=layout|deep]\n");
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
      if (gpus % 8 != 0) {
        std::fprintf(stderr, "--gpus: %d is not a whole number of 8-GPU nodes\n", gpus);
        return 2;
      }
      const Cluster cluster = H100Nodes(gpus / 8);
      std::vector<std::pair<std::string, LayoutRequest>> requests;
      LayoutRequest req;
      req.global_microbatches = 4 * gpus;
      if (deep) {
        for (int pp = std::min(gpus, model->num_layers()); pp >= 1; --pp) {
          if (gpus % pp == 0) {
            req.pp = pp;
            break;
          }
        }
        req.tp = 1;
        req.ep = 1;
      }
      requests.push_back({"", req});
      if (!deep && model->name == "deepseek-v3" && gpus == 2048) {
        LayoutRequest published = req;
        published.pp = 16;
        published.tp = 1;
        published.ep = 64;
        requests.push_back({"published PP16 x EP64", published});
      }
      for (const auto& [label, request] : requests) {
        TunerOptions o;
        o.time_budget_s = budget;
        absl::StatusOr<LayoutResult> r = TuneLayout(*model, cluster, CostModel(), o, request);
        if (!r.ok()) {
          std::fprintf(stderr, "%s on %d GPUs: %s\n", file.c_str(), gpus,
                       std::string(r.status().message()).c_str());
          continue;
        }
        Row row;
        row.model = model->name;
        row.label = label;
        row.gpus = gpus;
        row.layers = model->num_layers();
        row.heterogeneous = Heterogeneous(*model);
        row.r = std::move(*r);
        PrintJsonLine(row);
        rows.push_back(std::move(row));
      }
    }
  }
  std::printf("\n| model | GPUs | layout PP x TP x EP x DP | M | best baseline | its iteration | "
              "its bubble | OctoPipe | bubble | speed-up | VP | lower bound | gap | DP sync | "
              "tokens/s | peak mem | tuning |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  double het_sum = 0;
  int het_n = 0;
  double min_speedup = 1e9;
  for (const Row& row : rows) {
    const TuneResult& t = row.tune();
    const ParallelLayout& l = row.r.layout;
    const std::string name = absl::StrCat(row.model, row.heterogeneous ? "" : " (homogeneous)",
                                          row.label.empty() ? "" : " — " + row.label);
    const std::string layout = absl::StrFormat("%dx%dx%dx%d%s", l.pp, l.tp, l.ep, l.dp,
                                               l.pp_outer ? "" : " (pp inner)");
    double base_time = 0, base_bubble = 0, peak = 0;
    for (const BaselineResult& b : t.baselines) {
      if (b.name == t.best_baseline) {
        base_time = b.result.iteration_time_s;
        base_bubble = b.result.bubble_ratio;
      }
    }
    for (const DeviceResult& d : t.predicted.devices) peak = std::max(peak, d.peak_memory_bytes);
    if (!row.r.feasible) {
      std::printf("| %s | %d | %s | %d | infeasible: %s | | | | | | | | | | | | %.2f s |\n",
                  name.c_str(), row.gpus, layout.c_str(), row.r.microbatches,
                  t.infeasible_reason.c_str(), row.r.tuning_wall_s);
      continue;
    }
    const std::string base = t.best_baseline.empty() ? "no baseline fits" : t.best_baseline;
    const std::string speedup = t.best_baseline.empty()
                                    ? "fits where no baseline does"
                                    : absl::StrFormat("%.3fx", t.speedup_vs_best_baseline);
    std::printf("| %s | %d | %s | %d | %s | %.3f s | %.1f%% | %.3f s | %.1f%% | %s | %s | "
                "%.3f s (%s) | %.1f%% | %.3f s | %.0f | %.1f GB | %.2f s |\n",
                name.c_str(), row.gpus, layout.c_str(), row.r.microbatches, base.c_str(),
                base_time, base_bubble * 100, t.predicted.iteration_time_s,
                t.predicted.bubble_ratio * 100, speedup.c_str(), t.vocab_parallel ? "yes" : "no",
                t.lower_bound.seconds, t.lower_bound.binding.c_str(), t.lower_bound_gap * 100,
                row.r.dp_sync_s,
                row.r.tokens_per_s, peak / 1e9, row.r.tuning_wall_s);
    if (!t.best_baseline.empty() && row.label.empty()) {
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
