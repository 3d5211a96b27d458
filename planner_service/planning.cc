#include "planner_service/planning.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <new>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/convert.h"
#include "core/cost_model.h"
#include "core/status_macros.h"
#include "tuner/constraints.h"
#include "tuner/vocab_choice.h"

namespace octopipe::planner {

Cluster WithoutNodes(const Cluster& cluster, const std::vector<std::string>& excluded) {
  Cluster out = cluster;
  out.nodes.clear();
  for (const Node& n : cluster.nodes) {
    if (std::find(excluded.begin(), excluded.end(), n.name) == excluded.end()) {
      out.nodes.push_back(n);
    }
  }
  return out;
}

namespace {

// Layout search and executor constraints of a request (proto fields 260-270).
absl::Status ReadLayoutAndConstraints(const proto::PlanOptions& o, PlanningInput* in) {
  in->choose_layout = o.choose_layout();
  if (in->choose_layout && o.num_devices() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "options.choose_layout: needs options.num_devices = 0 (every device), got ",
        o.num_devices()));
  }
  in->layout.pp = o.layout_pp();
  in->layout.tp = o.layout_tp();
  in->layout.ep = o.layout_ep();
  in->layout.dp = o.layout_dp();
  in->layout.max_tuned = o.max_layouts() > 0 ? std::min(o.max_layouts(), 64) : 3;
  ExecutorConstraints& c = in->tuner.constraints;
  c.allow_bw_split = !o.no_bw_split();
  c.allow_recompute = !o.no_recompute();
  RETURN_IF_ERROR(ApplyRecomputeChoice(o.recompute(), "options.recompute", &in->model, &c));
  c.max_stages_per_device = o.max_stages_per_device();
  for (const proto::StageSpec& st : o.fixed_stages()) {
    StageAssignment a;
    a.first_layer = st.first_layer();
    a.last_layer = st.last_layer();
    a.device = st.device();
    c.fixed_stages.push_back(a);
  }
  c.fixed_placement = o.fixed_placement();
  // Checked here for the single pipeline (the layout search checks each pipeline's).
  if (!in->choose_layout) {
    absl::Status s = ValidateConstraints(c, in->model.num_layers(), in->tuner.num_devices);
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat("options.", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace

// After node loss a job's fixed layout degrees stand where the devices left can hold them:
// the fixed DP and EP degrees are dropped first (the replicas are what a lost node takes away), then
// every degree, and the layout search chooses. Degrees stand only if some layout keeps them:
// PP x TP x DP dividing the devices left (a degree left open: any that divides them) with the
// replicas (the fixed DP, else the devices over PP x TP) splitting the global batch of
// `global_microbatches` evenly and holding whole EP groups, as the layout search requires of
// every layout — keeping degrees no layout has would leave the search nothing to choose. An
// open TP or EP degree is the model's own (`model_tp`, `model_ep` > 1) where it names one, as
// in the layout search.
void RelaxLayoutForDevicesLeft(int available, int global_microbatches, int model_tp,
                               int model_ep, LayoutRequest* req) {
  auto fits = [&] {
    const int fixed_tp = req->tp > 0 ? req->tp : (model_tp > 1 ? model_tp : 0);
    const int fixed_ep = req->ep > 0 ? req->ep : (model_ep > 1 ? model_ep : 0);
    for (int pp = 1; pp <= available; ++pp) {
      if ((req->pp > 0 && pp != req->pp) || available % pp != 0) continue;
      for (int tp = 1; tp <= available / pp; ++tp) {
        if ((fixed_tp > 0 && tp != fixed_tp) || (available / pp) % tp != 0) continue;
        const int64_t dp = req->dp > 0 ? req->dp : available / (pp * tp);
        const int64_t product = int64_t{pp} * tp * dp;
        if (product > available || available % product != 0) continue;
        if (global_microbatches > 0 && global_microbatches % dp != 0) continue;
        if (fixed_ep > 0 && dp % fixed_ep != 0) continue;
        return true;
      }
    }
    return false;
  };
  if (fits()) return;
  req->dp = req->ep = 0;  // EP groups are made of DP replicas: they go with them
  if (fits()) return;
  req->pp = req->tp = req->ep = 0;
}

namespace {

proto::PlanLayout LayoutToProto(const LayoutResult& r) {
  proto::PlanLayout out;
  out.set_pp(r.layout.pp);
  out.set_tp(r.layout.tp);
  out.set_ep(r.layout.ep);
  out.set_dp(r.layout.dp);
  out.set_rank_order(r.layout.pp_outer ? "tp-dp-pp" : "tp-pp-dp");
  out.set_microbatches_per_pipeline(r.microbatches);
  out.set_global_microbatches(r.global_microbatches);
  out.set_pipeline_time_s(r.pipeline_time_s);
  out.set_dp_sync_s(r.dp_sync_s);
  out.set_iteration_time_s(r.iteration_time_s);
  out.set_tokens_per_s(r.tokens_per_s);
  for (const LayoutPipeline& p : r.pipelines) {
    proto::PlanLayoutPipeline* pp = out.add_pipelines();
    for (int rep : p.replicas) pp->add_replicas(rep);
    for (const auto& gpus : p.device_gpus) {
      proto::PlanLayoutDevice* d = pp->add_devices();
      for (int g : gpus) d->add_gpus(g);
    }
    pp->set_iteration_time_s(p.tune.predicted.iteration_time_s);
    pp->set_dp_sync_s(p.dp_sync_s);
  }
  out.set_layouts_considered(static_cast<int>(r.considered.size()));
  int tuned = 0;
  for (const LayoutConsidered& c : r.considered) {
    tuned += c.outcome == "tuned" || c.outcome == "chosen" ? 1 : 0;
  }
  out.set_layouts_tuned(tuned);
  return out;
}


// The most micro-batches a request may ask for: max_microbatches for one pipeline; with the
// layout chosen (the global batch over DP replicas), max_microbatches per replica, up to one
// replica per device.
int64_t GlobalMicrobatchLimit(const proto::PlanOptions& options, int64_t devices,
                              const SizeLimits& limits) {
  if (!options.choose_layout()) return limits.max_microbatches;
  return limits.max_microbatches * std::max<int64_t>(devices, 1);
}

// Sizes read from the wire form, before any conversion allocates in proportion to them.
absl::Status CheckWireSizes(const proto::Model& model, const proto::Cluster& cluster,
                            const proto::PlanOptions& options, const SizeLimits& limits) {
  RETURN_IF_ERROR(CheckLimit("model.layers", model.layers_size(), limits.max_layers,
                             "max_layers"));
  RETURN_IF_ERROR(CheckLimit("cluster.nodes", cluster.nodes_size(), limits.max_nodes,
                             "max_nodes"));
  RETURN_IF_ERROR(CheckLimit("cluster.hardware", cluster.hardware_size(), limits.max_hardware,
                             "max_hardware"));
  int64_t devices = 0;
  for (const proto::Node& n : cluster.nodes()) devices += std::max(0, n.num_devices());
  RETURN_IF_ERROR(CheckLimit("cluster devices (sum of nodes[].num_devices)", devices,
                             limits.max_devices, "max_devices"));
  RETURN_IF_ERROR(CheckLimit("options.num_devices", options.num_devices(), limits.max_devices,
                             "max_devices"));
  // With a layout chosen the micro-batches are the global batch, split over up to one replica
  // per device: the limit is per replica (the layout search skips layouts above it).
  const int64_t microbatches = GlobalMicrobatchLimit(options, devices, limits);
  const char* limit_name =
      options.choose_layout() ? "max_microbatches per replica x devices" : "max_microbatches";
  RETURN_IF_ERROR(CheckLimit("options.num_microbatches", options.num_microbatches(),
                             microbatches, limit_name));
  return CheckLimit("model.training.num_microbatches", model.training().num_microbatches(),
                    microbatches, limit_name);
}

// The least wire size of any plan for `devices` x `microbatches` (see max_plan_bytes).
absl::Status CheckPlanWireEstimate(int devices, int microbatches, const PlanningLimits& limits) {
  const int64_t least = 12 * static_cast<int64_t>(devices) * microbatches;
  if (least <= limits.max_plan_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "options.num_microbatches x options.num_devices: a plan for ", devices, " devices x ",
      microbatches, " micro-batches takes at least ", least,
      " bytes on the wire, over the limit of ", limits.max_plan_bytes,
      " (max_plan_bytes; gRPC clients accept 4 MB responses by default). Use fewer "
      "micro-batches or devices"));
}

}  // namespace

absl::StatusOr<PlanningInput> PrepareInput(const proto::Model& model_proto,
                                           const proto::Cluster& cluster_proto,
                                           const proto::PlanOptions& options,
                                           const std::vector<std::string>& excluded,
                                           const PlanningLimits& limits) {
  RETURN_IF_ERROR(CheckWireSizes(model_proto, cluster_proto, options, limits));
  PlanningInput in;
  absl::StatusOr<ModelGraph> model = ModelFromProto(model_proto);
  if (!model.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("model.", model.status().message()));
  }
  in.model = std::move(*model);
  {
    SizeLimits model_limits = limits;  // the global batch of a layout: checked per replica
    model_limits.max_microbatches = GlobalMicrobatchLimit(options, limits.max_devices, limits);
    RETURN_IF_ERROR(CheckModelSize(in.model, model_limits));
  }
  absl::StatusOr<Cluster> cluster = ClusterFromProto(cluster_proto);
  if (!cluster.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("cluster.", cluster.status().message()));
  }
  RETURN_IF_ERROR(CheckClusterSize(*cluster, limits));
  in.cluster = WithoutNodes(*cluster, excluded);
  if (in.cluster.nodes.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cluster: every node of '", cluster->name, "' has failed or been drained"));
  }
  const int available = in.cluster.num_devices();
  TunerOptions& t = in.tuner;
  if (options.num_devices() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "options.num_devices must be >= 0 (0 = all), got ", options.num_devices()));
  }
  if (excluded.empty() && options.num_devices() > available) {
    return absl::InvalidArgumentError(absl::StrCat(
        "options.num_devices: ", options.num_devices(), " devices asked for, but cluster '",
        cluster->name, "' has ", available));
  }
  if (options.num_devices() > in.model.num_layers()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "options.num_devices: ", options.num_devices(),
        " pipeline devices need at least as many layers, but model '", in.model.name, "' has ",
        in.model.num_layers()));
  }
  // After node loss the job keeps going on what is left; "0 = all" means at most one device
  // per layer.
  t.num_devices = options.num_devices() == 0 ? available
                                             : std::min(options.num_devices(), available);
  t.num_devices = std::min(t.num_devices, in.model.num_layers());
  if (options.num_microbatches() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "options.num_microbatches must be >= 0 (0 = the model's), got ",
        options.num_microbatches()));
  }
  // In range: CheckWireSizes bounded both by max_microbatches (an int).
  t.num_microbatches = options.num_microbatches() == 0
                           ? static_cast<int>(in.model.training.num_microbatches)
                           : options.num_microbatches();
  const double budget = options.time_budget_s();
  if (budget < 0 || !std::isfinite(budget)) {
    return absl::InvalidArgumentError(
        absl::StrCat("options.time_budget_s must be >= 0 (0 = default), got ", budget));
  }
  if (budget > limits.max_time_budget_s) {
    return absl::ResourceExhaustedError(absl::StrCat("options.time_budget_s: ", budget,
                                                     " s exceeds the server's limit of ",
                                                     limits.max_time_budget_s, " s"));
  }
  t.time_budget_s = budget > 0 ? budget : limits.default_time_budget_s;
  t.seed = options.seed() == 0 ? 1 : options.seed();
  absl::StatusOr<Objective> objective =
      ObjectiveFromProto(options.objective_kind());
  if (!objective.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("options.", objective.status().message()));
  }
  t.objective = *objective;
  t.link_contention = options.link_contention();
  absl::StatusOr<VocabParallelMode> vocab = VocabParallelFromProto(options.vocab_parallel());
  if (!vocab.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("options.", vocab.status().message()));
  }
  t.vocab_parallel = *vocab;
  t.threads = limits.tuner_threads;
  RETURN_IF_ERROR(ReadLayoutAndConstraints(options, &in));
  if (!excluded.empty() && in.choose_layout) {
    RelaxLayoutForDevicesLeft(available, t.num_microbatches,
                              static_cast<int>(in.model.training.tp_degree),
                              static_cast<int>(in.model.training.ep_degree), &in.layout);
  }
  RunSizeNames names;
  names.devices = "options.num_devices";
  names.microbatches = "options.num_microbatches";
  names.threads = "tuner_threads";
  names.chunks = "tuner chunks per device";
  // A layout's pipelines run the global batch split over its replicas: sized here by the
  // fewest micro-batches any replica can get (one replica per device); the layout search
  // keeps each replica within max_microbatches and the result is checked against
  // max_plan_bytes once it is known.
  const int pipeline_microbatches =
      in.choose_layout ? (t.num_microbatches + available - 1) / std::max(available, 1)
                       : t.num_microbatches;
  if (in.choose_layout) {
    in.layout.max_microbatches_per_pipeline = static_cast<int>(limits.max_microbatches);
  }
  RETURN_IF_ERROR(CheckRunSize(in.model.num_layers(), t.num_devices, t.max_chunks,
                               pipeline_microbatches, t.threads, limits, names));
  RETURN_IF_ERROR(CheckPlanWireEstimate(in.choose_layout ? 1 : t.num_devices,
                                        pipeline_microbatches, limits));
  in.max_plan_bytes = limits.max_plan_bytes;
  return in;
}

