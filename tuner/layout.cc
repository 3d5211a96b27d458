#include "tuner/layout.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "simulator/problem_builder.h"
#include "tuner/layout_simulation.h"
#include "tuner/lower_bound.h"

namespace octopipe {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Where every rank of a layout sits: TP group g holds GPUs [g·tp, g·tp + tp).
class RankMap {
 public:
  RankMap(const Cluster& cluster, const ParallelLayout& layout)
      : cluster_(cluster), l_(layout) {}

  // The TP group of pipeline device (stage position) j of replica r.
  int Group(int r, int j) const { return l_.pp_outer ? r + l_.dp * j : j + l_.pp * r; }
  int FirstGpu(int r, int j) const { return Group(r, j) * l_.tp; }
  int NodeOf(int r, int j) const { return cluster_.node_of_device(FirstGpu(r, j)); }

  // Every TP group inside one node.
  bool TpGroupsInsideNodes() const {
    const int groups = l_.gpus() / l_.tp;
    for (int g = 0; g < groups; ++g) {
      if (cluster_.node_of_device(g * l_.tp) != cluster_.node_of_device(g * l_.tp + l_.tp - 1)) {
        return false;
      }
    }
    return true;
  }

  // Replica r's pipeline: one device per TP group, grouped into nodes as the GPUs are (stage
  // positions increase with the GPU index, so each node's devices are consecutive).
  Cluster PipelineCluster(int r, std::vector<std::vector<int>>* device_gpus) const {
    std::vector<int> first_gpus;
    for (int j = 0; j < l_.pp; ++j) {
      first_gpus.push_back(FirstGpu(r, j));
      if (device_gpus != nullptr) {
        std::vector<int> gpus;
        for (int k = 0; k < l_.tp; ++k) gpus.push_back(FirstGpu(r, j) + k);
        device_gpus->push_back(std::move(gpus));
      }
    }
    return octopipe::PipelineCluster(
        cluster_, first_gpus, absl::StrCat(cluster_.name, " / ", l_.ToString(), " replica ", r));
  }

  // What makes two replicas' pipelines different: hardware and node boundaries per device.
  std::string Signature(int r) const {
    std::string s;
    int last_node = -1;
    for (int j = 0; j < l_.pp; ++j) {
      const int node = NodeOf(r, j);
      absl::StrAppend(&s, node != last_node ? "|" : ",", cluster_.nodes[node].hardware);
      last_node = node;
    }
    return s;
  }

  // Of replica 0's stage-0 EP group (replicas [0, ep)), how many share its node.
  int EpRanksPerNode() const {
    const int node = NodeOf(0, 0);
    int n = 0;
    for (int r = 0; r < l_.ep; ++r) n += NodeOf(r, 0) == node ? 1 : 0;
    return n;
  }

  // The link stage position j's DP group all-reduces over.
  LinkSpec DpLink(int j) const {
    const int node = NodeOf(0, j);
    for (int r = 1; r < l_.dp; ++r) {
      if (NodeOf(r, j) != node) return cluster_.inter_node_link;
    }
    return cluster_.nodes[node].intra_node_link;
  }

