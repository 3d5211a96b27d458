#include "planner_service/planning.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/convert.h"
#include "core/cost_model.h"
#include "core/status_macros.h"

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

absl::StatusOr<PlanningInput> PrepareInput(const proto::Model& model_proto,
                                           const proto::Cluster& cluster_proto,
                                           const proto::PlanOptions& options,
                                           const std::vector<std::string>& excluded,
                                           const PlanningLimits& limits) {
  if (model_proto.layers_size() > limits.max_layers) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "model.layers: ", model_proto.layers_size(), " layers exceed the server's limit of ",
        limits.max_layers));
  }
  int64_t devices = 0;
  for (const proto::Node& n : cluster_proto.nodes()) devices += n.num_devices();
  if (devices > limits.max_devices) {
    return absl::ResourceExhaustedError(absl::StrCat("cluster.nodes: ", devices,
                                                     " devices exceed the server's limit of ",
                                                     limits.max_devices));
  }
  PlanningInput in;
  absl::StatusOr<ModelGraph> model = ModelFromProto(model_proto);
  if (!model.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("model.", model.status().message()));
  }
  in.model = std::move(*model);
  absl::StatusOr<Cluster> cluster = ClusterFromProto(cluster_proto);
  if (!cluster.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("cluster.", cluster.status().message()));
  }
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
  // After node loss the job keeps going on what is left.
  t.num_devices = options.num_devices() == 0 ? available
                                             : std::min(options.num_devices(), available);
  t.num_devices = std::min(t.num_devices, in.model.num_layers());
  if (options.num_microbatches() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "options.num_microbatches must be >= 0 (0 = the model's), got ",
        options.num_microbatches()));
  }
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
  if (options.objective().empty() || options.objective() == "synchronous") {
    t.objective = Objective::kSynchronous;
  } else if (options.objective() == "steady-state") {
    t.objective = Objective::kSteadyState;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "options.objective must be synchronous or steady-state, got '", options.objective(),
        "'"));
  }
  t.link_contention = options.link_contention();
  t.threads = limits.tuner_threads;
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
  for (const DeviceResult& d : r.predicted.devices) p->add_peak_memory_bytes(d.peak_memory_bytes);
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
  out.set_tuning_wall_s(r.tuning_wall_s);
  out.set_origin(PlanOriginText(r));
  return out;
}

absl::StatusOr<proto::PlanResult> RunPlanning(const PlanningInput& input,
                                              const std::vector<double>& layer_time_factors) {
  TunerOptions t = input.tuner;
  t.layer_time_factors = layer_time_factors;
  const CostModel cost;
  ASSIGN_OR_RETURN(TuneResult r, Tune(input.model, input.cluster, cost, t));
  return ToProto(r);
}

double ObjectiveOf(const proto::PlanResult& r, const TunerOptions& options) {
  return options.objective == Objective::kSteadyState
             ? r.plan().predicted().steady_state_iteration_time_s()
             : r.plan().predicted().iteration_time_s();
}

}  // namespace octopipe::planner
