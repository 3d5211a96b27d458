// `octopipe plan --planner=ADDR`: the plan tuned by a running octopipe-planner instead of here.
// RunPlan (plan_command.cc) calls RunRemotePlan once the flags, the model and the cluster are
// resolved; the planner's reply is printed by plan_output.h's renderers, as a local plan is.
// Private to the plan_command library (it takes PlanOptions from plan_command.h).
#ifndef OCTOPIPE_CLI_PLAN_REMOTE_H_
#define OCTOPIPE_CLI_PLAN_REMOTE_H_

#include <ostream>

#include "cli/command_line.h"
#include "cli/plan_command.h"
#include "cli/planner_client.h"
#include "core/cluster.h"
#include "core/model_graph.h"
#include "proto/plan.pb.h"
#include "tuner/layout.h"
#include "tuner/tuner.h"

namespace octopipe::cli {

// Sends one Plan request (the model, the cluster, `t`'s and `layout`'s fields; the planner
// chooses the PP x TP x EP x DP layout when `choose_layout`, i.e. without --devices; --time_budget
// only when `flags` set it), writes --out from the reply, and prints it as JSON or as tables.
// The exit code: 0, 3 when the plan is infeasible, 2 when the connection flags are bad, 1 when
// the call or --out fails.
int RunRemotePlan(PlannerConnection& remote, const ModelGraph& model, const Cluster& cluster,
                  const TunerOptions& t, const LayoutRequest& layout, bool choose_layout,
                  const PlanOptions& o, const CommandLine& flags, std::ostream& out,
                  std::ostream& err);

// What the flags changed before planning, recorded with a plan file's prediction for `simulate
// --plan` to apply: --ep_overlap, --recompute other than auto, --contention (plan_command.cc;
// the local and the remote --out both write it).
void RecordPlannedWith(const PlanOptions& o, proto::LayoutPrediction* predicted);

}  // namespace octopipe::cli

#endif  // OCTOPIPE_CLI_PLAN_REMOTE_H_