 private:
  const Cluster& cluster_;
  ParallelLayout l_;
};

std::vector<int> Divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

int ExpertCount(const ModelGraph& model) {
  int experts = 0;
  for (const Layer& l : model.layers) {
    if (l.kind == LayerKind::kMoe) experts = std::max<int>(experts, static_cast<int>(l.dims.experts));
  }
  return experts;
}

bool ExpertsDivide(const ModelGraph& model, int ep) {
  for (const Layer& l : model.layers) {
    if (l.kind == LayerKind::kMoe && l.dims.experts % ep != 0) return false;
  }
  return true;
}

// A layout under evaluation: its distinct pipelines, their builders, and the cheap figures.
struct LayoutCandidate {
  ParallelLayout layout;
  ModelGraph model;
  int microbatches = 0;
  struct Pipe {
    std::vector<int> replicas;
    std::vector<std::vector<int>> device_gpus;
    Cluster cluster;
    std::unique_ptr<ProblemBuilder> builder;
  };
  std::vector<Pipe> pipes;
  std::vector<LinkSpec> dp_links;  // per stage position
  double static_ratio = 0;  // the least possible static bytes / capacity (> 1: cannot fit)
  double bound_s = 0;
  double estimate_s = 0;
};

// Gradient all-reduce of each pipeline device over its DP group; the slowest device's.
double DpSyncSeconds(const LayoutCandidate& c, const LayoutCandidate::Pipe& pipe,
                     const std::vector<StageAssignment>& stages) {
  if (c.layout.dp <= 1) return 0;
  std::vector<double> bytes(c.layout.pp, 0.0);
  for (const StageAssignment& st : stages) {
    for (int l = st.first_layer; l <= st.last_layer; ++l) {
      bytes[st.device] += pipe.builder->layer_cost(l, st.device).param_bytes;
    }
  }
  double worst = 0;
  for (int j = 0; j < c.layout.pp; ++j) {
    worst = std::max(worst, RingAllReduceSeconds(bytes[j], c.layout.dp, c.dp_links[j]));
  }
  return worst;
}

// The least DP synchronisation any partition allows: some device holds at least the average
// gradient bytes; it syncs at best over the fastest DP link.
double DpSyncBound(const LayoutCandidate& c, const LayoutCandidate::Pipe& pipe) {
  if (c.layout.dp <= 1) return 0;
  double total = 0;
  for (int l = 0; l < pipe.builder->num_layers(); ++l) {
    double least = kInf;
    for (int d = 0; d < c.layout.pp; ++d) {
      least = std::min(least, pipe.builder->layer_cost(l, d).param_bytes);
    }
    total += least;
  }
  double best = kInf;
  for (const LinkSpec& link : c.dp_links) {
    best = std::min(best, RingAllReduceSeconds(total / c.layout.pp, c.layout.dp, link));
  }
  return best;
}

// The least fraction of a pipeline's layers that must recompute their forward so that the first
// device's activations fit beside its static bytes under 1F1B, where it holds min(P, M)
// micro-batches in flight of 1/P of the layers; its memory and static bytes taken as the
// pipeline's average (layers spread evenly). 0 when they fit as they are, 1 when the request
// asks every stage to recompute, infinity when even full recompute does not fit or recompute is
// not allowed. A recomputed layer keeps only its input.
double RecomputeShareToFit(const std::vector<LayerCost>& layers, int pp, int microbatches,
                           double capacity, double static_bytes,
                           const ExecutorConstraints& constraints) {
  double act = 0, kept = 0;
  for (const LayerCost& lc : layers) {
    act += lc.activation_bytes;
    kept += lc.input_bytes;
  }
  const double in_flight = std::min(pp, microbatches);
  const double room = (capacity - static_bytes) / pp;
  const double need = in_flight * act / pp;
  const double need_recomputing = in_flight * kept / pp;
  if (constraints.require_recompute) return need_recomputing <= room ? 1 : kInf;
  if (need <= room) return 0;
  if (!constraints.allow_recompute || need_recomputing >= need) return kInf;
  const double share = (need - room) / (need - need_recomputing);
  return share <= 1 ? share : kInf;
}

// Builds a candidate's pipelines and cheap figures; false when the layout cannot be mapped.
absl::StatusOr<bool> Prepare(const ModelGraph& model, const Cluster& cluster,
                             const CostModel& cost, bool steady,
                             const ExecutorConstraints& constraints, int max_chunks,
                             LayoutCandidate* c) {
  const ParallelLayout& l = c->layout;
  RankMap map(cluster, l);
  if (!map.TpGroupsInsideNodes()) return false;
  c->model = ModelForLayout(model, l, l.ep > 1 ? map.EpRanksPerNode() : 0);
  std::map<std::string, int> by_signature;
  for (int r = 0; r < l.dp; ++r) {
    const std::string sig = map.Signature(r);
    auto it = by_signature.find(sig);
    if (it != by_signature.end()) {
      c->pipes[it->second].replicas.push_back(r);
      continue;
    }
    by_signature[sig] = static_cast<int>(c->pipes.size());
    LayoutCandidate::Pipe pipe;
    pipe.replicas.push_back(r);
    pipe.cluster = map.PipelineCluster(r, &pipe.device_gpus);
    ASSIGN_OR_RETURN(ProblemBuilder b, ProblemBuilder::Create(c->model, pipe.cluster, cost, l.pp));
    pipe.builder = std::make_unique<ProblemBuilder>(std::move(b));
    c->pipes.push_back(std::move(pipe));
  }
  // Expert parallelism needs the same layers on every rank of an EP group.
  if (l.ep > 1 && c->pipes.size() > 1) return false;
  for (int j = 0; j < l.pp; ++j) c->dp_links.push_back(map.DpLink(j));

  c->static_ratio = 0;
  c->bound_s = 0;
  c->estimate_s = 0;
  for (const LayoutCandidate::Pipe& pipe : c->pipes) {
    const ProblemBuilder& b = *pipe.builder;
    const int L = b.num_layers(), P = l.pp;
    // Static bytes: spread perfectly over the devices, and no layer split.
    double total = 0, capacity = 0, heaviest = 0, largest_capacity = 0;
    for (int d = 0; d < P; ++d) {
      capacity += b.memory_capacity(d);
      largest_capacity = std::max(largest_capacity, b.memory_capacity(d));
    }
    for (int i = 0; i < L; ++i) {
      double least = kInf;
      for (int d = 0; d < P; ++d) least = std::min(least, b.StaticBytes(i, i, d));
      total += least;
      heaviest = std::max(heaviest, least);
    }
    c->static_ratio = std::max({c->static_ratio, total / capacity, heaviest / largest_capacity});
    const std::vector<LayerCost> fastest = FastestLayerCosts(b);
    // The cheap relaxation (< 1 ms) for ranking and pruning the candidates; the plan chosen
    // reports the tuner's own bound, which also places the first layers exactly.
    LowerBoundOptions bound_options;
    bound_options.prefix_layers = 0;
    const LowerBound lb = PipelineLowerBound(fastest, P, c->microbatches, steady, bound_options);
    double work = 0, forward = 0;  // one micro-batch through every layer: F + B + W, and F
    for (const LayerCost& lc : fastest) {
      work += lc.forward_s + lc.backward_input_s + lc.weight_grad_s;
      forward += lc.forward_s;
    }
    const double sync = DpSyncBound(*c, pipe);
    c->bound_s = std::max(c->bound_s, lb.seconds + sync);
    // The estimate counts the recompute that memory forces (the bound cannot: it holds for
    // any partition): without it, deep pipelines whose first devices hold many micro-batches
    // ranked ahead of shallower ones that end up faster once tuned.
    const double recompute =
        RecomputeShareToFit(fastest, P, c->microbatches, capacity, total, constraints);
    // The bubble of interleaved 1F1B with as many chunks per device as the layer count allows
    // (v·P <= L, v <= max_chunks and the executor's stages per device: the tuner's seed
    // placements; 1 with a fixed placement): (P - 1) / v idle micro-batch
    // slots instead of P - 1 (Narayanan et al., SC '21). A pipeline with about a layer per
    // device cannot interleave and keeps the whole bubble; counting 1F1B's bubble everywhere
    // ranked such deep pipelines level with shallower ones the tuner interleaves.
    int most_chunks = std::max(1, max_chunks);
    if (constraints.max_stages_per_device > 0) {
      most_chunks = std::min(most_chunks, constraints.max_stages_per_device);
    }
    if (constraints.fixed_placement) most_chunks = 1;
    const int chunks = std::clamp(L / P, 1, most_chunks);
    const double one_f_one_b =
        recompute > 1 ? kInf
                      : (work + recompute * forward) / P *
                            (c->microbatches + static_cast<double>(P - 1) / chunks);
    c->estimate_s = std::max(c->estimate_s, std::max(lb.seconds, one_f_one_b) + sync);
  }
  return true;
}

bool SameDegrees(const ParallelLayout& a, const ParallelLayout& b) {
  return a.pp == b.pp && a.tp == b.tp && a.ep == b.ep && a.dp == b.dp;
}

absl::Status CheckFixed(const char* field, int value, int limit, const std::string& what) {
  if (value < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("layout.", field, " must be >= 0 (0: choose), got ", value));
  }
  if (value > 0 && limit % value != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("layout.", field, ": ", value, " does not divide ", what));
  }
  return absl::OkStatus();
}