proto::PlanResult ToProto(const TuneResult& r) {
  proto::PlanResult out;
  out.set_feasible(r.feasible);
  out.set_infeasible_reason(r.infeasible_reason);
  for (double b : r.required_memory_bytes) out.add_required_memory_bytes(b);
  *out.mutable_plan() = PlanToProto(r.plan);
  proto::Prediction* p = out.mutable_plan()->mutable_predicted();
  p->set_iteration_time_s(r.predicted.iteration_time_s);
  p->set_steady_state_iteration_time_s(r.predicted.steady_state_iteration_time_s);
  p->set_bubble_ratio(r.predicted.bubble_ratio);
  p->set_steady_state_bubble_ratio(r.predicted.steady_state_bubble_ratio);
  p->set_tokens_per_s(r.predicted.tokens_per_s);
  for (const DeviceResult& d : r.predicted.devices) {
    p->add_peak_memory_bytes(d.peak_memory_bytes);
    p->add_device_busy_s(d.busy_s);
    p->add_device_bubble_ratio(d.bubble_ratio);
    p->add_device_fits_memory(d.fits_memory);
  }
  for (const BaselineResult& b : r.baselines) {
    proto::BaselineFigures* f = out.add_baselines();
    f->set_name(b.name);
    f->set_ran(b.ran);
    f->set_error(b.error);
    f->set_fits(b.fits);
    if (b.ran) {
      f->set_iteration_time_s(b.result.iteration_time_s);
      f->set_bubble_ratio(b.result.bubble_ratio);
      f->set_steady_state_iteration_time_s(b.result.steady_state_iteration_time_s);
      f->set_steady_state_bubble_ratio(b.result.steady_state_bubble_ratio);
      double peak = 0;
      for (const DeviceResult& d : b.result.devices) peak = std::max(peak, d.peak_memory_bytes);
      f->set_peak_memory_bytes(peak);
    }
  }
  out.set_best_baseline(r.best_baseline);
  out.set_speedup_vs_best_baseline(r.speedup_vs_best_baseline);
  out.set_lower_bound_s(r.lower_bound.seconds);
  out.set_lower_bound_binding(r.lower_bound.binding);
  out.set_lower_bound_gap(r.lower_bound_gap);
  out.set_vocab_parallel(r.vocab_parallel);
  out.set_vocab_parallel_tried(r.vocab_parallel_tried);
  out.set_tuning_wall_s(r.tuning_wall_s);
  out.set_origin(PlanOriginText(r));
  return out;
}

