#include "tuner/layout_simulation.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "simulator/evaluator.h"
#include "simulator/pipeline_rules.h"
#include "simulator/problem_builder.h"

namespace octopipe {
namespace {

// Which shard of which layer a gradient bucket sums: ranks with equal keys form its DP group.
// Ordered as every rank runs its buckets: layers descending, then the part.
struct BucketKey {
  int neg_layer = 0;  // -layer
  int part = 0;       // 0: the layer, or a MoE layer's dense part; 1: its experts
  int kind = 0;       // 0: a TP shard, 1: an EP rank's experts, 2: a vocabulary shard
  int tp_rank = 0;
  int index = 0;      // the EP rank (kind 1), the pipeline device (kind 2), else 0

  bool operator<(const BucketKey& o) const {
    return std::tie(neg_layer, part, kind, tp_rank, index) <
           std::tie(o.neg_layer, o.part, o.kind, o.tp_rank, o.index);
  }
};

struct Group {
  std::vector<int> members;  // ranks, ascending
  std::vector<double> ready;  // per member
  double bytes = 0;
};

// One distinct pipeline's evaluation, its times from the start of its iteration.
struct PipelineRun {
  double iteration_s = 0;
  bool fits = true;
  std::vector<double> device_end;   // DeviceEnd
  std::vector<double> stage_ready;  // end of the stage's last W or BW (its device's end if none)
  std::vector<double> busy_s, peak_bytes, peak_activation_bytes;  // per device
  std::vector<int64_t> vocab_columns;      // with vocab_parallel: per device
  std::optional<ProblemBuilder> builder;
};

absl::Status Prefixed(const absl::Status& s, const std::string& where) {
  return absl::Status(s.code(), absl::StrCat(where, ": ", s.message()));
}


// Per layer: the share of a MoE layer's per-rank parameters that are its experts under the
// model's EP degree (0 for other layers, or without EP), from the cost model's parameter counts
// at EP 1 and at EP ep (measured parameter sizes left out).
std::vector<double> ExpertShares(const ModelGraph& model, const CostModel& cost,
                                 const Cluster& cluster) {
  std::vector<double> share(model.layers.size(), 0.0);
  const int64_t ep = model.training.ep_degree;
  if (ep <= 1) return share;
  const HardwareSpec hw = cluster.hardware.empty() ? HardwareSpec{} : cluster.hardware[0];
  TrainingOptions ep1 = model.training;
  ep1.ep_degree = 1;
  for (size_t l = 0; l < model.layers.size(); ++l) {
    if (model.layers[l].kind != LayerKind::kMoe) continue;
    Layer layer = model.layers[l];
    layer.measured.param_bytes.reset();
    const double with_ep = cost.Cost(layer, model.training, hw).param_count;
    const double without = cost.Cost(layer, ep1, hw).param_count;
    const double experts = (without - with_ep) / static_cast<double>(ep - 1);
    share[l] = with_ep > 0 ? std::clamp(experts / with_ep, 0.0, 1.0) : 0.0;
  }
  return share;
}

absl::StatusOr<PipelineRun> RunPipeline(const ModelGraph& model, const Cluster& cluster,
                                        const CostModel& cost, const LayoutPlan& plan, int p,
                                        bool link_contention,
                                        const std::vector<double>& layer_time_factors) {
  const LayoutPipelinePlan& pipe = plan.pipelines[p];
  const Plan& pl = pipe.plan;
  const std::string where = absl::StrCat("pipelines[", p, "].plan");
  const Cluster pc =
      PipelineCluster(cluster, pipe.replicas[0].device_ranks,
                      absl::StrCat(cluster.name, " / ", plan.layout.ToString(), " pipeline ", p));
  PipelineRun run;
  absl::StatusOr<ProblemBuilder> builder = ProblemBuilder::Create(
      model, pc, cost, pl.num_devices, layer_time_factors, pl.vocab_parallel);
  if (!builder.ok()) return Prefixed(builder.status(), where);
  run.builder.emplace(std::move(*builder));
  absl::StatusOr<PipelineProblem> problem = run.builder->Build(pl);
  if (!problem.ok()) return Prefixed(problem.status(), where);
  problem->link_contention = link_contention;
  EvalOptions options;
  options.timeline = true;
  absl::StatusOr<SimResult> sim = Simulate(*problem, pl.schedule, options);
  if (!sim.ok()) return Prefixed(sim.status(), where);
  const PipelineProblem& pb = *problem;
  const int P = pl.num_devices;
  run.iteration_s = sim->iteration_time_s;
  run.fits = sim->fits_memory;
  // The evaluator's frame: the iteration starts at the earliest (first op - DeviceEarliestStart).
  double origin = std::numeric_limits<double>::infinity();
  for (int d = 0; d < P; ++d) {
    if (!sim->op_start_s[d].empty()) {
      origin = std::min(origin, sim->op_start_s[d][0] - DeviceEarliestStart(pb, d));
    }
  }
  if (!(origin < std::numeric_limits<double>::infinity())) origin = 0;
  double b0_end = 0;  // stage 0's last B or BW
  {
    const int d0 = pb.stage_device[0];
    const std::vector<Op>& ops = pl.schedule.ops[d0];
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].stage == 0 && (ops[i].kind == OpKind::kB || ops[i].kind == OpKind::kBW)) {
        b0_end = sim->op_end_s[d0][i];
      }
    }
  }
  run.device_end.assign(P, 0.0);
  run.busy_s.assign(P, 0.0);
  run.peak_bytes.assign(P, 0.0);
  run.peak_activation_bytes.assign(P, 0.0);
  for (int d = 0; d < P; ++d) {
    if (!sim->op_end_s[d].empty()) {
      run.device_end[d] = DeviceEnd(pb, d, sim->op_end_s[d].back(), b0_end) - origin;
    }
    run.busy_s[d] = sim->devices[d].busy_s;
    run.peak_bytes[d] = sim->devices[d].peak_memory_bytes;
    run.peak_activation_bytes[d] = PeakActivationBytes(pb, *sim, d);
  }
  const int S = pl.num_stages();
  std::vector<double> last_grad(S, -1.0);
  std::vector<bool> has_grad(S, false);
  for (int d = 0; d < P; ++d) {
    const std::vector<Op>& ops = pl.schedule.ops[d];
    for (size_t i = 0; i < ops.size(); ++i) {
      if ((ops[i].kind == OpKind::kW || ops[i].kind == OpKind::kBW) && ops[i].stage < S) {
        last_grad[ops[i].stage] = sim->op_end_s[d][i] - origin;
        has_grad[ops[i].stage] = true;
      }
    }
  }
  run.stage_ready.assign(S, 0.0);
  for (int s = 0; s < S; ++s) {
    run.stage_ready[s] = has_grad[s] ? last_grad[s] : run.device_end[pl.stages[s].device];
  }
  if (pl.vocab_parallel) {
    absl::StatusOr<std::vector<int64_t>> columns =
        PlanVocabShardColumns(pl, run.builder->vocab());
    if (!columns.ok()) return Prefixed(columns.status(), where);
    run.vocab_columns = std::move(*columns);
  }
  return run;
}

}  // namespace

