#include "cli/train_layout_output.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/table.h"
#include "core/schedule.h"
#include "executor/host_probe.h"

namespace octopipe::cli {

void AddHostSpeedJson(const HostSpeed& host, Json* j) {
  if (!host.probe_s.empty()) (*j)["host_probe_s"] = host.probe_s;  // per rank
  if (host.ratio > 0) {
    (*j)["profile_host_probe_s"] = host.profile_probe_s;
    (*j)["host_time_vs_profile"] = host.ratio;
    (*j)["predicted_from_profile_s"] = host.predicted_from_profile_s;
    (*j)["predicted_at_host_speed_s"] = host.predicted_at_host_speed_s;
  }
}

void AddMeasuredOpTimes(const agent::RunMeasurement& m, bool stages, Json* j) {
  auto rows = [](const std::map<std::pair<int, OpKind>, std::pair<double, int>>& times) {
    Json out = Json::array();
    for (const auto& [key, v] : times) {
      out.push_back({key.first, std::string(OpKindName(key.second)), v.first, v.second});
    }
    return out;
  };
  if (stages) (*j)["stage_op_s"] = rows(m.stage_op_s);
  (*j)["layer_op_s"] = rows(m.layer_op_s);
}

LayoutFigures MakeLayoutFigures(const ModelGraph& graph, const LayoutPlan& layout,
                                const proto::LayoutPrediction& predicted,
                                const agent::RunMeasurement& m, const HostSpeed& host) {
  LayoutFigures f;
  f.tokens = layout.global_microbatches * graph.tokens_per_microbatch();
  f.measured = m.mean_iteration_s;
  f.want = predicted.iteration_time_s();
  f.want_sync = predicted.dp_sync_s();
  f.error = f.want > 0 && f.measured > 0 ? f.want / f.measured - 1 : 0;
  f.at_speed = host.predicted_at_host_speed_s;
  f.speed_error = f.at_speed > 0 && f.measured > 0 ? f.at_speed / f.measured - 1 : 0;
  return f;
}

void PrintLayoutJson(const std::string& transport, const LayoutPlan& layout,
                     const agent::RunMeasurement& m, const HostSpeed& host,
                     const LayoutFigures& f, std::ostream& out) {
  Json j = {{"ranks", layout.num_ranks},
            {"transport", transport},
            {"layout", layout.layout.ToString()},
            {"pipelines", layout.pipelines.size()},
            {"global_microbatches", layout.global_microbatches},
            {"loss", m.loss},
            {"iteration_time_s", m.iteration_s},
            {"measured_iteration_time_s", f.measured},
            {"measured_tokens_per_s", f.measured > 0 ? f.tokens / f.measured : 0.0},
            {"peak_activation_bytes", m.peak_activation_bytes}};
  if (f.want > 0) {
    j["predicted_iteration_time_s"] = f.want;
    j["prediction_error"] = f.error;
  }
  AddHostSpeedJson(host, &j);
  if (host.ratio > 0) {
    j["predicted_at_host_speed_s"] = f.at_speed;
    j["prediction_error_at_host_speed"] = f.speed_error;
  }
  // The gradient all-reduces per rank (seconds per iteration, and of them waited for after the
  // rank's ops) against the plan's exposed synchronisation, and the layers' measured times.
  j["grad_sync_s"] = m.grad_sync_s;
  j["grad_sync_wait_s"] = m.grad_sync_wait_s;
  if (f.want > 0) j["predicted_dp_sync_exposed_s"] = f.want_sync;
  AddMeasuredOpTimes(m, /*stages=*/false, &j);
  out << JsonText(j) << "\n";
}

void PrintLayoutText(const std::string& transport, const ModelGraph& graph,
                     const LayoutPlan& layout, const agent::RunMeasurement& m,
                     const HostSpeed& host, const LayoutFigures& f, std::ostream& out) {
  out << "model " << graph.name << " (" << graph.num_layers() << " layers), layout "
      << layout.layout.ToString() << ": " << layout.num_ranks << " ranks over " << transport
      << ", " << layout.pipelines.size() << " distinct pipelines, " << layout.num_replicas()
      << " replicas, " << layout.global_microbatches << " micro-batches per iteration\n\n";
  TextTable t({"iteration", "loss", "time"});
  for (size_t it = 0; it < m.loss.size(); ++it) {
    t.AddRow({absl::StrCat(it), absl::StrFormat("%.5f", m.loss[it]),
              FormatSeconds(m.iteration_s[it])});
  }
  out << t.Render();
  out << "\nmeasured iteration " << FormatSeconds(f.measured)
      << (m.loss.size() > 1 ? " (after the first iteration)" : "") << ", "
      << absl::StrFormat("%.0f", f.measured > 0 ? f.tokens / f.measured : 0.0) << " tokens/s\n";
  if (f.want > 0) {
    out << "the plan's prediction " << FormatSeconds(f.want) << " ("
        << absl::StrFormat("%+.1f%%", f.error * 100) << " vs measured)\n";
  }
  if (layout.layout.dp > 1 && !m.grad_sync_s.empty()) {
    const double sync = *std::max_element(m.grad_sync_s.begin(), m.grad_sync_s.end());
    const double wait = *std::max_element(m.grad_sync_wait_s.begin(), m.grad_sync_wait_s.end());
    out << "gradient all-reduces " << FormatSeconds(sync) << " per iteration (slowest rank), "
        << FormatSeconds(wait) << " of it after the rank's last op";
    if (f.want > 0) out << "; the plan predicts " << FormatSeconds(f.want_sync) << " exposed";
    out << "\n";
  }
  if (host.ratio > 0) {
    out << "host probe " << FormatSeconds(executor::MedianProbeSeconds(host.probe_s))
        << " vs the profile's " << FormatSeconds(host.profile_probe_s)
        << absl::StrFormat(" (x%.3f)", host.ratio) << ": predicted at this speed "
        << FormatSeconds(f.at_speed)
        << absl::StrFormat(" (%+.1f%% vs measured)", f.speed_error * 100) << "\n";
  }
}

}  // namespace octopipe::cli
