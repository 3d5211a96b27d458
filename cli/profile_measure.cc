#include "cli/profile_measure.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "calibration/profile_fit.h"
#include "cli/table.h"
#include "core/pipeline_edges.h"
#include "core/status_macros.h"
#include "executor/host_probe.h"
#include "executor/layout_trainer.h"
#include "executor/transport_factory.h"
#include "simulator/classic_pipeline.h"

namespace octopipe::cli {
namespace {


// The layout that measures split (tp, ep) over `ranks` ranks: PP ranks / (tp * ep) x TP tp x
// DP ep x EP ep, every replica running `pipeline` (its micro-batches each).
LayoutPlan SplitProfileLayout(const Plan& pipeline, int tp, int ep, int ranks) {
  LayoutPlan l;
  l.layout.pp = pipeline.num_devices;
  l.layout.tp = tp;
  l.layout.ep = ep;
  l.layout.dp = ep;
  l.num_ranks = ranks;
  l.global_microbatches = pipeline.num_microbatches * ep;
  LayoutPipelinePlan p{pipeline, {}};
  for (int r = 0; r < ep; ++r) {
    PipelineReplica replica;
    replica.dp_rank = r;
    replica.first_microbatch = r * pipeline.num_microbatches;
    // rank order TP, DP, PP (pp outer)
    for (int d = 0; d < pipeline.num_devices; ++d) replica.device_ranks.push_back((d * ep + r) * tp);
    p.replicas.push_back(replica);
  }
  l.pipelines.push_back(std::move(p));
  return l;
}

// The split's pipeline plan (F/B/W, or with every stage recomputed) and layout.
absl::StatusOr<std::pair<Plan, LayoutPlan>> SplitProfilePlan(const ModelSpec& spec,
                                                            const ModelGraph& graph, int ranks,
                                                            int tp, int ep, bool recompute) {
  ASSIGN_OR_RETURN(Plan plan,
                   ProfilePlan(ranks / (tp * ep), spec.microbatches / ep, graph, recompute));
  LayoutPlan layout = SplitProfileLayout(plan, tp, ep, ranks);
  return std::make_pair(std::move(plan), std::move(layout));
}

// `plan` with its devices in reverse order (stage on device d -> device N - 1 - d, and each
// device's op list with it): the same schedule with every stage on the other end's rank.
Plan Mirrored(Plan plan) {
  const int N = plan.num_devices;
  for (StageAssignment& st : plan.stages) st.device = N - 1 - st.device;
  std::reverse(plan.schedule.ops.begin(), plan.schedule.ops.end());
  return plan;
}

// Appends the ranks' per-iteration layer times to `samples`: R only (`recompute`), or all but R.
void AddLayerSamples(const std::vector<Json>& parsed, bool recompute,
                     std::map<std::pair<int, int>, std::vector<double>>* samples) {
  for (const Json& j : parsed) {
    for (const Json& v : j.at("layers")) {
      const int kind = v.at(2).get<int>();
      if ((kind == static_cast<int>(OpKind::kR)) != recompute) continue;
      (*samples)[{v.at(1).get<int>(), kind}].push_back(v.at(3).get<double>());
    }
  }
}

// One rank's report's held and weight bytes per layer ("held_bytes", "param_bytes"), into
// `bytes` as the largest seen.
void AddSplitBytes(const Json& report,
                   std::map<int, Measurements::SplitBytes>* bytes) {
  for (const Json& v : report.at("held_bytes")) {
    Measurements::SplitBytes& b = (*bytes)[v.at(0).get<int>()];
    const double held = v.at(2).get<double>();
    double& into = v.at(1).get<int>() == static_cast<int>(OpKind::kF) ? b.after_f : b.after_b;
    into = std::max(into, held);
  }
  for (const Json& v : report.at("param_bytes")) {
    Measurements::SplitBytes& b = (*bytes)[v.at(0).get<int>()];
    b.params = std::max(b.params, v.at(1).get<double>());
  }
}

// Sum over (layer, kind) of the median of the samples: how the model's costs stand so far.
double SummedMedians(const std::map<std::pair<int, int>, std::vector<double>>& samples) {
  double total = 0;
  for (const auto& [key, v] : samples) total += Median(v);
  return total;
}

// One launch's parsed reports, and whether its ranks ran mirrored.
struct Launched {
  std::vector<Json> parsed;
  bool mirrored = false;
};
struct Settled {
  int launches = 0;
  double last_change = 0;  // of the summed medians over the last launch
};

// Launches `launch_once(n)` (n = 0, 1, ...), adding each launch's F/B/W layer times to
// `samples`, until their summed medians settle (change <= --stable) or --max_launches; each
// launch's sum goes to `err` as "octopipe profile: [LABEL ]launch N[ (ranks mirrored)]: summed
// layer medians T (C change)".
absl::StatusOr<Settled> LaunchUntilSettled(
    const ProfileFlags& f, const std::string& label,
    std::map<std::pair<int, int>, std::vector<double>>* samples, std::ostream& err,
    const std::function<absl::StatusOr<Launched>(int launch)>& launch_once) {
  Settled settled;
  double previous = 0;
  for (int launch = 0; launch < f.max_launches; ++launch) {
    ASSIGN_OR_RETURN(const Launched run, launch_once(launch));
    AddLayerSamples(run.parsed, /*recompute=*/false, samples);
    settled.launches = launch + 1;
    const double total = SummedMedians(*samples);
    settled.last_change = previous > 0 ? std::abs(total - previous) / total : 1.0;
    err << "octopipe profile: " << (label.empty() ? "" : label + " ") << "launch " << launch + 1
        << (run.mirrored ? " (ranks mirrored)" : "") << ": summed layer medians "
        << FormatSeconds(total);
    if (launch > 0) err << " (" << FormatPercent(settled.last_change) << " change)";
    err << "\n";
    if (launch > 0 && settled.last_change <= f.stable) break;
    previous = total;
  }
  return settled;
}

// The per-op overhead, comm CPU, host probe, ping-pong and all-reduce samples of one F/B/W
// launch.
void AddRunFigures(const std::vector<Json>& parsed, Measurements* m) {
  for (const Json& j : parsed) {
    for (const Json& v : j.at("overhead")) m->overhead.push_back(v.get<double>());
    for (const Json& v : j.at("comm_cpu")) m->comm_cpu.push_back(v.get<double>());
    m->probe.push_back(j.at("probe").get<double>());
    for (const Json& v : j.at("link")) {
      m->link.push_back({v.at(0).get<double>(), v.at(1).get<double>()});
    }
    for (const Json& v : j.at("allreduce")) {
      m->allreduce.push_back({v.at(0).get<double>(), v.at(1).get<double>()});
    }
    for (const Json& v : j.at("allreduce_overlapped")) {
      m->allreduce_overlapped.push_back({v.at(0).get<double>(), v.at(1).get<double>()});
    }
  }
}

}  // namespace

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
  // The producers come from the pipeline's edges (core/pipeline_edges.h); only those on another
  // device carry a message (R's edges never leave the stage, so recompute is left out).
  const PipelineShape shape{plan.num_stages(), plan.num_devices, plan.vocab_parallel, nullptr};
  std::vector<double> out;
  for (const auto& [key, c] : ops) {
    const auto [it, s, m, kind] = key;
    const OpKind consumer = static_cast<OpKind>(kind);
    if (IsVocabPass(consumer)) continue;
    std::vector<std::tuple<int, int, int, int>> producers;
    ForEachPredecessor(shape, consumer, s, [](int) { return OpKind::kB; },
                       [&](OpKind producer, int stage) {
                         if (IsVocabPass(producer) ||
                             plan.stages[stage].device == plan.stages[s].device) {
                           return;
                         }
                         producers.push_back({it, stage, m, static_cast<int>(producer)});
                         // The previous backward ran split (B) or whole (BW).
                         if (producer == OpKind::kB) {
                           producers.push_back({it, stage, m, static_cast<int>(OpKind::kBW)});
                         }
                       });
    for (const auto& pk : producers) {
      auto p = ops.find(pk);
      if (p == ops.end() || !(c.prev_end < p->second.end)) continue;
      out.push_back(c.start - p->second.end);
    }
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

RankLaunch Launch(const ProfileFlags& f) {
  // f.transport was checked by ParseTransportKind before any launch.
  return RankLaunch{static_cast<int>(f.ranks), *executor::ParseTransportKind(f.transport),
                    f.timeout, f.rotate_cores_ms};
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

// The splits --tp and --ep name for `spec` over f.ranks ranks, as (tp, ep): `off` none; `auto`
// every power of two d in [2, ranks] dividing ranks that the model allows (CheckLayoutRunnable;
// EP also the micro-batches, and only with MoE layers); a list, each checked (kInvalidArgument
// naming the flag, the degree and, for a layer that cannot be split so, the layer and field).
absl::StatusOr<std::vector<std::pair<int, int>>> Splits(const ProfileFlags& f,
                                                        const ModelSpec& spec) {
  const int ranks = static_cast<int>(f.ranks);
  const ModelGraph graph = executor::ToModelGraph(spec);
  const bool has_moe = std::count(spec.kinds.begin(), spec.kinds.end(), "moe") > 0;
  // Why split (tp, ep) cannot be measured here; OK when it can.
  auto measurable = [&](int tp, int ep) -> absl::Status {
    if (ranks % (tp * ep) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("does not divide --ranks=", ranks));
    }
    if (ep > 1 && !has_moe) return absl::InvalidArgumentError("needs MoE layers; the model has none");
    if (spec.microbatches % ep != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("does not divide the ", spec.microbatches, " micro-batches"));
    }
    ASSIGN_OR_RETURN(auto p, SplitProfilePlan(spec, graph, ranks, tp, ep, false));
    RETURN_IF_ERROR(executor::CheckLayoutRunnable(spec, p.second));
    return absl::OkStatus();
  };
  std::vector<std::pair<int, int>> out;
  for (const auto& [flag, value, is_tp] :
       {std::tuple{"tp", f.tp, true}, std::tuple{"ep", f.ep, false}}) {
    const bool tp_flag = is_tp;
    auto split = [tp_flag](int d) { return tp_flag ? std::pair{d, 1} : std::pair{1, d}; };
    if (value == "off") continue;
    if (value == "auto") {
      for (int d = 2; d <= ranks; d *= 2) {
        if (measurable(split(d).first, split(d).second).ok()) out.push_back(split(d));
      }
      continue;
    }
    for (absl::string_view part : absl::StrSplit(value, ',')) {
      int d = 0;
      if (!absl::SimpleAtoi(part, &d) || d < 2) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--", flag, ": '", std::string(part),
            "' is not a degree >= 2 (a list such as 2,4, auto or off)"));
      }
      if (absl::Status s = measurable(split(d).first, split(d).second); !s.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", flag, ": degree ", d, ": ", s.message()));
      }
      if (std::find(out.begin(), out.end(), split(d)) == out.end()) out.push_back(split(d));
    }
  }
  return out;
}