// Every layout the request allows, in a fixed order.
absl::StatusOr<std::vector<ParallelLayout>> Enumerate(const ModelGraph& model,
                                                      const Cluster& cluster, int gpus,
                                                      int global, const LayoutRequest& req) {
  int node_size = gpus;
  for (const Node& n : cluster.nodes) node_size = std::min(node_size, std::max(1, n.num_devices));
  const std::string gpus_text = absl::StrCat(gpus, " GPUs");
  RETURN_IF_ERROR(CheckFixed("pp", req.pp, gpus, gpus_text));
  RETURN_IF_ERROR(CheckFixed("tp", req.tp, gpus, gpus_text));
  RETURN_IF_ERROR(CheckFixed("dp", req.dp, gpus, gpus_text));
  RETURN_IF_ERROR(CheckFixed("ep", req.ep, gpus, gpus_text));
  if (req.pp > model.num_layers()) {
    return absl::InvalidArgumentError(absl::StrCat("layout.pp: ", req.pp, " stages need as many layers, the model has ", model.num_layers()));
  }
  if (req.ep > 1 && (ExpertCount(model) == 0 || !ExpertsDivide(model, req.ep))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layout.ep: ", req.ep, " must divide the expert count of every MoE layer (the model has ",
        ExpertCount(model), " experts)"));
  }
  // A degree the model's dimensions cannot take (TP not dividing the heads or FFN, EP the
  // experts) is an error when asked for, and never proposed: nothing could run it.
  if (req.tp > 0 || req.ep > 0) {
    ParallelLayout asked;
    asked.tp = std::max(1, req.tp);
    asked.ep = std::max(1, req.ep);
    RETURN_IF_ERROR(CheckLayoutAgainstModel(asked, model));
  }
  auto runnable_tp = [&](int tp) {
    ParallelLayout l;
    l.tp = tp;
    return CheckLayoutAgainstModel(l, model).ok();
  };
  const int model_tp = static_cast<int>(model.training.tp_degree);
  const int model_ep = static_cast<int>(model.training.ep_degree);
  std::vector<ParallelLayout> out;
  for (int tp : {1, 2, 4, 8}) {
    if (req.tp > 0 ? tp != req.tp : (model_tp > 1 ? tp != model_tp : node_size % tp != 0)) {
      continue;
    }
    if (gpus % tp != 0 || !runnable_tp(tp)) continue;
    for (int pp : Divisors(gpus / tp)) {
      if (pp > model.num_layers() || (req.pp > 0 && pp != req.pp)) continue;
      const int dp = gpus / tp / pp;
      if ((req.dp > 0 && dp != req.dp) || global % dp != 0) continue;
      for (int ep : Divisors(dp)) {
        const int fixed_ep = req.ep > 0 ? req.ep : (model_ep > 1 ? model_ep : 0);
        if (fixed_ep > 0 ? ep != fixed_ep : (ep > 1 && (ExpertCount(model) < ep || !ExpertsDivide(model, ep)))) {
          continue;
        }
        for (bool pp_outer : {true, false}) {
          if (!pp_outer && (pp == 1 || dp == 1)) continue;  // the same ranks either way
          out.push_back(ParallelLayout{pp, tp, ep, dp, pp_outer});
        }
      }
    }
  }
  if (out.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layout: no PP x TP x EP x DP layout of ", gpus, " GPUs fits the request (pp ", req.pp,
        ", tp ", req.tp, ", ep ", req.ep, ", dp ", req.dp, ", global micro-batches ", global,
        " must divide by DP)"));
  }
  return out;
}

