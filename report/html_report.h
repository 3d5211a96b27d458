// HTML report: a plan you can look at. One self-contained page (inline CSS, inline SVG and a
// few lines of inline JavaScript; nothing fetched, no other file), as `octopipe plan --report`
// and `octopipe simulate --report` write it. It shows:
//   * a header: the model and cluster names, the predicted iteration time, bubble ratio and
//     tokens/s, further facts (plan origin, layout, speed-up) and the legend of op colours;
//   * per section (a single plan is one section; a layout has one per distinct pipeline,
//     with the replicas and ranks that run it): the timeline, one row per device and one
//     rectangle per op coloured by kind (F, B, W, BW, R and the vocabulary passes S and T),
//     bubbles left as empty space; below it the best baseline's timeline when there is one;
//     then the stage -> device table and each device's peak memory against its capacity;
//   * the iteration times of the plan and its baselines as bars.
// Every timeline and bar of a page shares one time axis in ms, from 0 to the longest iteration
// (or last op end) on the page, so lengths compare across them.
//
// This package knows no simulator types: the caller converts its schedule, simulated timeline
// and memory into the plain structs below (cli/report_page.h does it for the CLI).
//
// Geometry (what tests/report_browser_test.sh relies on): the body has no margin; the header is
// exactly kHeaderHeightPx high; the first section starts with a heading exactly
// kSectionHeadingPx high, followed at once by its plan timeline, so that timeline's SVG has its
// top-left corner at (0, kHeaderHeightPx + kSectionHeadingPx). In every timeline SVG the plot
// area starts kLabelWidthPx from its left and is kPlotWidthPx wide, and device row d spans
// y = kAxisHeightPx + d * kRowHeightPx .. + kRowHeightPx. Ops are drawn with crisp edges in
// the exact colours of KindColor.
//
// DOM contract: each timeline is <svg class="timeline" data-timeline="plan|baseline"
// data-section="S" data-ops="N">, holding one <g class="device-row" data-device="D"> per
// device and, inside it, one <rect class="op" data-op="F3.7" data-kind="F" data-device="D"
// data-start-ms=".." data-end-ms=".."> per op; each memory bar is <rect class="mem-bar"
// data-device="D" data-peak-bytes=".." data-capacity-bytes="..">; each stage table row is
// <tr class="stage-row">; each baseline bar <rect class="iteration-bar" data-name="..">. The
// page's script checks that every timeline holds its data-ops op rectangles, then sets
// <body data-report-ready="true"> and shows an op's times on hover; it writes to the console
// only when that check fails. Names (model, cluster, titles, labels) are HTML-escaped.
//
// Errors: RenderHtmlReport returns kInvalidArgument naming the field and value for input it
// cannot draw (sections[0].plan.devices[1].ops[3].end_s: before start_s, an unknown op kind,
// non-finite numbers, no section). Stateless; thread-safe.
#ifndef OCTOPIPE_REPORT_HTML_REPORT_H_
#define OCTOPIPE_REPORT_HTML_REPORT_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace octopipe::report {

inline constexpr int kHeaderHeightPx = 96;
inline constexpr int kSectionHeadingPx = 32;
inline constexpr int kLabelWidthPx = 120;
inline constexpr int kPlotWidthPx = 1200;
inline constexpr int kAxisHeightPx = 24;
inline constexpr int kRowHeightPx = 20;

// "#rrggbb" of an op kind ("F", "B", "W", "BW", "R", "S", "T"); empty for any other text.
absl::string_view KindColor(absl::string_view kind);

struct TimelineOp {
  std::string kind;   // F, B, W, BW, R, S or T (core/schedule.h's OpKindName)
  std::string label;  // the op's text form, "F3.7"
  double start_s = 0;
  double end_s = 0;
};

struct Timeline {
  std::string title;       // shown left of the axis: "plan", "1f1b-balanced"
  double iteration_s = 0;  // marked by a dashed line
  // ops per device row, in any order; device_labels[d] names row d ("device 3"); when it is
  // shorter than `devices`, the missing rows are "device d".
  std::vector<std::vector<TimelineOp>> devices;
  std::vector<std::string> device_labels;
};

struct StageRow {
  int first_layer = 0;  // inclusive
  int last_layer = 0;   // inclusive
  int device = 0;
  bool recompute = false;
  std::string kinds;  // "mamba2 x3, mlp", may be empty
};

struct MemoryBar {
  std::string device;         // "device 0"
  double peak_bytes = 0;
  double capacity_bytes = 0;  // usable capacity; infinite or <= 0: unlimited
};

struct Replica {
  std::string name;   // "DP rank 0"
  std::string ranks;  // "ranks 0-1, 8-9"
};

struct Section {
  std::string title;              // "pipeline 0 (the slowest)"; "plan" for a single plan
  std::vector<Replica> replicas;  // who runs it; empty for a single plan
  Timeline plan;
  std::optional<Timeline> baseline;  // the best fitting baseline, re-simulated
  std::string baseline_caption;      // shown above the baseline's timeline when not empty
  std::vector<StageRow> stages;
  std::vector<MemoryBar> memory;
};

struct IterationBar {
  std::string name;  // "plan", "1f1b", ...
  double iteration_s = 0;
  bool fits = true;
  bool ours = false;  // drawn in the plan's colour
};

struct Fact {
  std::string name;   // "origin"
  std::string value;  // "tuned"
};

struct Page {
  std::string command;  // "octopipe plan"
  std::string model;
  std::string cluster;
  double iteration_s = 0;
  double bubble_ratio = 0;
  double tokens_per_s = 0;
  std::vector<Fact> facts;
  std::vector<Section> sections;  // at least one
  std::string bars_title;         // "pipeline 0 against its baselines"
  std::vector<IterationBar> bars;  // none: the block is left out
};

// The page as HTML text (UTF-8). Errors: see the top comment.
absl::StatusOr<std::string> RenderHtmlReport(const Page& page);

// Whether `path` can be written, checked before any work: a directory, a missing directory or
// no permission is kInvalidArgument "<flag>: cannot write '<path>': <why>". Leaves an existing
// file as it was and removes the file it had to create.
absl::Status CheckReportPath(absl::string_view flag, const std::string& path);

// Renders and writes the page; errors name `flag` and the path (or the field, from
// RenderHtmlReport).
absl::Status WriteHtmlReport(absl::string_view flag, const std::string& path, const Page& page);

}  // namespace octopipe::report

#endif  // OCTOPIPE_REPORT_HTML_REPORT_H_