absl::StatusOr<proto::PlanResult> RunPlanning(const PlanningInput& input,
                                              const std::vector<double>& layer_time_factors,
                                              std::function<bool()> should_stop) {
  if (should_stop && should_stop()) return absl::CancelledError("planning cancelled");
  TunerOptions t = input.tuner;
  t.layer_time_factors = layer_time_factors;
  t.should_stop = should_stop;
  const CostModel cost;
  absl::StatusOr<TuneResult> tuned;
  std::optional<LayoutResult> layout;
  try {
    if (input.choose_layout) {
      LayoutRequest req = input.layout;
      req.global_microbatches = t.num_microbatches;
      absl::StatusOr<LayoutResult> l = TuneLayout(input.model, input.cluster, cost, t, req);
      if (!l.ok()) return l.status();
      layout = std::move(*l);
      tuned = layout->pipelines.front().tune;
    } else {
      tuned = Tune(input.model, input.cluster, cost, t);
    }
  } catch (const std::bad_alloc&) {
    // The limits should make this unreachable; if not, one request must not end the service.
    return absl::ResourceExhaustedError(
        "planning ran out of memory; lower the model, cluster or micro-batch sizes");
  }
  if (!tuned.ok()) return tuned.status();
  const TuneResult& r = *tuned;
  if (should_stop && should_stop()) return absl::CancelledError("planning cancelled");
  const SimResult& p = r.predicted;
  for (double v : {p.iteration_time_s, p.steady_state_iteration_time_s, p.bubble_ratio,
                   p.steady_state_bubble_ratio}) {
    if (!std::isfinite(v)) {
      return absl::InvalidArgumentError(
          "model/cluster: the measured costs and hardware figures give non-finite predictions "
          "(a value too large or too small for the cost model)");
    }
  }
  proto::PlanResult out = ToProto(r);
  if (layout) {
    *out.mutable_layout() = LayoutToProto(*layout);
    out.set_feasible(layout->feasible);
    proto::LayoutPlan* lp = out.mutable_layout_plan();
    *lp = LayoutPlanToProto(ToLayoutPlan(*layout));
    for (size_t i = 0; i < layout->pipelines.size(); ++i) {
      *lp->mutable_pipelines(static_cast<int>(i))->mutable_plan() =
          ToProto(layout->pipelines[i].tune).plan();
    }
    // As the executor runs it (gradient all-reduces overlapped), when it could be simulated.
    const bool simulated =
        layout->simulation_error.empty() && layout->simulated.iteration_time_s > 0;
    const LayoutSimulation& sim = layout->simulated;
    lp->mutable_predicted()->set_iteration_time_s(simulated ? sim.iteration_time_s
                                                            : layout->iteration_time_s);
    lp->mutable_predicted()->set_pipeline_time_s(simulated ? sim.pipeline_time_s
                                                           : layout->pipeline_time_s);
    lp->mutable_predicted()->set_dp_sync_s(simulated ? sim.dp_sync_exposed_s
                                                     : layout->dp_sync_s);
    lp->mutable_predicted()->set_tokens_per_s(simulated ? sim.tokens_per_s
                                                        : layout->tokens_per_s);
  }
  const size_t bytes = out.ByteSizeLong();
  if (static_cast<int64_t>(bytes) > input.max_plan_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "plan: the plan found (", r.plan.stages.size(), " stages, ", input.tuner.num_devices,
        " devices x ", input.tuner.num_microbatches, " micro-batches) is ", bytes,
        " bytes on the wire, over the limit of ", input.max_plan_bytes,
        " (max_plan_bytes; gRPC clients accept 4 MB responses by default). Use fewer "
        "micro-batches or devices"));
  }
  return out;
}

