#include "tuner/node_loss.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"

namespace octopipe {
namespace {

// A layer shard as a rank holds it: layer, TP rank of TP degree, EP rank of EP degree.
using Shard = std::tuple<int, int, int, int, int>;

// Every shard each rank of `plan` holds.
std::vector<std::vector<Shard>> ShardsByRank(const LayoutPlan& plan) {
  std::vector<std::vector<Shard>> out(plan.num_ranks);
  const std::vector<RankRole> roles = RankRoles(plan);
  for (int r = 0; r < plan.num_ranks; ++r) {
    const RankRole& role = roles[r];
    for (const StageAssignment& st : plan.pipelines[role.pipeline].plan.stages) {
      if (st.device != role.device) continue;
      for (int l = st.first_layer; l <= st.last_layer; ++l) {
        out[r].push_back({l, plan.layout.tp, role.tp_rank, plan.layout.ep, role.ep_rank});
      }
    }
  }
  return out;
}

// GPU index of every slot in `cluster` (node order, then the node's GPUs); -1 for a slot on
// none of its nodes.
int GpuOf(const Cluster& cluster, const GpuSlot& slot) {
  int first = 0;
  for (const Node& n : cluster.nodes) {
    if (n.name == slot.first) return slot.second < n.num_devices ? first + slot.second : -1;
    first += n.num_devices;
  }
  return -1;
}

// The cluster of `slots`' GPUs: the nodes of `left` that hold any, in its order, each with as
// many devices as slots on it; `slots` must be sorted in that order (SortSlots).
Cluster ClusterOf(const Cluster& left, const std::vector<GpuSlot>& slots) {
  Cluster c = left;
  c.nodes.clear();
  for (const Node& n : left.nodes) {
    const int used = static_cast<int>(std::count_if(
        slots.begin(), slots.end(), [&](const GpuSlot& s) { return s.first == n.name; }));
    if (used == 0) continue;
    Node m = n;
    m.num_devices = used;
    c.nodes.push_back(m);
  }
  return c;
}

// One surviving (or shrunk) replica: its pipeline devices as GPU slots of TP groups.
struct Survivor {
  int old_pipeline = 0;     // in the current layout
  int old_dp_rank = 0;      // in the current layout
  bool whole = true;        // every device survived: the old partition applies
  std::vector<std::vector<GpuSlot>> groups;  // per pipeline device: its TP group's slots
  double per_microbatch_s = 0;  // predicted seconds per micro-batch (for the shares)
  int share = 0;
};

// Splits `global` micro-batches over `weights` (> 0) in proportion, each at least 1, by the
// largest remainders; empty when there are fewer micro-batches than replicas.
std::vector<int> Shares(int global, const std::vector<double>& weights) {
  const int n = static_cast<int>(weights.size());
  if (n == 0 || global < n) return {};
  double sum = 0;
  for (double w : weights) sum += w;
  std::vector<int> out(n, 1);
  std::vector<double> rest(n);
  int left = global - n;
  const int spread = left;
  for (int i = 0; i < n; ++i) {
    const double exact = spread * weights[i] / sum;
    out[i] += static_cast<int>(std::floor(exact));
    left -= static_cast<int>(std::floor(exact));
    rest[i] = exact - std::floor(exact);
  }
  while (left > 0) {
    int best = 0;
    for (int i = 1; i < n; ++i) {
      if (rest[i] > rest[best]) best = i;
    }
    ++out[best];
    rest[best] = -1;
    --left;
  }
  return out;
}

// Tunes each distinct (pipeline, share) of `survivors` and assembles the option's LayoutPlan
// on the GPUs they use: survivor i becomes dp rank i, so with `ep` > 1 the survivors must come
// as whole EP groups in order (each group's replicas by EP rank, with one pipeline and share).
absl::StatusOr<NodeLossOption> Assemble(const std::string& kind, const ModelGraph& model,
                                        const Cluster& left, const CostModel& cost,
                                        const TunerOptions& tuner, double budget_s,
                                        const NodeLossRequest& request,
                                        const std::vector<Survivor>& survivors, int ep = 1) {
  const LayoutPlan& current = request.current;
  NodeLossOption out;
  out.kind = kind;
  // Ranks: the used GPUs in the cluster's order.
  for (const Survivor& s : survivors) {
    for (const auto& group : s.groups) out.slots.insert(out.slots.end(), group.begin(), group.end());
  }
  std::sort(out.slots.begin(), out.slots.end(), [&](const GpuSlot& a, const GpuSlot& b) {
    return GpuOf(left, a) < GpuOf(left, b);
  });
  out.cluster = ClusterOf(left, out.slots);
  auto rank_of = [&](const GpuSlot& s) {
    return static_cast<int>(std::find(out.slots.begin(), out.slots.end(), s) - out.slots.begin());
  };
  LayoutPlan& plan = out.plan;
  plan.layout = current.layout;
  plan.layout.dp = static_cast<int>(survivors.size());
  plan.layout.ep = ep;
  plan.layout.pp = 0;
  plan.num_ranks = static_cast<int>(out.slots.size());
  plan.global_microbatches = current.global_microbatches;
  // With EP: how many replicas of EP group 0 start on the node of its first (what
  // SimulateLayout derives from the plan, EpRanksPerNode), so the tuner costs the all-to-all
  // the layout will run.
  int ep_ranks_per_node = 0;
  if (ep > 1 && static_cast<int>(survivors.size()) >= ep) {
    const std::string& node = survivors[0].groups.front().front().first;
    for (int r = 0; r < ep; ++r) {
      ep_ranks_per_node += survivors[r].groups.front().front().first == node ? 1 : 0;
    }
  }
  const ModelGraph lmodel = ModelForLayout(model, plan.layout, ep_ranks_per_node);
  // Distinct pipelines: (old pipeline, whole, device count, share).
  std::map<std::tuple<int, bool, size_t, int>, int> pipeline_of;
  int tunes = 0;
  for (const Survivor& s : survivors) {
    tunes += pipeline_of.emplace(std::make_tuple(s.old_pipeline, s.whole, s.groups.size(), s.share),
                                 0).second ? 1 : 0;
  }
  pipeline_of.clear();
  // The executor splits a head only with TP 1 and replicas of one pipeline (ValidateLayoutPlan):
  // otherwise the pipelines keep it whole, as in the layout search.
  const bool head_splittable = plan.layout.tp == 1 && tunes == 1;
  int first_microbatch = 0;
  for (size_t i = 0; i < survivors.size(); ++i) {
    const Survivor& s = survivors[i];
    const auto key = std::make_tuple(s.old_pipeline, s.whole, s.groups.size(), s.share);
    auto it = pipeline_of.find(key);
    std::vector<int> device_ranks;
    std::vector<int> first_gpus;
    for (const auto& group : s.groups) {
      device_ranks.push_back(rank_of(group.front()));
      first_gpus.push_back(device_ranks.back());
    }
    plan.layout.pp = std::max(plan.layout.pp, static_cast<int>(s.groups.size()));
    if (it == pipeline_of.end()) {
      TunerOptions o = tuner;
      o.num_devices = static_cast<int>(s.groups.size());
      o.num_microbatches = s.share;
      if (!head_splittable) o.vocab_parallel = VocabParallelMode::kOff;
      o.time_budget_s = std::max(1e-3, budget_s / std::max(1, tunes));
      o.seed_stages = s.whole ? current.pipelines[s.old_pipeline].plan.stages
                              : std::vector<StageAssignment>{};
      const Cluster pc = PipelineCluster(
          out.cluster, first_gpus, absl::StrCat(left.name, " / ", kind, " replica ", i));
      ASSIGN_OR_RETURN(TuneResult r, Tune(lmodel, pc, cost, o));
      if (!r.feasible) {
        return absl::FailedPreconditionError(
            absl::StrCat(kind, ": replica ", i, " does not fit: ", r.infeasible_reason));
      }
      it = pipeline_of.emplace(key, static_cast<int>(plan.pipelines.size())).first;
      LayoutPipelinePlan lp;
      lp.plan = r.plan;
      plan.pipelines.push_back(std::move(lp));
      out.tunes.push_back(std::move(r));
    }
    PipelineReplica rep;
    rep.dp_rank = static_cast<int>(i);
    rep.first_microbatch = first_microbatch;
    rep.device_ranks = device_ranks;
    first_microbatch += s.share;
    plan.pipelines[it->second].replicas.push_back(std::move(rep));
  }
  RETURN_IF_ERROR(ValidateLayoutPlan(plan, model.num_layers()));
  ASSIGN_OR_RETURN(out.predicted, SimulateLayout(model, out.cluster, cost, plan,
                                                 tuner.link_contention,
                                                 tuner.layer_time_factors));
  CostSwitch(lmodel, out.cluster, cost, request, &out);
  return out;
}

// With expert parallelism (ep > 1, dp / ep >= 2 EP groups, each holding every expert): the
// "drop replicas" option that keeps each EP group whose replicas all survived whole (`whole`),
// renumbered in order so every replica keeps its EP rank and with it its experts' shard. The
// replicas of a group exchange tokens in lock step, so they run one pipeline with one share:
// the global batch (a multiple of ep in a valid layout) is split as evenly as whole
// micro-batches allow over the groups, global / ep per replica of a group. Appends it to `out`
// when a group survives and it fits; errors are Assemble's invalid arguments.
absl::Status DropExpertGroups(const ModelGraph& model, const Cluster& left, const CostModel& cost,
                              const TunerOptions& tuner, const NodeLossRequest& request,
                              double budget_s, const std::vector<Survivor>& whole,
                              std::vector<NodeLossOption>* out) {
  const LayoutPlan& current = request.current;
  const int ep = current.layout.ep, groups = current.layout.dp / ep;
  const int global = current.global_microbatches;
  if (groups < 2 || global % ep != 0) return absl::OkStatus();  // experts not replicated
  std::vector<int> survived(groups, 0);
  for (const Survivor& s : whole) ++survived[s.old_dp_rank / ep];
  std::vector<Survivor> kept;
  for (const Survivor& s : whole) {
    if (survived[s.old_dp_rank / ep] == ep) kept.push_back(s);
  }
  std::sort(kept.begin(), kept.end(), [](const Survivor& a, const Survivor& b) {
    return a.old_dp_rank < b.old_dp_rank;
  });
  const int kept_groups = static_cast<int>(kept.size()) / ep;
  if (kept_groups == 0) return absl::OkStatus();
  const std::vector<int> group_shares =
      Shares(global / ep, std::vector<double>(kept_groups, 1.0));
  if (group_shares.empty()) return absl::OkStatus();
  std::vector<int> shares;
  for (size_t i = 0; i < kept.size(); ++i) {
    kept[i].share = group_shares[i / ep];
    shares.push_back(kept[i].share);
  }
  absl::StatusOr<NodeLossOption> o =
      Assemble("drop replicas", model, left, cost, tuner, budget_s, request, kept, ep);
  if (!o.ok()) return absl::IsInvalidArgument(o.status()) ? o.status() : absl::OkStatus();
  o->summary = absl::StrCat(kept.size(), " of ", current.num_replicas(), " replicas (",
                            kept_groups, " of ", groups, " EP", ep, " groups) go on, ", global,
                            " micro-batches split ", absl::StrJoin(shares, "/"));
  out->push_back(std::move(*o));
  return absl::OkStatus();
}

}  // namespace

void CostSwitch(const ModelGraph& model, const Cluster& cluster, const CostModel& cost,
                const NodeLossRequest& request, NodeLossOption* option) {
  const LayoutPlan& current = request.current;
  const std::vector<std::vector<Shard>> held = ShardsByRank(current);
  std::map<GpuSlot, std::set<Shard>> by_gpu;
  std::map<std::string, std::set<Shard>> by_node;
  std::set<std::string> live;
  for (const Node& n : cluster.nodes) live.insert(n.name);
  for (int r = 0; r < current.num_ranks && r < static_cast<int>(request.current_slots.size());
       ++r) {
    const GpuSlot& slot = request.current_slots[r];
    by_gpu[slot].insert(held[r].begin(), held[r].end());
    if (live.count(slot.first)) by_node[slot.first].insert(held[r].begin(), held[r].end());
  }
  const std::vector<std::vector<Shard>> needed = ShardsByRank(option->plan);
  double slowest_s = 0, slowest_bytes = 0;
  for (int r = 0; r < option->plan.num_ranks && r < static_cast<int>(option->slots.size());
       ++r) {
    const GpuSlot& slot = option->slots[r];
    const int gpu = GpuOf(cluster, slot);
    if (gpu < 0) continue;  // not a GPU of `cluster`: a caller's error, nothing to cost
    const int node = cluster.node_of_device(gpu);
    const HardwareSpec& hw = cluster.device_hardware(gpu);
    double intra = 0, inter = 0;
    for (const Shard& s : needed[r]) {
      if (by_gpu[slot].count(s)) continue;
      const double bytes = cost.Cost(model.layers[std::get<0>(s)], model.training, hw).static_bytes;
      (by_node[slot.first].count(s) ? intra : inter) += bytes;
    }
    auto seconds = [](double bytes, const LinkSpec& link) {
      return bytes > 0 && link.bandwidth > 0 && std::isfinite(link.bandwidth)
                 ? bytes / link.bandwidth + link.latency_s
                 : 0.0;
    };
    const double s =
        seconds(intra, cluster.nodes[node].intra_node_link) + seconds(inter, cluster.inter_node_link);
    if (s > slowest_s || (s == slowest_s && intra + inter > slowest_bytes)) {
      slowest_s = s;
      slowest_bytes = intra + inter;
    }
  }
  option->moved_bytes = slowest_bytes;
  option->switch_s = request.restart_s + slowest_s;
  option->total_s = option->switch_s + std::max(0, request.remaining_iterations) *
                                           option->predicted.iteration_time_s;
}

absl::StatusOr<std::vector<NodeLossOption>> SurvivorOptions(const ModelGraph& model,
                                                            const Cluster& cluster_left,
                                                            const CostModel& cost,
                                                            const TunerOptions& tuner,
                                                            const NodeLossRequest& request) {
  const LayoutPlan& current = request.current;
  RETURN_IF_ERROR(ValidateLayoutPlan(current, model.num_layers()));
  if (static_cast<int>(request.current_slots.size()) != current.num_ranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("current_slots: ", request.current_slots.size(), " slots for ",
                     current.num_ranks, " ranks of the current layout"));
  }
  std::vector<NodeLossOption> out;
  for (const LayoutPipelinePlan& p : current.pipelines) {
    if (p.plan.vocab_parallel) return out;  // one pipeline's replicas only: a new layout
  }
  // Which replicas survive whole, and what the broken ones kept.
  std::vector<Survivor> whole, shrunk;
  const int tp = current.layout.tp;
  for (size_t p = 0; p < current.pipelines.size(); ++p) {
    for (const PipelineReplica& rep : current.pipelines[p].replicas) {
      Survivor s;
      s.old_pipeline = static_cast<int>(p);
      s.old_dp_rank = rep.dp_rank;
      bool all = true;
      for (int first : rep.device_ranks) {
        std::vector<GpuSlot> group;
        bool alive = true;
        for (int t = 0; t < tp; ++t) {
          const GpuSlot& slot = request.current_slots[first + t];
          alive = alive && GpuOf(cluster_left, slot) >= 0;
          group.push_back(slot);
        }
        if (alive) s.groups.push_back(std::move(group));
        all = all && alive;
      }
      s.whole = all;
      if (all) {
        whole.push_back(std::move(s));
      } else if (!s.groups.empty()) {
        shrunk.push_back(std::move(s));
      }
    }
  }
  if (whole.empty() && shrunk.empty()) return out;
  const int global = current.global_microbatches;
  const double budget = std::max(1e-3, tuner.time_budget_s);
  if (current.layout.ep > 1) {  // whole EP groups only; no re-partition (see the header)
    RETURN_IF_ERROR(
        DropExpertGroups(model, cluster_left, cost, tuner, request, budget, whole, &out));
    return out;
  }
  if (!whole.empty()) {
    std::vector<Survivor> drop = whole;
    const std::vector<int> shares = Shares(global, std::vector<double>(drop.size(), 1.0));
    if (!shares.empty()) {
      for (size_t i = 0; i < drop.size(); ++i) drop[i].share = shares[i];
      absl::StatusOr<NodeLossOption> o = Assemble(
          "drop replicas", model, cluster_left, cost, tuner,
          shrunk.empty() ? budget : budget / 2, request, drop);
      if (o.ok()) {
        o->summary = absl::StrCat(drop.size(), " of ", current.num_replicas(),
                                  " replicas go on, ", global, " micro-batches split ",
                                  absl::StrJoin(shares, "/"));
        out.push_back(std::move(*o));
      } else if (absl::IsInvalidArgument(o.status())) {
        return o.status();
      }
    }
  }
  if (!shrunk.empty()) {
    // Shares in proportion to throughput: each pipeline's predicted seconds per micro-batch
    // at the old share (whole replicas: the current layout's; shrunk ones: tuned for it).
    std::vector<Survivor> all = whole;
    all.insert(all.end(), shrunk.begin(), shrunk.end());
    const int old_share = std::max(1, global / std::max(1, current.num_replicas()));
    for (Survivor& s : all) s.share = old_share;
    absl::StatusOr<NodeLossOption> probe =
        Assemble("re-partition", model, cluster_left, cost, tuner, budget / 4, request, all);
    if (!probe.ok() && absl::IsInvalidArgument(probe.status())) return probe.status();
    if (probe.ok()) {
      std::vector<double> weights;
      for (size_t i = 0; i < all.size(); ++i) {
        // Replica i is dp_rank i of the probe: its pipeline's time.
        double t = 0;
        for (size_t p = 0; p < probe->plan.pipelines.size(); ++p) {
          for (const PipelineReplica& rep : probe->plan.pipelines[p].replicas) {
            if (rep.dp_rank == static_cast<int>(i)) t = probe->predicted.pipeline_iteration_s[p];
          }
        }
        weights.push_back(t > 0 ? old_share / t : 1.0);
      }
      const std::vector<int> shares = Shares(global, weights);
      if (!shares.empty()) {
        for (size_t i = 0; i < all.size(); ++i) all[i].share = shares[i];
        absl::StatusOr<NodeLossOption> o = Assemble("re-partition", model, cluster_left, cost,
                                                    tuner, budget / 4, request, all);
        if (o.ok()) {
          o->summary = absl::StrCat(whole.size(), " whole and ", shrunk.size(),
                                    " re-partitioned replica(s), ", global,
                                    " micro-batches split ", absl::StrJoin(shares, "/"));
          out.push_back(std::move(*o));
        } else if (absl::IsInvalidArgument(o.status())) {
          return o.status();
        }
      }
    }
  }
  return out;
}

}  // namespace octopipe