// Of the replicas of EP group 0 (dp ranks [0, ep)), how many have their first pipeline
// device's TP group on the node of dp rank 0's (RankMap::EpRanksPerNode in tuner/layout.cc).
int EpRanksPerNode(const Cluster& cluster, const LayoutPlan& plan) {
  const int ep = plan.layout.ep;
  if (ep <= 1) return 0;
  std::vector<int> first_gpu(plan.layout.dp, 0);
  for (const LayoutPipelinePlan& pipe : plan.pipelines) {
    for (const PipelineReplica& rep : pipe.replicas) first_gpu[rep.dp_rank] = rep.device_ranks[0];
  }
  const int node = cluster.node_of_device(first_gpu[0]);
  int n = 0;
  for (int r = 0; r < ep; ++r) n += cluster.node_of_device(first_gpu[r]) == node ? 1 : 0;
  return n;
}

Cluster PipelineCluster(const Cluster& cluster, const std::vector<int>& device_first_gpus,
                        const std::string& name) {
  Cluster c;
  c.name = name;
  c.hardware = cluster.hardware;
  c.inter_node_link = cluster.inter_node_link;
  c.memory_reserve_bytes = cluster.memory_reserve_bytes;
  int last_node = -1;
  for (int gpu : device_first_gpus) {
    const int node = cluster.node_of_device(gpu);
    if (node != last_node) {
      Node n = cluster.nodes[node];
      n.num_devices = 0;
      c.nodes.push_back(n);
      last_node = node;
    }
    ++c.nodes.back().num_devices;
  }
  return c;
}