namespace {

// The first `n` GPUs of `cluster` as (node, GPU on the node).
std::vector<GpuSlot> FirstSlots(const Cluster& cluster, int n) {
  std::vector<GpuSlot> out;
  for (const Node& node : cluster.nodes) {
    for (int d = 0; d < node.num_devices && static_cast<int>(out.size()) < n; ++d) {
      out.push_back({node.name, d});
    }
  }
  return out;
}

// A survivors' option as a plan result: its slowest pipeline first (its plan is `plan`), the
// layout summary and the whole layout with the option's predictions.
proto::PlanResult OptionResult(NodeLossOption o) {
  size_t slowest = 0;
  for (size_t p = 1; p < o.tunes.size(); ++p) {
    if (o.predicted.pipeline_iteration_s[p] > o.predicted.pipeline_iteration_s[slowest]) {
      slowest = p;
    }
  }
  std::swap(o.plan.pipelines[0], o.plan.pipelines[slowest]);
  std::swap(o.tunes[0], o.tunes[slowest]);
  std::swap(o.predicted.pipeline_iteration_s[0], o.predicted.pipeline_iteration_s[slowest]);
  proto::PlanResult out = ToProto(o.tunes[0]);
  out.set_feasible(true);
  out.set_origin(absl::StrCat(o.kind, " (", o.summary, "); ", out.origin()));
  proto::PlanLayout* l = out.mutable_layout();
  const ParallelLayout& pl = o.plan.layout;
  l->set_pp(pl.pp);
  l->set_tp(pl.tp);
  l->set_ep(pl.ep);
  l->set_dp(o.plan.num_replicas());
  l->set_rank_order(pl.RankOrder());
  l->set_microbatches_per_pipeline(o.plan.pipelines[0].plan.num_microbatches);
  l->set_global_microbatches(o.plan.global_microbatches);
  l->set_pipeline_time_s(o.predicted.pipeline_time_s);
  l->set_dp_sync_s(o.predicted.dp_sync_exposed_s);
  l->set_iteration_time_s(o.predicted.iteration_time_s);
  l->set_tokens_per_s(o.predicted.tokens_per_s);
  for (size_t p = 0; p < o.plan.pipelines.size(); ++p) {
    const LayoutPipelinePlan& pipe = o.plan.pipelines[p];
    proto::PlanLayoutPipeline* lp = l->add_pipelines();
    for (const PipelineReplica& rep : pipe.replicas) lp->add_replicas(rep.dp_rank);
    for (int first : pipe.replicas.front().device_ranks) {
      proto::PlanLayoutDevice* d = lp->add_devices();
      for (int t = 0; t < pl.tp; ++t) d->add_gpus(first + t);
    }
    lp->set_iteration_time_s(o.predicted.pipeline_iteration_s[p]);
  }
  proto::LayoutPlan* lplan = out.mutable_layout_plan();
  *lplan = LayoutPlanToProto(o.plan);
  for (size_t p = 0; p < o.tunes.size(); ++p) {
    *lplan->mutable_pipelines(static_cast<int>(p))->mutable_plan() = ToProto(o.tunes[p]).plan();
  }
  lplan->mutable_predicted()->set_iteration_time_s(o.predicted.iteration_time_s);
  lplan->mutable_predicted()->set_pipeline_time_s(o.predicted.pipeline_time_s);
  lplan->mutable_predicted()->set_dp_sync_s(o.predicted.dp_sync_exposed_s);
  lplan->mutable_predicted()->set_tokens_per_s(o.predicted.tokens_per_s);
  return out;
}

}  // namespace

