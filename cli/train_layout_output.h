// What `octopipe train` prints for a layout run (a --plan file holding a whole layout: several
// pipelines or replicas, or TP), which RunLayoutTrain in train_command.cc runs: the figures it
// reports (LayoutFigures) and their --json and text forms. With them the host-speed comparison
// (HostSpeed, --host_probe) that train_command.cc computes for every run, and its --json
// fields, which the single-pipeline result there prints too.
#ifndef OCTOPIPE_CLI_TRAIN_LAYOUT_OUTPUT_H_
#define OCTOPIPE_CLI_TRAIN_LAYOUT_OUTPUT_H_

#include <ostream>
#include <string>
#include <vector>

#include "core/json_text.h"
#include "core/layout_plan.h"
#include "core/model_graph.h"
#include "proto/plan.pb.h"
#include "worker_agent/local_run.h"

namespace octopipe::cli {

// --host_probe: this run's probes against the profile's, and the plan's prediction from the
// profile as measured and at the host's speed now (every layer time and the per-op and
// per-message CPU costs scaled by the probes' ratio; link times unchanged). Everything here is
// known before the first iteration runs.
struct HostSpeed {
  std::vector<double> probe_s;  // per rank
  double profile_probe_s = 0;   // 0: no --profile
  double ratio = 0;             // median probe now / the profile's
  double predicted_from_profile_s = 0, predicted_at_host_speed_s = 0;
};

// The host-speed probe's figures in a --json result: every rank's probe and, against a
// profile, the ratio and the predictions from the profile as measured and at the host's speed.
void AddHostSpeedJson(const HostSpeed& host, Json* j);

// The measured op times behind a prediction, for analysis, in a --json result: `layer_op_s`
// [layer, kind, mean seconds per op, samples] over every rank holding the layer (its shard's
// time under TP or EP) and, with `stages` (one pipeline: stage numbers are unambiguous),
// `stage_op_s` [stage, kind, ...] likewise.
void AddMeasuredOpTimes(const agent::RunMeasurement& m, bool stages, Json* j);

// What a layout run reports: the measured iteration against the plan's prediction and, with a
// host probe against a profile, against the prediction at the host's speed now.
struct LayoutFigures {
  double tokens = 0;       // per iteration
  double measured = 0;     // mean iteration
  double want = 0;         // the plan's prediction (0: none)
  double want_sync = 0;    // of which its DP gradient synchronisation after the last op
  double error = 0;        // want vs measured
  double at_speed = 0;     // predicted at the host's speed (0: none)
  double speed_error = 0;  // at_speed vs measured
};

LayoutFigures MakeLayoutFigures(const ModelGraph& graph, const LayoutPlan& layout,
                                const proto::LayoutPrediction& predicted,
                                const agent::RunMeasurement& m, const HostSpeed& host);

// A layout run's result as --json (`transport`: --transport).
void PrintLayoutJson(const std::string& transport, const LayoutPlan& layout,
                     const agent::RunMeasurement& m, const HostSpeed& host,
                     const LayoutFigures& f, std::ostream& out);

// A layout run's result as text: the table of iterations, the measured iteration and
// tokens/s, and the predictions.
void PrintLayoutText(const std::string& transport, const ModelGraph& graph,
                     const LayoutPlan& layout, const agent::RunMeasurement& m,
                     const HostSpeed& host, const LayoutFigures& f, std::ostream& out);

}  // namespace octopipe::cli

#endif  // OCTOPIPE_CLI_TRAIN_LAYOUT_OUTPUT_H_