ModelGraph ModelForLayout(const ModelGraph& model, const ParallelLayout& layout,
                          int ep_ranks_per_node) {
  ModelGraph m = model;
  m.training.tp_degree = layout.tp;
  m.training.ep_degree = layout.ep;
  m.training.ep_ranks_per_node = layout.ep > 1 ? ep_ranks_per_node : 0;
  m.training.zero_degree = std::max<int64_t>(model.training.zero_degree, layout.dp);
  return m;
}

absl::StatusOr<LayoutSimulation> SimulateLayout(const ModelGraph& model, const Cluster& cluster,
                                                const CostModel& cost, const LayoutPlan& plan,
                                                bool link_contention,
                                                const std::vector<double>& layer_time_factors) {
  RETURN_IF_ERROR(ValidateLayoutPlan(plan, model.num_layers()));
  RETURN_IF_ERROR(CheckLayoutAgainstModel(plan.layout, model));
  if (absl::Status s = Validate(cluster); !s.ok()) return Prefixed(s, "cluster");
  if (plan.num_ranks > cluster.num_devices()) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_ranks: ", plan.num_ranks, " ranks but the cluster '", cluster.name,
                     "' has ", cluster.num_devices(), " GPUs"));
  }
  const ParallelLayout& l = plan.layout;
  for (size_t p = 0; p < plan.pipelines.size(); ++p) {
    const std::vector<PipelineReplica>& reps = plan.pipelines[p].replicas;
    for (size_t r = 0; r < reps.size(); ++r) {
      for (size_t d = 0; d < reps[r].device_ranks.size(); ++d) {
        const int first = reps[r].device_ranks[d], last = first + l.tp - 1;
        if (cluster.node_of_device(first) != cluster.node_of_device(last)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "pipelines[", p, "].replicas[", r, "].device_ranks[", d, "]: TP group ", first,
              "..", last, " spans nodes ", cluster.node_of_device(first), " and ",
              cluster.node_of_device(last), " (a TP group must sit inside one node)"));
        }
      }
    }
  }

  const ModelGraph lmodel = ModelForLayout(model, l, EpRanksPerNode(cluster, plan));
  std::vector<PipelineRun> runs;
  LayoutSimulation out;
  for (size_t p = 0; p < plan.pipelines.size(); ++p) {
    ASSIGN_OR_RETURN(PipelineRun run,
                     RunPipeline(lmodel, cluster, cost, plan, static_cast<int>(p),
                                 link_contention, layer_time_factors));
    out.pipeline_iteration_s.push_back(run.iteration_s);
    out.pipeline_time_s = std::max(out.pipeline_time_s, run.iteration_s);
    out.fits = out.fits && run.fits;
    runs.push_back(std::move(run));
  }

  // Every rank's gradient buckets, grouped by the shard they sum (executor/layout_trainer.cc).
  const int L = model.num_layers(), R = plan.num_ranks;
  const std::vector<double> expert_share = ExpertShares(lmodel, cost, cluster);
  const bool embedding_first = L > 0 && model.layers[0].kind == LayerKind::kEmbedding;
  const std::vector<RankRole> roles = RankRoles(plan);
  std::map<BucketKey, Group> groups;
  auto add = [&](const BucketKey& key, int rank, double ready, double bytes) {
    Group& g = groups[key];
    g.members.push_back(rank);
    g.ready.push_back(ready);
    g.bytes = std::max(g.bytes, bytes);
  };
  out.peak_memory_bytes.assign(R, 0.0);
  out.peak_activation_bytes.assign(R, 0.0);
  // Per rank: until when its all-reduces run beside compute (its last op's end; below, its
  // node's on an executor's ranks).
  std::vector<double> compute_end(R, 0.0);
  double busy = 0;
  for (int rank = 0; rank < R; ++rank) {
    const RankRole& role = roles[rank];
    const Plan& pl = plan.pipelines[role.pipeline].plan;
    const PipelineRun& run = runs[role.pipeline];
    const ProblemBuilder& b = *run.builder;
    const int d = role.device;
    out.peak_memory_bytes[rank] = run.peak_bytes[d];
    out.peak_activation_bytes[rank] = run.peak_activation_bytes[d];
    compute_end[rank] = run.device_end[d];
    busy += run.busy_s[d];
    auto vocab_split = [&](int layer) {
      return pl.vocab_parallel && (layer == L - 1 || (layer == 0 && embedding_first));
    };
    for (int s = 0; s < pl.num_stages(); ++s) {
      const StageAssignment& st = pl.stages[s];
      if (st.device != d) continue;
      for (int layer = st.first_layer; layer <= st.last_layer; ++layer) {
        if (vocab_split(layer)) continue;
        const double bytes = b.layer_cost(layer, d).param_bytes;
        const double ready = run.stage_ready[s];
        if (model.layers[layer].kind == LayerKind::kMoe && l.ep > 1) {
          const double experts = bytes * expert_share[layer];
          add(BucketKey{-layer, 0, 0, role.tp_rank, 0}, rank, ready, bytes - experts);
          add(BucketKey{-layer, 1, 1, role.tp_rank, role.ep_rank}, rank, ready, experts);
        } else {
          add(BucketKey{-layer, 0, 0, role.tp_rank, 0}, rank, ready, bytes);
        }
      }
    }
    if (pl.vocab_parallel) {  // shards of the head (and embedding), ready at the rank's end
      int64_t vocab = 0;
      for (int64_t c : run.vocab_columns) vocab += c;
      const double fraction =
          vocab > 0 ? static_cast<double>(run.vocab_columns[d]) / static_cast<double>(vocab) : 0;
      for (int layer : {L - 1, 0}) {
        if (!vocab_split(layer) || (layer == 0 && L == 1)) continue;  // L == 1: the head only
        add(BucketKey{-layer, 0, 2, 0, d}, rank, run.device_end[d],
            b.layer_cost(layer, d).param_bytes * fraction);
      }
    }
  }

  // How long a rank's all-reduces run beside compute: until its own compute ends, or, on an
  // executor's ranks (processes sharing the host's cores), until any rank of its node's does.
  if (cluster.executor_ranks) {
    std::map<int, double> node_end;
    for (int r = 0; r < R; ++r) {
      double& end = node_end[cluster.node_of_device(r)];
      end = std::max(end, compute_end[r]);
    }
    for (int r = 0; r < R; ++r) compute_end[r] = node_end[cluster.node_of_device(r)];
  }

  // The all-reduces in every rank's order: a group starts when all its members are ready and
  // done with their previous all-reduce, at the link's overlapped rate while any member still
  // computes (OverlappedRingAllReduceSeconds).
  std::vector<double> free_at(R, 0.0), sync_s(R, 0.0);
  for (const auto& [key, g] : groups) {
    const int n = static_cast<int>(g.members.size());
    if (n < 2) continue;
    const int node = cluster.node_of_device(g.members[0]);
    bool one_node = true;
    double start = 0, busy_until = 0;
    for (int i = 0; i < n; ++i) {
      const int m = g.members[i];
      start = std::max({start, g.ready[i], free_at[m]});
      busy_until = std::max(busy_until, compute_end[m]);
      one_node = one_node && cluster.node_of_device(m) == node;
    }
    const LinkSpec& link = one_node ? cluster.nodes[node].intra_node_link : cluster.inter_node_link;
    const double seconds = OverlappedRingAllReduceSeconds(g.bytes, n, link, start, busy_until);
    for (int m : g.members) {
      free_at[m] = start + seconds;
      sync_s[m] += seconds;
    }
  }
  out.iteration_time_s = out.pipeline_time_s;
  for (int rank = 0; rank < R; ++rank) {
    out.iteration_time_s = std::max(out.iteration_time_s, free_at[rank]);
    out.dp_sync_total_s = std::max(out.dp_sync_total_s, sync_s[rank]);
  }
  out.dp_sync_exposed_s = out.iteration_time_s - out.pipeline_time_s;
  if (out.iteration_time_s > 0) {
    out.tokens_per_s =
        plan.global_microbatches * model.tokens_per_microbatch() / out.iteration_time_s;
    out.bubble_ratio = 1 - busy / (static_cast<double>(R) * out.iteration_time_s);
  }
  return out;
}

}  // namespace octopipe
