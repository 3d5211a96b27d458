#include "cli/report.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/table.h"

namespace octopipe::cli {
namespace {

std::vector<int> StagesOf(const Plan& plan, int device) {
  std::vector<int> out;
  for (int s = 0; s < plan.num_stages(); ++s) {
    if (plan.stages[s].device == device) out.push_back(s);
  }
  return out;
}

}  // namespace

void WriteRunJson(JsonWriter& w, const Plan& plan, const PipelineProblem& problem,
                  const SimResult& r) {
  w.BeginObject();
  w.Field("schedule", plan.schedule_name);
  w.Field("num_devices", plan.num_devices);
  w.Field("num_stages", plan.num_stages());
  w.Field("num_microbatches", plan.num_microbatches);
  w.Field("iteration_time_s", r.iteration_time_s);
  w.Field("bubble_ratio", r.bubble_ratio);
  w.Field("steady_state_iteration_time_s", r.steady_state_iteration_time_s);
  w.Field("steady_state_bubble_ratio", r.steady_state_bubble_ratio);
  w.Field("tokens_per_s", r.tokens_per_s);
  w.Field("fits_memory", r.fits_memory);
  w.Key("stages").BeginArray();
  for (const StageAssignment& st : plan.stages) {
    w.BeginObject().Field("first_layer", st.first_layer).Field("last_layer", st.last_layer);
    w.Field("device", st.device).Field("recompute", st.recompute).EndObject();
  }
  w.EndArray();
  w.Key("devices").BeginArray();
  for (int d = 0; d < static_cast<int>(r.devices.size()); ++d) {
    const DeviceResult& dr = r.devices[d];
    w.BeginObject().Field("device", d);
    w.Key("stages").BeginArray();
    for (int s : StagesOf(plan, d)) w.Int(s);
    w.EndArray();
    w.Field("busy_s", dr.busy_s);
    w.Field("bubble_ratio", dr.bubble_ratio);
    w.Field("steady_state_bubble_ratio", dr.steady_state_bubble_ratio);
    w.Field("peak_memory_bytes", dr.peak_memory_bytes);
    w.Field("memory_capacity_bytes", problem.memory_capacity[d]);
    w.Field("fits_memory", dr.fits_memory);
    w.EndObject();
  }
  w.EndArray();
  if (!r.critical_path.empty()) {
    w.Key("critical_path").BeginArray();
    for (const CriticalPathEntry& e : r.critical_path) {
      w.String(absl::StrCat(OpToString(e.op), "@", e.device));
    }
    w.EndArray();
  }
  w.EndObject();
}

std::string RenderRun(const Plan& plan, const PipelineProblem& problem,
                      const SimResult& r) {
  std::string out;
  absl::StrAppend(&out, "schedule ", plan.schedule_name, ": ", plan.num_stages(),
                  " stages on ", plan.num_devices, " devices, ", plan.num_microbatches,
                  " micro-batches\n");
  absl::StrAppend(&out, "  iteration time      ", FormatSeconds(r.iteration_time_s),
                  " synchronous, ", FormatSeconds(r.steady_state_iteration_time_s),
                  " steady-state\n");
  absl::StrAppend(&out, "  bubble ratio        ", FormatPercent(r.bubble_ratio),
                  " synchronous, ", FormatPercent(r.steady_state_bubble_ratio),
                  " steady-state\n");
  absl::StrAppend(&out, "  throughput          ", FormatCount(r.tokens_per_s), " tokens/s\n");
  absl::StrAppend(&out, "  memory              ",
                  r.fits_memory ? "fits on every device" : "DOES NOT FIT on some device", "\n\n");
  TextTable t({"device", "stages (layers)", "busy", "bubble", "steady bubble", "peak memory",
               "capacity", "fits"});
  for (int d = 0; d < static_cast<int>(r.devices.size()); ++d) {
    const DeviceResult& dr = r.devices[d];
    std::vector<std::string> stages;
    for (int s : StagesOf(plan, d)) {
      const StageAssignment& st = plan.stages[s];
      stages.push_back(absl::StrCat(s, " (", st.first_layer, "-", st.last_layer, ")"));
    }
    t.AddRow({absl::StrCat(d), absl::StrJoin(stages, " "), FormatSeconds(dr.busy_s),
              FormatPercent(dr.bubble_ratio), FormatPercent(dr.steady_state_bubble_ratio),
              FormatBytes(dr.peak_memory_bytes), FormatBytes(problem.memory_capacity[d]),
              dr.fits_memory ? "yes" : "NO"});
  }
  absl::StrAppend(&out, t.Render({false, true}));
  return out;
}

}  // namespace octopipe::cli
