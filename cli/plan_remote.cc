#include "cli/plan_remote.h"

#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cli/inputs.h"
#include "cli/plan_output.h"
#include "core/convert.h"
#include "core/file_io.h"
#include "core/layout_plan.h"
#include "core/status_macros.h"
#include "proto/planner.pb.h"

namespace octopipe::cli {
namespace {

// A planner's PlanResult as the TuneResult the tables print (the fields they show). The
// per-device busy and bubble figures are those the planner sent (zero from a planner that
// sends only peak memory).
absl::StatusOr<TuneResult> RemoteTuneResult(const proto::PlanResult& r) {
  TuneResult t;
  t.feasible = r.feasible();
  t.infeasible_reason = r.infeasible_reason();
  t.required_memory_bytes.assign(r.required_memory_bytes().begin(),
                                 r.required_memory_bytes().end());
  ASSIGN_OR_RETURN(t.plan, PlanFromProto(r.plan()));
  const proto::Prediction& p = r.plan().predicted();
  t.predicted.iteration_time_s = p.iteration_time_s();
  t.predicted.steady_state_iteration_time_s = p.steady_state_iteration_time_s();
  t.predicted.bubble_ratio = p.bubble_ratio();
  t.predicted.steady_state_bubble_ratio = p.steady_state_bubble_ratio();
  t.predicted.tokens_per_s = p.tokens_per_s();
  for (int d = 0; d < p.peak_memory_bytes_size(); ++d) {
    DeviceResult dr;
    dr.peak_memory_bytes = p.peak_memory_bytes(d);
    if (d < p.device_busy_s_size()) dr.busy_s = p.device_busy_s(d);
    if (d < p.device_bubble_ratio_size()) dr.bubble_ratio = p.device_bubble_ratio(d);
    dr.fits_memory = d < p.device_fits_memory_size() ? p.device_fits_memory(d) : r.feasible();
    t.predicted.devices.push_back(dr);
  }
  for (const proto::BaselineFigures& f : r.baselines()) {
    BaselineResult b;
    b.name = f.name();
    b.ran = f.ran();
    b.error = f.error();
    b.fits = f.fits();
    b.result.iteration_time_s = f.iteration_time_s();
    b.result.steady_state_iteration_time_s = f.steady_state_iteration_time_s();
    b.result.bubble_ratio = f.bubble_ratio();
    b.result.steady_state_bubble_ratio = f.steady_state_bubble_ratio();
    DeviceResult peak;
    peak.peak_memory_bytes = f.peak_memory_bytes();
    b.result.devices.push_back(peak);
    t.baselines.push_back(std::move(b));
  }
  t.best_baseline = r.best_baseline();
  t.speedup_vs_best_baseline = r.speedup_vs_best_baseline();
  // PlanOriginText's inverse: "tuned", "baseline:NAME", "infeasible".
  if (r.origin() == "infeasible") {
    t.origin = PlanOrigin::kIgnoringMemory;
  } else if (absl::StartsWith(r.origin(), "baseline:")) {
    t.origin = PlanOrigin::kBaseline;
  }
  t.lower_bound.seconds = r.lower_bound_s();
  t.lower_bound.binding = r.lower_bound_binding();
  t.lower_bound_gap = r.lower_bound_gap();
  t.vocab_parallel = r.vocab_parallel();
  t.vocab_parallel_tried = r.vocab_parallel_tried();
  t.tuning_wall_s = r.tuning_wall_s();
  return t;
}

// A planner's PlanLayout as the LayoutResult the layout tables print (no candidate list: the
// planner sends how many layouts it considered and tuned).
LayoutResult RemoteLayoutResult(const proto::PlanLayout& l) {
  LayoutResult r;
  r.layout.pp = l.pp();
  r.layout.tp = l.tp();
  r.layout.ep = l.ep();
  r.layout.dp = l.dp();
  r.layout.pp_outer = l.rank_order() != "tp-pp-dp";
  r.microbatches = l.microbatches_per_pipeline();
  r.global_microbatches = l.global_microbatches();
  r.pipeline_time_s = l.pipeline_time_s();
  r.dp_sync_s = l.dp_sync_s();
  r.iteration_time_s = l.iteration_time_s();
  r.tokens_per_s = l.tokens_per_s();
  for (const proto::PlanLayoutPipeline& p : l.pipelines()) {
    LayoutPipeline lp;
    lp.replicas.assign(p.replicas().begin(), p.replicas().end());
    for (const proto::PlanLayoutDevice& d : p.devices()) {
      lp.device_gpus.emplace_back(d.gpus().begin(), d.gpus().end());
    }
    lp.tune.predicted.iteration_time_s = p.iteration_time_s();
    lp.dp_sync_s = p.dp_sync_s();
    r.pipelines.push_back(std::move(lp));
  }
  return r;
}

// The request's layout and executor-constraint fields (proto/planner.proto 260-270).
void SetLayoutAndConstraints(const TunerOptions& t, const LayoutRequest& layout,
                             bool choose_layout, proto::PlanOptions* o) {
  o->set_choose_layout(choose_layout);
  if (choose_layout) o->set_num_devices(0);
  o->set_layout_pp(layout.pp);
  o->set_layout_tp(layout.tp);
  o->set_layout_ep(layout.ep);
  o->set_layout_dp(layout.dp);
  o->set_max_layouts(layout.max_tuned);
  o->set_no_bw_split(!t.constraints.allow_bw_split);
  o->set_no_recompute(!t.constraints.allow_recompute);
  if (t.constraints.require_recompute) o->set_recompute("full");
  o->set_max_stages_per_device(t.constraints.max_stages_per_device);
  for (const StageAssignment& st : t.constraints.fixed_stages) {
    proto::StageSpec* s = o->add_fixed_stages();
    s->set_first_layer(st.first_layer);
    s->set_last_layer(st.last_layer);
    s->set_device(st.device);
  }
  o->set_fixed_placement(t.constraints.fixed_placement);
}

}  // namespace

int RunRemotePlan(PlannerConnection& remote, const ModelGraph& model, const Cluster& cluster,
                  const TunerOptions& t, const LayoutRequest& layout, bool choose_layout,
                  const PlanOptions& o, const CommandLine& flags, std::ostream& out,
                  std::ostream& err) {
  auto planner = remote.Connect(&err);
  if (!planner.ok()) return FailPlan(err, planner.status(), 2);
  proto::PlanRequest req;
  *req.mutable_model() = ModelToProto(model);
  *req.mutable_cluster() = ClusterToProto(cluster);
  req.mutable_options()->set_num_devices(t.num_devices);
  req.mutable_options()->set_num_microbatches(t.num_microbatches);
  if (flags.was_set("time_budget")) req.mutable_options()->set_time_budget_s(o.time_budget);
  req.mutable_options()->set_seed(t.seed);
  req.mutable_options()->set_objective_kind(ObjectiveToProto(t.objective));
  req.mutable_options()->set_link_contention(o.contention);
  req.mutable_options()->set_vocab_parallel(VocabParallelToProto(t.vocab_parallel));
  SetLayoutAndConstraints(t, layout, choose_layout, req.mutable_options());
  proto::PlanResponse resp;
  // Every replica tunes one-shot plans: spread over them (PlannerClient::Route::kSpread).
  grpc::Status s = (*planner)->Call(PlannerClient::Route::kSpread, &proto::Planner::Stub::Plan,
                                    req, &resp);
  if (!s.ok()) return FailPlan(err, FromGrpc(s), 1);
  if (!o.out.empty()) {
    // The whole layout when the planner chose one, else its one pipeline as a layout.
    proto::LayoutPlan plan;
    if (resp.result().layout_plan().pipelines_size() > 0) {
      plan = resp.result().layout_plan();
    } else {
      absl::StatusOr<Plan> single = PlanFromProto(resp.result().plan());
      if (!single.ok()) return FailPlan(err, single.status(), 1);
      plan = LayoutPlanToProto(SinglePipelineLayout(*single));
      *plan.mutable_pipelines(0)->mutable_plan()->mutable_predicted() =
          resp.result().plan().predicted();
      plan.mutable_predicted()->set_iteration_time_s(
          resp.result().plan().predicted().iteration_time_s());
      plan.mutable_predicted()->set_tokens_per_s(resp.result().plan().predicted().tokens_per_s());
    }
    RecordPlannedWith(o, plan.mutable_predicted());
    LayoutPlanFileForm(&plan);
    if (absl::Status w = WriteStringToFile(ResolvePath(o.out), ProtoToJson(plan) + "\n");
        !w.ok()) {
      return FailPlan(err, absl::Status(w.code(), absl::StrCat("--out: ", w.message())), 1);
    }
  }
  if (o.json) {
    out << ProtoToJson(resp.result()) << "\n";
  } else {
    absl::StatusOr<TuneResult> tuned = RemoteTuneResult(resp.result());
    if (!tuned.ok()) {
      return FailPlan(
          err,
          absl::Status(tuned.status().code(),
                       absl::StrCat("the planner's plan: ", tuned.status().message())),
          1);
    }
    if (resp.result().has_layout()) {
      const proto::PlanLayout& l = resp.result().layout();
      WriteLayoutTables(out, cluster, RemoteLayoutResult(l), l.layouts_tuned(),
                        l.layouts_considered());
    }
    WriteTables(out, model, cluster, *tuned, t.objective == Objective::kSteadyState,
                /*planner=*/true);
  }
  return resp.result().feasible() ? 0 : 3;
}

}  // namespace octopipe::cli
