// The lower-bound gap table: the four measured profiles
// (examples/models/profile-*.json) on a synthetic cluster of P identical devices with free links
// and no memory cap, P = 4 and 8, M = 2P and 4P, tuned for the synchronous iteration time.
// Per row: the tuned plan, the certified lower bound on any plan (tuner/lower_bound.h), the term
// that binds it and the gap (plan - bound) / plan. The target is a mean gap <= 3%. "its
// assignment" (plan_assignment_s) is the bound's assignment term on the plan's own split
// (StaggeredObjective, tuner/staggered_balance.h): the part of the gap above it is the
// schedule's, the part below it the split's and placement's. "its split bound"
// (split_bound_s, SplitScheduleLowerBound) is a certified bound on every schedule of the plan's
// split that also charges the fill rate (a device fed by a slower stage waits between
// micro-batches): the plan's time above it is what a better schedule of the same split could
// still gain at most.
//
//   bazel run -c opt //bench:lower_bound_gap -- [--budget=2] [--only=SUBSTRING]
//       [--devices=4,8] [--max_chunks=N] [--seed=1] [--log] [--split_schedules=1]
// (--log: the tuner's phase log of each row and its plan's per-device pauses on stderr;
// --split_schedules=0|1: TunerOptions::split_schedules, on by default here)
//
// Prints one JSON object per line, then a Markdown table and the mean gap. Timing-dependent:
// the tuner stops at its wall-clock budget, so measure on a quiet machine.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <dirent.h>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/cluster.h"
#include "core/convert.h"
#include "core/cost_model.h"
#include "core/json_text.h"
#include "simulator/evaluator.h"
#include "simulator/problem_builder.h"
#include "tuner/lower_bound.h"
#include "tuner/staggered_balance.h"
#include "tuner/tuner.h"

namespace octopipe {
namespace {

struct Flags {
  double budget = 2;
  std::string only;
  std::vector<int> devices = {4, 8};
  int max_chunks = 0;  // 0: the tuner's default
  uint64_t seed = 1;
  bool log = false;  // the tuner's phase log on stderr
  bool split_schedules = true;
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--budget=", 0) == 0) {
      if (!absl::SimpleAtod(a.substr(9), &f->budget) || !(f->budget > 0)) return false;
    } else if (a.rfind("--only=", 0) == 0) {
      f->only = a.substr(7);
    } else if (a.rfind("--max_chunks=", 0) == 0) {
      if (!absl::SimpleAtoi(a.substr(13), &f->max_chunks) || f->max_chunks < 1) return false;
    } else if (a.rfind("--seed=", 0) == 0) {
      if (!absl::SimpleAtoi(a.substr(7), &f->seed)) return false;
    } else if (a == "--split_schedules=0" || a == "--split_schedules=1") {
      f->split_schedules = a.back() == '1';
    } else if (a == "--log") {
      f->log = true;
    } else if (a.rfind("--devices=", 0) == 0) {
      f->devices.clear();
      for (absl::string_view d : absl::StrSplit(a.substr(10), ',')) {
        int n = 0;
        if (!absl::SimpleAtoi(d, &n) || n < 1) return false;
        f->devices.push_back(n);
      }
    } else {
      return false;
    }
  }
  return true;
}

std::vector<std::string> ProfileFiles() {
  std::vector<std::string> files;
  if (DIR* dir = opendir("examples/models")) {
    while (dirent* e = readdir(dir)) {
      const std::string n = e->d_name;
      if (n.rfind("profile-", 0) == 0 && n.size() > 5 && n.substr(n.size() - 5) == ".json") {
        files.push_back(n);
      }
    }
    closedir(dir);
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The stages as "d0:0-9 d1:10-19 ..." (device:first-last layer).
std::string StagesText(const Plan& plan) {
  std::string out;
  for (const StageAssignment& s : plan.stages) {
    absl::StrAppend(&out, out.empty() ? "" : " ", "d", s.device, ":", s.first_layer, "-",
                    s.last_layer, s.recompute ? "r" : "");
  }
  return out;
}

std::string BindingText(const LowerBound& lb) {
  return lb.heaviest_layer >= 0 && lb.binding == "layer"
             ? absl::StrCat(lb.binding, " ", lb.heaviest_layer)
             : lb.binding;
}

// Per device of the plan (stderr, with --log): first op start, busy time, last op end, the
// idle time between them and each pause over 2 ms as "length@start": where the schedule
// leaves the device waiting.
void LogDevices(const ProblemBuilder& builder, const Plan& plan, int M) {
  PipelineProblem problem;
  builder.BuildInto(plan.stages, M, &problem);
  Evaluator evaluator;
  EvalOptions options;
  options.timeline = true;
  absl::StatusOr<SimResult> sim = evaluator.Evaluate(problem, plan.schedule, options);
  if (!sim.ok()) return;
  for (size_t d = 0; d < sim->devices.size(); ++d) {
    const DeviceResult& r = sim->devices[d];
    std::string pauses;
    for (size_t i = 1; i < sim->op_start_s[d].size(); ++i) {
      const double gap = sim->op_start_s[d][i] - sim->op_end_s[d][i - 1];
      if (gap > 0.002) absl::StrAppend(&pauses, absl::StrFormat(" %.3f@%.3f", gap, sim->op_start_s[d][i]));
    }
    std::fprintf(stderr, "  device %zu: first %.4f busy %.4f end %.4f idle %.4f; pauses%s\n", d,
                 r.first_start_s, r.busy_s, r.last_end_s,
                 r.last_end_s - r.first_start_s - r.busy_s, pauses.c_str());
  }
}

struct Row {
  std::string model;
  int devices = 0, microbatches = 0;
  TuneResult r;
  double plan_assignment_s = 0;
  double split_bound_s = 0;
};

}  // namespace
}  // namespace octopipe