// "TP2", "EP2", "TP2 x EP2".
std::string SplitName(std::pair<int, int> split) {
  if (split.second == 1) return absl::StrCat("TP", split.first);
  if (split.first == 1) return absl::StrCat("EP", split.second);
  return absl::StrCat("TP", split.first, " x EP", split.second);
}

// Phase 1 (`plan`): F, B, W, the per-op overhead, the messages and the ping-pong, in fresh
// launches of the ranks (every other one mirrored: a rank's core, or the rank itself, can run
// slower for a whole launch on a shared machine, and a layer then is timed on both) until the
// summed layer medians settle (--stable) or --max_launches; phase 2 (`plan_r`, every stage
// recomputed): R. Progress goes to `err`.
absl::StatusOr<Measurements> MeasureLayers(const ModelSpec& spec, const Plan& plan,
                                           const Plan& plan_r, const ProfileFlags& f,
                                           const std::vector<size_t>& allreduce_bytes,
                                           std::ostream& err) {
  Measurements m;
  const Plan mirrored = Mirrored(plan);
  ASSIGN_OR_RETURN(
      const Settled settled,
      LaunchUntilSettled(f, "", &m.samples, err,
                         [&](int launch) -> absl::StatusOr<Launched> {
                           const bool mirror = launch % 2 == 1 && f.ranks > 1;
                           ASSIGN_OR_RETURN(std::vector<std::string> reports,
                                            RunProfileRanks(spec, mirror ? mirrored : plan,
                                                            Launch(f),
                                                            static_cast<int>(f.repeat),
                                                            /*ping=*/launch == 0,
                                                            /*probe=*/true, /*layout=*/nullptr,
                                                            allreduce_bytes));
                           ASSIGN_OR_RETURN(std::vector<Json> parsed, ParseReports(reports));
                           AddRunFigures(parsed, &m);
                           if (launch == 0) {
                             m.message_s = MessageTimes(plan, parsed);
                             m.light_s = MedianIteration(parsed);
                           }
                           return Launched{std::move(parsed), mirror};
                         }));
  m.launches = settled.launches;
  m.last_change = settled.last_change;
  ASSIGN_OR_RETURN(std::vector<std::string> reports,
                   RunProfileRanks(spec, plan_r, Launch(f), static_cast<int>(f.repeat),
                                   /*ping=*/false));
  ASSIGN_OR_RETURN(const std::vector<Json> parsed, ParseReports(reports));
  AddLayerSamples(parsed, /*recompute=*/true, &m.samples);
  return m;
}