// Tunes every distinct pipeline of a candidate with `budget` seconds in all; with `from`,
// each pipeline starts from that result's plan of the same replicas (a warm start).
absl::StatusOr<LayoutResult> TuneCandidate(LayoutCandidate& c, const CostModel& cost,
                                           const TunerOptions& tuner, double budget,
                                           int global, const LayoutResult* from = nullptr) {
  const bool steady = tuner.objective == Objective::kSteadyState;
  LayoutResult out;
  out.layout = c.layout;
  out.model = c.model;
  out.microbatches = c.microbatches;
  out.global_microbatches = global;
  out.feasible = true;
  // The executor splits a head over a pipeline's devices only with TP 1 and replicas of one
  // pipeline (ValidateLayoutPlan): other candidates keep the head whole.
  const bool head_splittable = c.layout.tp == 1 && c.pipes.size() == 1;
  if (!head_splittable && tuner.vocab_parallel == VocabParallelMode::kOn) {
    return absl::FailedPreconditionError(absl::StrCat(
        "vocab_parallel on: ", c.layout.ToString(), " cannot split the head (only with TP 1 "
        "and replicas of one pipeline)"));
  }
  for (LayoutCandidate::Pipe& pipe : c.pipes) {
    TunerOptions o = tuner;
    if (!head_splittable) o.vocab_parallel = VocabParallelMode::kOff;
    o.num_devices = c.layout.pp;
    o.num_microbatches = c.microbatches;
    o.time_budget_s = std::max(1e-3, budget / static_cast<double>(c.pipes.size()));
    if (from != nullptr) {
      for (const LayoutPipeline& p : from->pipelines) {
        if (p.replicas == pipe.replicas) o.seed_stages = p.tune.plan.stages;
      }
    }
    ASSIGN_OR_RETURN(TuneResult r, Tune(c.model, pipe.cluster, cost, o));
    LayoutPipeline lp;
    lp.replicas = pipe.replicas;
    lp.device_gpus = pipe.device_gpus;
    lp.cluster = pipe.cluster;
    lp.dp_sync_s = DpSyncSeconds(c, pipe, r.plan.stages);
    lp.tune = std::move(r);
    out.feasible = out.feasible && lp.tune.feasible;
    out.pipelines.push_back(std::move(lp));
  }
  // The slowest pipeline first: the iteration waits for it.
  std::stable_sort(out.pipelines.begin(), out.pipelines.end(),
                   [&](const LayoutPipeline& a, const LayoutPipeline& b) {
                     return TunedObjective(a.tune, steady) + a.dp_sync_s >
                            TunedObjective(b.tune, steady) + b.dp_sync_s;
                   });
  const LayoutPipeline& slowest = out.pipelines.front();
  out.pipeline_time_s = steady ? slowest.tune.predicted.steady_state_iteration_time_s
                               : slowest.tune.predicted.iteration_time_s;
  out.dp_sync_s = 0;
  for (const LayoutPipeline& p : out.pipelines) out.dp_sync_s = std::max(out.dp_sync_s, p.dp_sync_s);
  out.iteration_time_s = out.pipeline_time_s + out.dp_sync_s;
  out.tokens_per_s =
      out.iteration_time_s > 0 ? global * c.model.tokens_per_microbatch() / out.iteration_time_s : 0;
  return out;
}

}  // namespace