int main(int argc, char** argv) {
  using namespace octopipe;
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) {
    std::fprintf(stderr,
                 "usage: lower_bound_gap [--budget=S] [--only=SUBSTRING] [--devices=4,8]\n"
                 "                       [--max_chunks=N] [--seed=N] [--log]\n");
    return 2;
  }
  const std::vector<std::string> files = ProfileFiles();
  if (files.empty()) {
    std::fprintf(stderr, "no profile-*.json under examples/models (run with bazel run)\n");
    return 1;
  }
  std::vector<Row> rows;
  for (const std::string& file : files) {
    if (!flags.only.empty() && file.find(flags.only) == std::string::npos) continue;
    absl::StatusOr<ModelGraph> model = LoadModelFile("examples/models/" + file);
    if (!model.ok()) {
      std::fprintf(stderr, "%s: %s\n", file.c_str(), std::string(model.status().message()).c_str());
      return 1;
    }
    for (int P : flags.devices) {
      for (int M : {2 * P, 4 * P}) {
        TunerOptions o;
        o.num_devices = P;
        o.num_microbatches = M;
        o.time_budget_s = flags.budget;
        o.seed = flags.seed;
        o.split_schedules = flags.split_schedules;
        if (flags.max_chunks > 0) o.max_chunks = flags.max_chunks;
        absl::StatusOr<TuneResult> r = Tune(*model, SyntheticCluster(P), CostModel(), o);
        if (!r.ok()) {
          std::fprintf(stderr, "%s P=%d M=%d: %s\n", file.c_str(), P, M,
                       std::string(r.status().message()).c_str());
          return 1;
        }
        // The bound's own cost (the tuner computes it once per plan).
        absl::StatusOr<ProblemBuilder> builder =
            ProblemBuilder::Create(*model, SyntheticCluster(P), CostModel(), P);
        const auto t0 = std::chrono::steady_clock::now();
        if (builder.ok()) PipelineLowerBound(FastestLayerCosts(*builder), P, M, false);
        const double bound_wall_s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        Row row{model->name, P, M, std::move(*r)};
        if (builder.ok()) {
          row.plan_assignment_s = StaggeredObjective(*builder, row.r.plan.stages, M);
          PipelineProblem split;
          builder->BuildInto(row.r.plan.stages, M, &split);
          row.split_bound_s = SplitScheduleLowerBound(split);
        }
        const TuneResult& t = row.r;
        if (flags.log) {
          for (const TuneLogEntry& e : t.log) {
            std::fprintf(stderr, "%s P=%d M=%d %.2fs %s %.4f -> %.4f (%lld evals) %s\n",
                         row.model.c_str(), P, M, e.wall_s, e.phase.c_str(), e.before_s,
                         e.after_s, static_cast<long long>(e.evaluations), e.detail.c_str());
          }
          if (builder.ok()) LogDevices(*builder, t.plan, M);
        }
        double baseline_s = 0;
        for (const BaselineResult& b : t.baselines) {
          if (b.name == t.best_baseline) baseline_s = b.result.iteration_time_s;
        }
        const Json line = {{"model", row.model},
                           {"devices", P},
                           {"microbatches", M},
                           {"origin", PlanOriginText(t)},
                           {"iteration_time_s", t.predicted.iteration_time_s},
                           {"best_baseline", t.best_baseline},
                           {"best_baseline_iteration_time_s", baseline_s},
                           {"lower_bound_s", t.lower_bound.seconds},
                           {"binding", t.lower_bound.binding},
                           {"work_s", t.lower_bound.work_s},
                           {"chain_s", t.lower_bound.chain_s},
                           {"layer_s", t.lower_bound.layer_s},
                           {"assignment_s", t.lower_bound.assignment_s},
                           {"gap", t.lower_bound_gap},
                           {"plan_assignment_s", row.plan_assignment_s},
                           {"split_bound_s", row.split_bound_s},
                           {"stages", StagesText(t.plan)},
                           {"policy", t.plan.schedule_name},
                           {"evaluations", t.evaluations},
                           {"tuning_wall_s", t.tuning_wall_s},
                           {"bound_wall_s", bound_wall_s},
                           {"budget_exhausted", t.budget_exhausted}};
        std::printf("%s\n", JsonText(line).c_str());
        std::fflush(stdout);
        rows.push_back(std::move(row));
      }
    }
  }
  std::printf("\n| model | P | M | best plan | its time | its assignment | its split bound "
              "| best baseline | lower bound | binding | gap |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|\n");
  double sum = 0;
  for (const Row& row : rows) {
    const TuneResult& t = row.r;
    std::printf(
        "| %s | %d | %d | %s, %zu stages | %.4f s | %.4f s | %.4f s | %s | %.4f s | %s | %.2f%% |\n",
        row.model.c_str(), row.devices, row.microbatches, PlanOriginText(t).c_str(),
        t.plan.stages.size(), t.predicted.iteration_time_s, row.plan_assignment_s,
        row.split_bound_s, t.best_baseline.c_str(),
                t.lower_bound.seconds, BindingText(t.lower_bound).c_str(),
                100 * t.lower_bound_gap);
    sum += t.lower_bound_gap;
  }
  if (!rows.empty()) {
    std::printf("\nsplit_schedules %s", flags.split_schedules ? "on" : "off");
    std::printf("\nmean gap %.2f%% over %zu configurations (budget %.1f s each)\n",
                100 * sum / rows.size(), rows.size(), flags.budget);
  }
  return 0;
}
