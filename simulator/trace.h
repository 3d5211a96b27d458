// Timeline export as Chrome trace JSON (the "Trace Event Format"), which Perfetto
// (ui.perfetto.dev) and chrome://tracing open. One track per device for compute and one per
// device for the transfers it receives; times in microseconds.
#ifndef OCTOPIPE_SIMULATOR_TRACE_H_
#define OCTOPIPE_SIMULATOR_TRACE_H_

#include <string>

#include "absl/status/status.h"
#include "core/schedule.h"
#include "simulator/evaluator.h"

namespace octopipe {

// `result` must come from an evaluation of `schedule` with EvalOptions::timeline.
std::string ChromeTraceJson(const Schedule& schedule, const SimResult& result,
                            const std::string& title);

// Writes the trace to `path`; kInvalidArgument naming the path if it cannot be written.
absl::Status WriteChromeTrace(const std::string& path, const Schedule& schedule,
                              const SimResult& result, const std::string& title);

}  // namespace octopipe

#endif  // OCTOPIPE_SIMULATOR_TRACE_H_