LayoutPlan ToLayoutPlan(const LayoutResult& result) {
  const ParallelLayout& l = result.layout;
  LayoutPlan out;
  out.layout = l;
  out.num_ranks = l.gpus();
  out.global_microbatches = result.global_microbatches;
  for (const LayoutPipeline& pipe : result.pipelines) {
    LayoutPipelinePlan p;
    p.plan = pipe.tune.plan;
    for (int r : pipe.replicas) {
      PipelineReplica rep;
      rep.dp_rank = r;
      rep.first_microbatch = r * result.microbatches;
      for (int j = 0; j < p.plan.num_devices; ++j) {
        const int group = l.pp_outer ? r + l.dp * j : j + l.pp * r;  // as RankMap::Group
        rep.device_ranks.push_back(group * l.tp);
      }
      p.replicas.push_back(std::move(rep));
    }
    out.pipelines.push_back(std::move(p));
  }
  return out;
}

bool ReplicasWithinNodes(const Cluster& cluster, const ParallelLayout& layout) {
  // EP shards are not copies: a lost node takes its experts with it whatever the replicas.
  if (layout.dp < 2 || layout.ep > 1 || layout.gpus() > cluster.num_devices()) return false;
  const RankMap map(cluster, layout);
  std::set<int> nodes;  // of the replicas: at least two, or losing a node leaves none
  for (int r = 0; r < layout.dp; ++r) {
    nodes.insert(map.NodeOf(r, 0));
    const int node = map.NodeOf(r, 0);
    for (int j = 0; j < layout.pp; ++j) {
      const int first = map.FirstGpu(r, j);
      if (map.NodeOf(r, j) != node || cluster.node_of_device(first + layout.tp - 1) != node) {
        return false;
      }
    }
  }
  return nodes.size() >= 2;
}