absl::StatusOr<PlannedOn> RunNodeLossPlanning(const PlanningInput& input,
                                              const std::vector<double>& layer_time_factors,
                                              std::function<bool()> should_stop,
                                              const NodeLossContext& context) {
  absl::StatusOr<proto::PlanResult> fresh = RunPlanning(input, layer_time_factors, should_stop);
  if (absl::IsCancelled(fresh.status())) return fresh.status();
  NodeLossRequest request;
  request.current = context.current;
  request.current_slots = context.current_slots;
  request.remaining_iterations = context.remaining_iterations;
  request.restart_s = context.restart_s;
  const CostModel cost;
  // The new layout, costed like the others.
  std::vector<NodeLossOption> options;
  std::vector<proto::PlanResult> results;
  // Ways that could not be offered, (kind, why): listed beside the others when any is offered.
  std::vector<std::pair<std::string, std::string>> not_offered;
  if (!fresh.ok()) {
    not_offered.emplace_back("new layout", std::string(fresh.status().message()));
  } else {
    NodeLossOption o;
    o.kind = "new layout";
    absl::StatusOr<LayoutPlan> plan =
        fresh->has_layout_plan() ? LayoutPlanFromProto(fresh->layout_plan())
                                 : absl::StatusOr<LayoutPlan>(SinglePipelineLayout(
                                       PlanFromProto(fresh->plan()).value_or(Plan{})));
    if (plan.ok()) {
      o.plan = std::move(*plan);
      o.summary = absl::StrCat(o.plan.layout.ToString(), " over every device left");
      o.slots = FirstSlots(input.cluster, o.plan.num_ranks);
      o.predicted.iteration_time_s =
          fresh->feasible() ? ObjectiveOf(*fresh, input.tuner)
                            : std::numeric_limits<double>::infinity();
      CostSwitch(ModelForLayout(input.model, o.plan.layout, 0), input.cluster, cost, request, &o);
      options.push_back(std::move(o));
      results.push_back(*fresh);
    } else {
      not_offered.emplace_back("new layout", std::string(plan.status().message()));
    }
  }
  std::vector<Cluster> clusters(options.size(), input.cluster);
  TunerOptions t = input.tuner;
  t.layer_time_factors = layer_time_factors;
  t.should_stop = should_stop;
  t.time_budget_s = input.tuner.time_budget_s * context.survivor_budget_share;
  absl::StatusOr<std::vector<NodeLossOption>> survivors =
      request.current.num_ranks == static_cast<int>(request.current_slots.size())
          ? SurvivorOptions(input.model, input.cluster, cost, t, request)
          : absl::StatusOr<std::vector<NodeLossOption>>(std::vector<NodeLossOption>{});
  if (should_stop && should_stop()) return absl::CancelledError("planning cancelled");
  if (!survivors.ok()) {
    not_offered.emplace_back("survivors' options", std::string(survivors.status().message()));
  } else {
    for (NodeLossOption& o : *survivors) {
      proto::PlanResult r = OptionResult(o);
      if (static_cast<int64_t>(r.ByteSizeLong()) > input.max_plan_bytes) {
        not_offered.emplace_back(o.kind, absl::StrCat(o.summary, ": its plan of ",
                                                      r.ByteSizeLong(), " bytes exceeds ",
                                                      "max_plan_bytes ", input.max_plan_bytes));
        continue;
      }
      results.push_back(std::move(r));
      clusters.push_back(o.cluster);
      options.push_back(std::move(o));
    }
  }
  if (options.empty()) {
    if (!fresh.ok()) return fresh.status();
    return PlannedOn{*fresh, input.cluster};
  }
  size_t best = 0;
  for (size_t i = 1; i < options.size(); ++i) {
    if (options[i].total_s < options[best].total_s) best = i;
  }
  // A new layout must beat the best survivors' option by the margin (NodeLossContext).
  if (options[best].kind == "new layout" && context.new_layout_min_gain > 0) {
    std::optional<size_t> kept;
    for (size_t i = 0; i < options.size(); ++i) {
      if (i != best && (!kept || options[i].total_s < options[*kept].total_s)) kept = i;
    }
    const double margin = kept ? 1 - options[best].total_s / options[*kept].total_s : 0;
    if (kept && std::isfinite(options[*kept].total_s) &&
        margin < context.new_layout_min_gain) {
      absl::StrAppend(&options[best].summary, "; predicted ", std::round(1000 * margin) / 10,
                      "% quicker than ", options[*kept].kind, ", under the ",
                      100 * context.new_layout_min_gain,
                      "% a new layout must gain (--replan_min_gain)");
      best = *kept;
    }
  }
  PlannedOn out{results[best], clusters[best]};
  for (size_t i = 0; i < options.size(); ++i) {
    const NodeLossOption& o = options[i];
    proto::NodeLossOption* p = out.result.add_node_loss_options();
    p->set_kind(o.kind);
    p->set_summary(o.summary);
    p->set_iteration_time_s(o.predicted.iteration_time_s);
    p->set_switch_s(o.switch_s);
    p->set_moved_bytes(o.moved_bytes);
    p->set_total_s(o.total_s);
    p->set_remaining_iterations(context.remaining_iterations);
    p->set_chosen(i == best);
  }
  for (const auto& [kind, why] : not_offered) {
    proto::NodeLossOption* p = out.result.add_node_loss_options();
    p->set_kind(kind);
    p->set_not_offered(why);
    p->set_remaining_iterations(context.remaining_iterations);
  }
  return out;
}

double ObjectiveOf(const proto::PlanResult& r, const TunerOptions& options) {
  // A layout: its whole iteration (every replica, gradient all-reduces), as the executor runs it.
  if (r.has_layout_plan() && r.layout_plan().predicted().iteration_time_s() > 0) {
    return r.layout_plan().predicted().iteration_time_s();
  }
  return options.objective == Objective::kSteadyState
             ? r.plan().predicted().steady_state_iteration_time_s()
             : r.plan().predicted().iteration_time_s();
}

}  // namespace octopipe::planner
