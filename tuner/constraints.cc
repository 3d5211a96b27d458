#include "tuner/constraints.h"

#include "absl/strings/str_cat.h"
#include "simulator/schedules.h"

namespace octopipe {
namespace {

bool WithinStageLimit(int limit, const std::vector<StageAssignment>& stages) {
  if (limit <= 0) return true;
  std::vector<int> count;
  for (const StageAssignment& st : stages) {
    if (st.device >= static_cast<int>(count.size())) count.resize(st.device + 1, 0);
    if (++count[st.device] > limit) return false;
  }
  return true;
}

}  // namespace

absl::Status ApplyRecomputeChoice(const std::string& choice, const std::string& field,
                                  ModelGraph* model, ExecutorConstraints* c) {
  RecomputePolicy& policy = model->training.recompute;
  if (choice.empty() || choice == "auto") {
    if (policy == RecomputePolicy::kFull) {
      if (!c->allow_recompute) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, ": the model asks for full recompute (training.recompute = full) but "
            "recompute is turned off (no_recompute); pass recompute = none to override the model"));
      }
      c->require_recompute = true;
    }
    return absl::OkStatus();
  }
  if (choice == "none") {
    policy = RecomputePolicy::kNone;
    c->allow_recompute = false;
    c->require_recompute = false;
  } else if (choice == "selective") {
    policy = RecomputePolicy::kSelective;
    c->allow_recompute = false;
    c->require_recompute = false;
  } else if (choice == "full") {
    policy = RecomputePolicy::kFull;  // not selective on top: every stage re-runs its forward
    if (!c->allow_recompute) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": full contradicts no_recompute (no stage may recompute)"));
    }
    c->require_recompute = true;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " must be auto, none, selective or full, got '", choice, "'"));
  }
  return absl::OkStatus();
}

absl::Status ValidateConstraints(const ExecutorConstraints& c, int num_layers, int num_devices) {
  if (c.require_recompute && !c.allow_recompute) {
    return absl::InvalidArgumentError(
        "require_recompute contradicts allow_recompute = false (no_recompute)");
  }
  if (c.max_stages_per_device < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_stages_per_device must be >= 0 (0: no limit), got ", c.max_stages_per_device));
  }
  if (c.fixed_stages.empty()) {
    if (c.fixed_placement) {
      return absl::InvalidArgumentError(
          "fixed_placement needs fixed_stages (the partition the devices belong to)");
    }
    return absl::OkStatus();
  }
  int next = 0;
  for (size_t s = 0; s < c.fixed_stages.size(); ++s) {
    const StageAssignment& st = c.fixed_stages[s];
    if (st.first_layer != next || st.last_layer < st.first_layer) {
      return absl::InvalidArgumentError(absl::StrCat(
          "fixed_stages[", s, "]: layers ", st.first_layer, "-", st.last_layer,
          " do not continue the partition at layer ", next));
    }
    next = st.last_layer + 1;
    if (c.fixed_placement && (st.device < 0 || st.device >= num_devices)) {
      return absl::InvalidArgumentError(absl::StrCat("fixed_stages[", s, "].device: ", st.device,
                                                     " is outside [0, ", num_devices, ")"));
    }
  }
  if (next != num_layers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fixed_stages: the partition covers layers 0-", next - 1, " of a model with ",
        num_layers, " layers"));
  }
  const int S = static_cast<int>(c.fixed_stages.size());
  if (c.max_stages_per_device > 0 && S > c.max_stages_per_device * num_devices) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fixed_stages: ", S, " stages do not fit ", num_devices, " devices at most ",
        c.max_stages_per_device, " per device (max_stages_per_device)"));
  }
  if (c.fixed_placement && !WithinStageLimit(c.max_stages_per_device, c.fixed_stages)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fixed_stages: the fixed placement puts more than ", c.max_stages_per_device,
        " stages on a device (max_stages_per_device)"));
  }
  return absl::OkStatus();
}

bool ApplyConstraints(const ExecutorConstraints& c, Candidate* candidate) {
  std::vector<StageAssignment>& stages = candidate->stages;
  if (!c.fixed_stages.empty()) {
    if (stages.size() != c.fixed_stages.size()) return false;
    for (size_t s = 0; s < stages.size(); ++s) {
      stages[s].first_layer = c.fixed_stages[s].first_layer;
      stages[s].last_layer = c.fixed_stages[s].last_layer;
      if (c.fixed_placement) stages[s].device = c.fixed_stages[s].device;
    }
  }
  if (!c.allow_recompute) {
    for (StageAssignment& st : stages) st.recompute = false;
  }
  if (c.require_recompute) {
    for (StageAssignment& st : stages) st.recompute = true;
  }
  if (!c.allow_bw_split) {
    candidate->policy.split_backward = false;
    candidate->policy.classic = -1;  // the classic orders are checked as plans instead
  }
  return WithinStageLimit(c.max_stages_per_device, stages);
}

bool PlanMeetsConstraints(const ExecutorConstraints& c, const Plan& plan) {
  if (!WithinStageLimit(c.max_stages_per_device, plan.stages)) return false;
  if (!c.fixed_stages.empty()) {
    if (plan.stages.size() != c.fixed_stages.size()) return false;
    for (size_t s = 0; s < plan.stages.size(); ++s) {
      const StageAssignment& a = plan.stages[s];
      const StageAssignment& f = c.fixed_stages[s];
      if (a.first_layer != f.first_layer || a.last_layer != f.last_layer) return false;
      if (c.fixed_placement && a.device != f.device) return false;
    }
  }
  for (const StageAssignment& st : plan.stages) {
    if (!c.allow_recompute && st.recompute) return false;
    if (c.require_recompute && !st.recompute) return false;
  }
  for (const auto& ops : plan.schedule.ops) {
    for (const Op& op : ops) {
      if (!c.allow_bw_split && op.kind == OpKind::kW) return false;
      if (!c.allow_recompute && op.kind == OpKind::kR) return false;
    }
  }
  return true;
}

std::vector<Candidate> ConstraintSeeds(const ExecutorConstraints& c, int num_devices,
                                       const std::vector<Policy>& policies) {
  std::vector<Candidate> out;
  if (c.fixed_stages.empty()) return out;
  const int S = static_cast<int>(c.fixed_stages.size());
  std::vector<std::vector<int>> placements;
  if (c.fixed_placement) {
    std::vector<int> fixed;
    for (const StageAssignment& st : c.fixed_stages) fixed.push_back(st.device);
    placements.push_back(fixed);
  } else {
    std::vector<int> loop(S);
    for (int s = 0; s < S; ++s) loop[s] = s % num_devices;
    placements.push_back(loop);
    if (S == 2 * num_devices && num_devices >= 2) placements.push_back(VShapePlacement(num_devices));
  }
  for (const std::vector<int>& placement : placements) {
    std::vector<StageAssignment> stages = c.fixed_stages;
    for (int s = 0; s < S; ++s) stages[s].device = placement[s];
    for (const Policy& p : policies) {
      Candidate cand{stages, p};
      for (StageAssignment& st : cand.stages) st.recompute = false;
      if (!ApplyConstraints(c, &cand)) continue;
      out.push_back(cand);
      if (c.allow_recompute && !c.require_recompute) {
        for (StageAssignment& st : cand.stages) st.recompute = true;
        out.push_back(cand);
      }
    }
  }
  return out;
}

}  // namespace octopipe