absl::StatusOr<int> MeasureWhileHostDiffers(
    double reference, int max_attempts, const std::string& label, std::ostream& err,
    const std::function<absl::StatusOr<double>(int attempt)>& attempt) {
  const int most = std::max(1, max_attempts);
  int kept = -1;
  double closest = std::numeric_limits<double>::infinity();
  for (int n = 0; n < most; ++n) {
    absl::StatusOr<double> probe = attempt(n);
    if (!probe.ok()) {
      if (kept < 0) return probe.status();
      err << "octopipe profile: " << label << ": attempt " << n + 1 << " failed ("
          << probe.status().message() << "); keeping attempt " << kept + 1 << "\n";
      return kept;
    }
    if (!(reference > 0)) return n;  // nothing to compare: the first attempt stands
    // An attempt without a probe counts as the farthest off.
    const double off = *probe > 0 ? std::abs(*probe / reference - 1)
                                  : std::numeric_limits<double>::infinity();
    if (kept < 0 || off < closest) {
      closest = off;
      kept = n;
    }
    if (closest <= kProbeDrift) break;
    if (n + 1 < most) {
      err << "octopipe profile: " << label << ": the host-speed probe "
          << (*probe > 0 ? absl::StrFormat("ran %.3fx", *probe / reference)
                         : std::string("timed nothing"))
          << " the F/B/W launches'; measuring again (attempt " << n + 2 << " of " << most
          << ")\n";
    }
  }
  return kept;
}

