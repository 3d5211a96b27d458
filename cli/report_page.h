// The CLI's side of --report: turns plans, simulated timelines, tuner results and layouts into
// the HTML report's plain structs (report/html_report.h), which know no simulator types.
// Timelines are re-simulated with EvalOptions::timeline, as --trace does, with the same problem
// the command evaluated (BuildProblem, the command's link contention). Errors are the problem
// builder's and the evaluator's, as they are.
#ifndef OCTOPIPE_CLI_REPORT_PAGE_H_
#define OCTOPIPE_CLI_REPORT_PAGE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cluster.h"
#include "core/cost_model.h"
#include "core/layout_plan.h"
#include "core/model_graph.h"
#include "core/plan.h"
#include "report/html_report.h"
#include "simulator/evaluator.h"
#include "simulator/problem.h"
#include "tuner/tuner.h"

namespace octopipe::cli {

// "mamba2 x3, mlp x2" for a stage's layers, in order of first appearance.
std::string StageKinds(const ModelGraph& model, const StageAssignment& stage);

// One row per device of `schedule`; `result` must come from an evaluation of it with
// EvalOptions::timeline.
report::Timeline ReportTimeline(const std::string& title, const Schedule& schedule,
                                const SimResult& result);

// A section from a run already simulated with the timeline: its timeline, stage table and
// per-device peak memory against the problem's usable capacity.
report::Section RunSection(const std::string& title, const ModelGraph& model, const Plan& plan,
                           const PipelineProblem& problem, const SimResult& result);

// Simulates `plan` with the timeline and returns its section; `timeline_title` heads the
// timeline ("plan", a baseline's name).
absl::StatusOr<report::Section> SimulatedSection(const std::string& title,
                                                 const std::string& timeline_title,
                                                 const ModelGraph& model, const Cluster& cluster,
                                                 const CostModel& cost, bool contention,
                                                 const Plan& plan);

// A tuned pipeline's section: its plan and, when a baseline fits, the best fitting one's
// timeline (re-simulated on the same model and cluster) under it.
absl::StatusOr<report::Section> TunedSection(const std::string& title, const ModelGraph& model,
                                             const Cluster& cluster, const CostModel& cost,
                                             bool contention, const TuneResult& tune);

// The plan's synchronous iteration and every baseline that ran, as bars.
std::vector<report::IterationBar> BaselineBars(const TuneResult& tune);

// Who runs pipeline `p` of a layout: per replica its DP rank and the ranks of each pipeline
// device's TP group ("ranks 0-1, 8-9").
std::vector<report::Replica> ReplicasOf(const LayoutPlan& plan, int p);

// Names the rows of pipeline `p`'s section (timelines and memory) by the GPUs of each pipeline
// device's TP group in its first replica: "GPU 3", "GPUs 0-1".
void LabelLayoutDevices(const LayoutPlan& plan, int p, report::Section* section);

}  // namespace octopipe::cli

#endif  // OCTOPIPE_CLI_REPORT_PAGE_H_
