#include "simulator/trace.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "core/json_writer.h"

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
  }
  return "generic_work";
}

}  // namespace

std::string ChromeTraceJson(const Schedule& schedule, const SimResult& result,
                            const std::string& title) {
  JsonWriter w;
  const int P = schedule.num_devices();
  w.BeginObject().Field("displayTimeUnit", "ms").Key("otherData").BeginObject();
  w.Field("title", title).Field("iteration_time_s", result.iteration_time_s);
  w.Field("bubble_ratio", result.bubble_ratio).EndObject();
  w.Key("traceEvents").BeginArray();
  w.BeginObject().Field("name", "process_name").Field("ph", "M").Field("pid", 0);
  w.Key("args").BeginObject().Field("name", title).EndObject().EndObject();
  for (int d = 0; d < P; ++d) {
    for (int lane = 0; lane < 2; ++lane) {
      w.BeginObject().Field("name", "thread_name").Field("ph", "M").Field("pid", 0);
      w.Field("tid", d * 2 + lane).Key("args").BeginObject();
      w.Field("name", lane == 0 ? absl::StrCat("device ", d)
                                : absl::StrCat("device ", d, " recv"));
      w.EndObject().EndObject();
      w.BeginObject().Field("name", "thread_sort_index").Field("ph", "M").Field("pid", 0);
      w.Field("tid", d * 2 + lane).Key("args").BeginObject();
      w.Field("sort_index", d * 2 + lane).EndObject().EndObject();
    }
  }
  for (int d = 0; d < P && d < static_cast<int>(result.op_start_s.size()); ++d) {
    for (size_t i = 0; i < schedule.ops[d].size(); ++i) {
      const Op& op = schedule.ops[d][i];
      const double start = result.op_start_s[d][i];
      const double end = result.op_end_s[d][i];
      w.BeginObject().Field("name", OpToString(op)).Field("cat", OpKindName(op.kind));
      w.Field("ph", "X").Field("pid", 0).Field("tid", d * 2);
      w.Field("ts", start * kMicros).Field("dur", (end - start) * kMicros);
      w.Field("cname", ColorOf(op.kind));
      w.Key("args").BeginObject().Field("stage", op.stage).Field("microbatch", op.microbatch);
      w.EndObject().EndObject();
    }
  }
  for (const TransferRecord& t : result.transfers) {
    w.BeginObject();
    w.Field("name", absl::StrCat("to ", OpToString(t.consumer), " from device ", t.from_device));
    w.Field("cat", "transfer").Field("ph", "X").Field("pid", 0);
    w.Field("tid", t.to_device * 2 + 1);
    w.Field("ts", t.start_s * kMicros).Field("dur", (t.end_s - t.start_s) * kMicros);
    w.Key("args").BeginObject().Field("bytes", t.bytes).EndObject().EndObject();
  }
  w.EndArray().EndObject();
  return w.str();
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