// Phase 4 (--tp, --ep): see profile_measure.h.
absl::Status MeasureSplits(const ModelSpec& spec, const ModelGraph& graph,
                           const std::vector<std::pair<int, int>>& splits, const ProfileFlags& f,
                           Measurements* m, std::ostream& err) {
  const int ranks = static_cast<int>(f.ranks);
  const double reference = executor::MedianProbeSeconds(m->probe);
  for (const auto& [tp, ep] : splits) {
    ASSIGN_OR_RETURN(const auto run, SplitProfilePlan(spec, graph, ranks, tp, ep, false));
    ASSIGN_OR_RETURN(const auto run_r, SplitProfilePlan(spec, graph, ranks, tp, ep, true));
    struct Attempt {
      std::map<std::pair<int, int>, std::vector<double>> samples;
      std::vector<double> probe;
    };
    std::vector<Attempt> attempts;
    const std::string name = SplitName({tp, ep});
    auto measure = [&](int) -> absl::StatusOr<double> {
      Attempt& a = attempts.emplace_back();
      RETURN_IF_ERROR(
          LaunchUntilSettled(f, name, &a.samples, err,
                             [&](int) -> absl::StatusOr<Launched> {
                               ASSIGN_OR_RETURN(std::vector<std::string> reports,
                                                RunProfileRanks(spec, run.first, Launch(f),
                                                                static_cast<int>(f.repeat),
                                                                /*ping=*/false, /*probe=*/true,
                                                                &run.second));
                               ASSIGN_OR_RETURN(std::vector<Json> parsed,
                                                ParseReports(reports));
                               // Bytes do not follow the host's speed: every attempt's
                               // count (the largest over them all).
                               for (const Json& j : parsed) {
                                 a.probe.push_back(j.at("probe").get<double>());
                                 AddSplitBytes(j, &m->split_bytes[{tp, ep}]);
                               }
                               return Launched{std::move(parsed), false};
                             })
              .status());
      return executor::MedianProbeSeconds(a.probe);
    };
    ASSIGN_OR_RETURN(const int kept,
                     MeasureWhileHostDiffers(reference, kSplitAttempts, name, err, measure));
    Attempt& a = attempts[kept];
    auto& samples = m->split[{tp, ep}];
    samples = std::move(a.samples);
    m->split_probe[{tp, ep}] = std::move(a.probe);
    m->split_attempts[{tp, ep}] = static_cast<int>(attempts.size());
    ASSIGN_OR_RETURN(std::vector<std::string> reports,
                     RunProfileRanks(spec, run_r.first, Launch(f), static_cast<int>(f.repeat),
                                     /*ping=*/false, /*probe=*/false, &run_r.second));
    ASSIGN_OR_RETURN(const std::vector<Json> parsed, ParseReports(reports));
    AddLayerSamples(parsed, /*recompute=*/true, &samples);
  }
  return absl::OkStatus();
}

}  // namespace octopipe::cli
