// What `octopipe plan` prints: the --json objects and the tables of a tuned plan and of a
// chosen layout, and the command's error line. One renderer for plans tuned here
// (plan_command.cc) and plans a planner sent (plan_remote.cc, which fills a TuneResult and a
// LayoutResult from the planner's reply).
#ifndef OCTOPIPE_CLI_PLAN_OUTPUT_H_
#define OCTOPIPE_CLI_PLAN_OUTPUT_H_

#include <ostream>

#include "absl/status/status.h"
#include "core/cluster.h"
#include "core/json_text.h"
#include "core/model_graph.h"
#include "tuner/layout.h"
#include "tuner/tuner.h"

namespace octopipe::cli {

// Prints "octopipe plan: error: MESSAGE" on `err` and returns `code`, the exit code.
int FailPlan(std::ostream& err, const absl::Status& s, int code);

// The --json document: feasibility, the plan, its prediction, every baseline and the log.
Json TuneResultJson(const ModelGraph& model, const TuneResult& t);

// The plan tables: stages, prediction, devices, baselines, bound and search log. One renderer
// for plans tuned here and plans a planner sent (plan_remote.cc's RemoteTuneResult; `planner`
// true: the line says where it was tuned, and there is no search log to print). `steady`: the
// baselines are compared with the plan by their steady-state iterations.
void WriteTables(std::ostream& out, const ModelGraph& model, const Cluster& cluster,
                 const TuneResult& t, bool steady, bool planner = false);

// The "layout" object of --json: the chosen PP x TP x EP x DP, which GPUs form each distinct
// pipeline, the iteration split into pipeline and DP sync, and every layout considered.
Json LayoutJson(const Cluster& physical, const LayoutResult& r);

// The layout part of the tables: the choice, its pipelines and the layouts it beat. A
// planner's layout (plan_remote.cc's RemoteLayoutResult) has no candidate list: `tuned` of
// `considered` layouts is printed instead.
void WriteLayoutTables(std::ostream& out, const Cluster& physical, const LayoutResult& r,
                       int tuned = 0, int considered = 0);

}  // namespace octopipe::cli

#endif  // OCTOPIPE_CLI_PLAN_OUTPUT_H_