absl::StatusOr<LayoutResult> TuneLayout(const ModelGraph& model, const Cluster& cluster,
                                        const CostModel& cost_model, const TunerOptions& tuner,
                                        const LayoutRequest& request) {
  const std::shared_ptr<const Clock> clock = BudgetClockOf(tuner);
  const auto now = [&clock] { return clock->NowSeconds(); };
  const double start = now();
  const bool steady = tuner.objective == Objective::kSteadyState;
  const int gpus = request.gpus > 0 ? request.gpus : cluster.num_devices();
  if (gpus > cluster.num_devices()) {
    return absl::InvalidArgumentError(absl::StrCat("layout.gpus: ", gpus, " requested but the cluster '", cluster.name, "' has ", cluster.num_devices()));
  }
  if (!(tuner.time_budget_s > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("time_budget_s must be > 0, got ", tuner.time_budget_s));
  }
  const int global = request.global_microbatches > 0
                         ? request.global_microbatches
                         : static_cast<int>(model.training.num_microbatches);
  ASSIGN_OR_RETURN(std::vector<ParallelLayout> layouts,
                   Enumerate(model, cluster, gpus, global, request));

  std::vector<LayoutCandidate> cands;
  int over_limit = 0;
  for (const ParallelLayout& l : layouts) {
    if (request.max_microbatches_per_pipeline > 0 &&
        global / l.dp > request.max_microbatches_per_pipeline) {
      ++over_limit;
      continue;
    }
    LayoutCandidate c;
    c.layout = l;
    c.microbatches = global / l.dp;
    ASSIGN_OR_RETURN(bool ok, Prepare(model, cluster, cost_model, steady, tuner.constraints,
                                      tuner.max_chunks, &c));
    if (ok) cands.push_back(std::move(c));
  }
  if (cands.empty() && over_limit > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "microbatches: every layout of ", gpus, " GPUs gives its replicas more than ",
        request.max_microbatches_per_pipeline, " of the ", global,
        " micro-batches each (the most one pipeline runs); use larger micro-batches or more "
        "data-parallel replicas"));
  }
  if (cands.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layout: no layout of ", gpus, " GPUs keeps every TP group inside a node (and every EP "
        "group on identical pipelines)"));
  }
  // Order: layouts that can fit by their estimate; then the rest by how close they come.
  // With a node-local preference, such layouts rank as if that much faster (so they are tuned).
  const auto ranked = [&](size_t i) {
    return ReplicasWithinNodes(cluster, cands[i].layout)
               ? cands[i].estimate_s / (1 + request.node_local_tolerance)
               : cands[i].estimate_s;
  };
  std::vector<size_t> order(cands.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const bool fa = cands[a].static_ratio <= 1, fb = cands[b].static_ratio <= 1;
    if (fa != fb) return fa;
    if (fa) return ranked(a) < ranked(b);
    return cands[a].static_ratio < cands[b].static_ratio;
  });
  const bool any_fits = cands[order[0]].static_ratio <= 1;
  // Two rounds: up to 2 x max_tuned layouts screened with equal shares of half the budget, then
  // the fastest of them tuned on with the rest, from its screened plans. Estimates of layouts
  // within a few percent of each other do not order them as tuning does (deep pipelines of
  // few layers per device end further above their estimate), and a short tuning already
  // ranks them (GPT 310.1B, docs/benchmarks.md "published_runs").
  // Nothing can fit: tune the closest one for the infeasible answer (what memory it needs).
  const int to_tune = any_fits ? 2 * std::max(1, request.max_tuned) : 1;
  size_t best_k = 0, node_local_k = 0;  // positions in `order` (and `considered`) of these
  int feasible_left = 0;
  for (const LayoutCandidate& c : cands) feasible_left += c.static_ratio <= 1 ? 1 : 0;
  // One layout to tune (the request fixed it): one round with the whole budget.
  const bool two_rounds = to_tune > 1 && feasible_left > 1;
  const double screen_budget = two_rounds ? tuner.time_budget_s / 2 : tuner.time_budget_s;

  // Ranked as the executor runs it (DP all-reduces overlapped with the backward) where that
  // can be simulated: synchronous iterations (the layout simulation has no steady state).
  const auto simulate_for_rank = [&](LayoutResult& r) {
    if (steady || !r.feasible) return;
    absl::StatusOr<LayoutSimulation> sim =
        SimulateLayout(model, cluster, cost_model, ToLayoutPlan(r), tuner.link_contention,
                       tuner.layer_time_factors);
    if (sim.ok()) r.simulated = std::move(*sim);
  };
  const auto rank = [](const LayoutResult& x) {
    return x.simulated.iteration_time_s > 0 ? x.simulated.iteration_time_s : x.iteration_time_s;
  };

  std::vector<LayoutConsidered> considered(cands.size());
  std::optional<LayoutResult> best;
  std::optional<LayoutResult> node_local;  // the fastest tuned with node-local replicas
  absl::Status last_error = absl::InternalError("layout: no layout was tuned");
  int tuned = 0, failures = 0;
  constexpr int kMaxFailures = 3;  // then the budget is spent: give what was found
  for (size_t k = 0; k < order.size(); ++k) {
    LayoutCandidate& c = cands[order[k]];
    LayoutConsidered& info = considered[k];
    info.layout = c.layout;
    info.microbatches = c.microbatches;
    info.bound_s = c.bound_s;
    info.estimate_s = c.estimate_s;
    info.iteration_s = kInf;
    if (any_fits && c.static_ratio > 1) {
      info.outcome = "pruned: memory";
      continue;
    }
    const double slack = ReplicasWithinNodes(cluster, c.layout) ? request.node_local_tolerance : 0;
    if (best && best->feasible && c.bound_s >= best->iteration_time_s * (1 + slack)) {
      info.outcome = "pruned: bound";
      --feasible_left;
      continue;
    }
    // The other rank order of a layout already tuned, alike by everything the search knows
    // before tuning (its estimate and bound: the same links carry its DP and PP traffic, as
    // when TP fills each node) tunes to the same plan: its share of the budget goes to the
    // next layout instead.
    if (k > 0 && SameDegrees(cands[order[k - 1]].layout, c.layout) &&
        cands[order[k - 1]].estimate_s == c.estimate_s && cands[order[k - 1]].bound_s == c.bound_s &&
        considered[k - 1].outcome == "tuned") {
      info.outcome = "not tuned: as the other rank order";
      --feasible_left;
      continue;
    }
    if (tuned >= to_tune || failures >= kMaxFailures ||
        (tuned > 0 && tuner.should_stop && tuner.should_stop())) {
      info.outcome = "not tuned";
      --feasible_left;
      continue;
    }
    const double left = screen_budget - (now() - start);
    const int slots = std::max(1, std::min(to_tune - tuned, any_fits ? feasible_left : 1));
    absl::StatusOr<LayoutResult> tuned_layout =
        TuneCandidate(c, cost_model, tuner, std::max(1e-3, left / slots), global);
    --feasible_left;
    if (!tuned_layout.ok()) {
      // Bad options are the caller's to fix; anything else (a share of the budget too small to
      // schedule any candidate of a big pipeline) only rules this layout out.
      if (tuned_layout.status().code() == absl::StatusCode::kInvalidArgument) {
        return tuned_layout.status();
      }
      info.outcome = absl::StrCat("failed: ", tuned_layout.status().message());
      last_error = tuned_layout.status();
      ++failures;
      continue;
    }
    ++tuned;
    LayoutResult& r = *tuned_layout;
    info.outcome = "tuned";
    info.iteration_s = r.feasible ? r.iteration_time_s : kInf;
    simulate_for_rank(r);
    const bool better = !best || (r.feasible && (!best->feasible || rank(r) < rank(*best)));
    if (request.node_local_tolerance > 0 && r.feasible && ReplicasWithinNodes(cluster, r.layout) &&
        (!node_local || rank(r) < rank(*node_local))) {
      node_local = r;
      node_local_k = k;
    }
    if (better) {
      best = std::move(r);
      best_k = k;
    }
  }
  // Whether the node-local layout is taken instead of the fastest (see below).
  const auto prefer_node_local = [&] {
    return node_local && best->feasible &&
           rank(*node_local) <= rank(*best) * (1 + request.node_local_tolerance) &&
           !ReplicasWithinNodes(cluster, best->layout);
  };
  // The second round: the layout that will be chosen, tuned on with the budget left.
  const double left = tuner.time_budget_s - (now() - start);
  if (two_rounds && best && best->feasible && left > 1e-3 &&
      !(tuner.should_stop && tuner.should_stop())) {
    const bool local = prefer_node_local();
    const size_t k = local ? node_local_k : best_k;
    std::optional<LayoutResult>& pick = local ? node_local : best;
    absl::StatusOr<LayoutResult> again =
        TuneCandidate(cands[order[k]], cost_model, tuner, left, global, &*pick);
    if (again.ok() && again->feasible) {
      simulate_for_rank(*again);
      if (rank(*again) < rank(*pick)) {
        const bool both = node_local && node_local_k == best_k;  // one layout, both roles
        pick = std::move(*again);
        if (both) (local ? best : node_local) = pick;
        considered[k].iteration_s = pick->iteration_time_s;
      }
    }
  }
  if (!best) return last_error;
  std::string chosen_note;
  if (prefer_node_local()) {
    chosen_note = absl::StrFormat(" (replicas within nodes; %.1f%% slower than %s)",
                                  100 * (rank(*node_local) / rank(*best) - 1),
                                  best->layout.ToString());
    best = std::move(node_local);
  }
  for (LayoutConsidered& info : considered) {
    if (info.outcome == "tuned" && info.layout.ToString() == best->layout.ToString()) {
      info.outcome = "chosen" + chosen_note;
    }
  }
  best->considered = std::move(considered);
  // What the executor will see: the chosen layout with its DP all-reduces overlapped (already
  // simulated when it was ranked so).
  if (!(best->simulated.iteration_time_s > 0)) {
    absl::StatusOr<LayoutSimulation> simulated =
        SimulateLayout(model, cluster, cost_model, ToLayoutPlan(*best), tuner.link_contention,
                       tuner.layer_time_factors);
    if (simulated.ok()) {
      best->simulated = std::move(*simulated);
    } else {
      best->simulation_error = std::string(simulated.status().message());
    }
  }
  best->tuning_wall_s = now() - start;
  return std::move(*best);
}

}  // namespace octopipe
