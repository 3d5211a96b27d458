#include "simulator/trace.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "core/json_text.h"

namespace octopipe {
namespace {

constexpr double kMicros = 1e6;

const char* ColorOf(OpKind kind) {
  // Chrome trace reserved color names, so kinds are told apart at a glance.
  switch (kind) {
    case OpKind::kF: return "thread_state_running";
    case OpKind::kB: return "rail_response";
    case OpKind::kW: return "good";
    case OpKind::kBW: return "rail_animation";
    case OpKind::kR: return "bad";
    case OpKind::kS: return "yellow";
    case OpKind::kT: return "olive";
  }
  return "generic_work";
}

// Metadata events: the process name, and per device a compute lane and a receive lane.
void AddLaneNames(Json& events, int devices, const std::string& title) {
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 0},
                    {"args", {{"name", title}}}});
  for (int d = 0; d < devices; ++d) {
    for (int lane = 0; lane < 2; ++lane) {
      const int tid = d * 2 + lane;
      const std::string name =
          lane == 0 ? absl::StrCat("device ", d) : absl::StrCat("device ", d, " recv");
      events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", tid},
                        {"args", {{"name", name}}}});
      events.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", 0}, {"tid", tid},
                        {"args", {{"sort_index", tid}}}});
    }
  }
}

}  // namespace

std::string ChromeTraceJson(const Schedule& schedule, const SimResult& result,
                            const std::string& title) {
  const int P = schedule.num_devices();
  Json events = Json::array();
  AddLaneNames(events, P, title);
  for (int d = 0; d < P && d < static_cast<int>(result.op_start_s.size()); ++d) {
    for (size_t i = 0; i < schedule.ops[d].size(); ++i) {
      const Op& op = schedule.ops[d][i];
      const double start = result.op_start_s[d][i];
      const double end = result.op_end_s[d][i];
      events.push_back({{"name", OpToString(op)},
                        {"cat", std::string(OpKindName(op.kind))},
                        {"ph", "X"},
                        {"pid", 0},
                        {"tid", d * 2},
                        {"ts", start * kMicros},
                        {"dur", (end - start) * kMicros},
                        {"cname", ColorOf(op.kind)},
                        {"args", {{"stage", op.stage}, {"microbatch", op.microbatch}}}});
    }
  }
  for (const TransferRecord& t : result.transfers) {
    events.push_back(
        {{"name", absl::StrCat("to ", OpToString(t.consumer), " from device ", t.from_device)},
         {"cat", "transfer"},
         {"ph", "X"},
         {"pid", 0},
         {"tid", t.to_device * 2 + 1},
         {"ts", t.start_s * kMicros},
         {"dur", (t.end_s - t.start_s) * kMicros},
         {"args", {{"bytes", t.bytes}}}});
  }
  Json doc = {{"displayTimeUnit", "ms"},
              {"otherData",
               {{"title", title},
                {"iteration_time_s", result.iteration_time_s},
                {"bubble_ratio", result.bubble_ratio}}},
              {"traceEvents", std::move(events)}};
  return JsonText(doc);
}

absl::Status WriteChromeTrace(const std::string& path, const Schedule& schedule,
                              const SimResult& result, const std::string& title) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    return absl::InvalidArgumentError(
        absl::StrCat("--trace: cannot open '", path, "' for writing: ", std::strerror(errno)));
  }
  out << ChromeTraceJson(schedule, result, title);
  out.close();
  if (!out) {
    return absl::InvalidArgumentError(absl::StrCat("--trace: writing '", path, "' failed"));
  }
  return absl::OkStatus();
}

}  // namespace octopipe
