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

std::string VocabParallelLine(bool used, bool tried, int devices, bool with_embedding) {
  if (used) {
    return absl::StrCat(with_embedding ? "output layer and input embedding" : "output layer",
                        ": split over ", devices,
                        " devices by vocabulary (vocabulary parallelism)");
  }
  return absl::StrCat("output layer: on the last stage",
                      tried ? " (split by vocabulary: tried, slower)" : "");
}

Json RunJson(const Plan& plan, const PipelineProblem& problem, const SimResult& r) {
  Json stages = Json::array();
  for (const StageAssignment& st : plan.stages) {
    stages.push_back({{"first_layer", st.first_layer},
                      {"last_layer", st.last_layer},
                      {"device", st.device},
                      {"recompute", st.recompute}});
  }
  Json devices = Json::array();
  for (int d = 0; d < static_cast<int>(r.devices.size()); ++d) {
    const DeviceResult& dr = r.devices[d];
    devices.push_back({{"device", d},
                       {"stages", StagesOf(plan, d)},
                       {"busy_s", dr.busy_s},
                       {"bubble_ratio", dr.bubble_ratio},
                       {"steady_state_bubble_ratio", dr.steady_state_bubble_ratio},
                       {"peak_memory_bytes", dr.peak_memory_bytes},
                       {"peak_activation_bytes", PeakActivationBytes(problem, r, d)},
                       {"memory_capacity_bytes", problem.memory_capacity[d]},
                       {"fits_memory", dr.fits_memory}});
  }
  Json j = {{"schedule", plan.schedule_name},
            {"num_devices", plan.num_devices},
            {"num_stages", plan.num_stages()},
            {"num_microbatches", plan.num_microbatches},
            {"iteration_time_s", r.iteration_time_s},
            {"bubble_ratio", r.bubble_ratio},
            {"steady_state_iteration_time_s", r.steady_state_iteration_time_s},
            {"steady_state_bubble_ratio", r.steady_state_bubble_ratio},
            {"tokens_per_s", r.tokens_per_s},
            {"fits_memory", r.fits_memory},
            {"vocab_parallel", plan.vocab_parallel},
            {"stages", std::move(stages)},
            {"devices", std::move(devices)}};
  if (!r.critical_path.empty()) {
    Json path = Json::array();
    for (const CriticalPathEntry& e : r.critical_path) {
      path.push_back(absl::StrCat(OpToString(e.op), "@", e.device));
    }
    j["critical_path"] = std::move(path);
  }
  return j;
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
                  r.fits_memory ? "fits on every device" : "DOES NOT FIT on some device", "\n");
  if (plan.vocab_parallel) {
    absl::StrAppend(&out, "  ", VocabParallelLine(true, true, plan.num_devices), "\n");
  }
  absl::StrAppend(&out, "\n");
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
