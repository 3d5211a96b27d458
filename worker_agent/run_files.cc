#include "worker_agent/run_files.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace octopipe::agent {
namespace {

using nlohmann::json;

json OpsJson(const StageOpTimes& ops) {
  json out = json::array();
  for (const auto& [key, sum] : ops) {
    out.push_back({{"stage", key.first}, {"kind", key.second}, {"seconds", sum.seconds},
                   {"samples", sum.samples}});
  }
  return out;
}

StageOpTimes OpsFromJson(const json& j) {
  StageOpTimes ops;
  for (const json& o : j) {
    OpTimeSum& s = ops[{o.at("stage").get<int>(), o.at("kind").get<std::string>()}];
    s.seconds = o.at("seconds").get<double>();
    s.samples = o.at("samples").get<int64_t>();
  }
  return ops;
}

template <typename F>
auto Parse(const std::string& text, const char* what, F f) -> absl::StatusOr<decltype(f(json()))> {
  try {
    return f(json::parse(text));
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat(what, ": ", e.what()));
  }
}

}  // namespace

std::string RunConfigJson(const RunConfig& c) {
  return json{{"job_id", c.job_id},
              {"plan_version", c.plan_version},
              {"reference_model", c.reference_model},
              {"iterations", c.iterations},
              {"checkpoint_interval", c.checkpoint_interval},
              {"lr", c.lr},
              {"data_seed", c.data_seed},
              {"num_ranks", c.num_ranks},
              {"transport", std::string(executor::TransportKindName(c.transport))},
              {"store_address", c.store_address},
              {"prefix", c.prefix},
              {"hostname", c.hostname},
              {"timeout_s", c.timeout_s},
              {"checkpoint_dir", c.checkpoint_dir},
              {"resume_iteration", c.resume_iteration}}
      .dump();
}

absl::StatusOr<RunConfig> ParseRunConfig(const std::string& text) {
  return Parse(text, "run.json", [](const json& j) {
    RunConfig c;
    c.job_id = j.at("job_id").get<std::string>();
    c.plan_version = j.at("plan_version").get<int64_t>();
    c.reference_model = j.at("reference_model").get<std::string>();
    c.iterations = j.at("iterations").get<int>();
    c.checkpoint_interval = j.at("checkpoint_interval").get<int>();
    c.lr = j.at("lr").get<double>();
    c.data_seed = j.at("data_seed").get<uint64_t>();
    c.num_ranks = j.at("num_ranks").get<int>();
    absl::StatusOr<executor::TransportKind> kind =
        executor::ParseTransportKind(j.at("transport").get<std::string>());
    if (!kind.ok()) throw std::invalid_argument(std::string(kind.status().message()));
    c.transport = *kind;
    c.store_address = j.at("store_address").get<std::string>();
    c.prefix = j.at("prefix").get<std::string>();
    c.hostname = j.at("hostname").get<std::string>();
    c.timeout_s = j.at("timeout_s").get<double>();
    c.checkpoint_dir = j.at("checkpoint_dir").get<std::string>();
    c.resume_iteration = j.value("resume_iteration", int64_t{-1});
    return c;
  });
}

std::string IterationRecordJson(const IterationRecord& r) {
  return json{{"iteration", r.iteration}, {"has_loss", r.has_loss}, {"loss", r.loss},
              {"wall_s", r.wall_s},       {"busy_s", r.busy_s},     {"ops", OpsJson(r.ops)},
              {"layer_ops", OpsJson(r.layer_ops)}, {"checkpoint_s", r.checkpoint_s},
              {"overhead_s", r.overhead_s}}
      .dump();
}

absl::StatusOr<IterationRecord> ParseIterationRecord(const std::string& text) {
  return Parse(text, "iteration record", [](const json& j) {
    IterationRecord r;
    r.iteration = j.at("iteration").get<int>();
    r.has_loss = j.at("has_loss").get<bool>();
    r.loss = j.at("loss").get<double>();
    r.wall_s = j.at("wall_s").get<double>();
    r.busy_s = j.at("busy_s").get<double>();
    r.ops = OpsFromJson(j.at("ops"));
    if (j.contains("layer_ops")) r.layer_ops = OpsFromJson(j.at("layer_ops"));
    r.checkpoint_s = j.value("checkpoint_s", -1.0);
    r.overhead_s = j.value("overhead_s", 0.0);
    return r;
  });
}

std::string RankOutcomeJson(const RankOutcome& o) {
  return json{{"rank", o.rank},
              {"ok", o.ok},
              {"stopped", o.stopped},
              {"first_iteration", o.first_iteration},
              {"completed_iterations", o.completed_iterations},
              {"error", o.error},
              {"snapshot_iteration", o.snapshot_iteration},
              {"snapshot_layers", o.snapshot_layers},
              {"ops", OpsJson(o.ops)}}
      .dump();
}

absl::StatusOr<RankOutcome> ParseRankOutcome(const std::string& text) {
  return Parse(text, "rank outcome", [](const json& j) {
    RankOutcome o;
    o.rank = j.at("rank").get<int>();
    o.ok = j.at("ok").get<bool>();
    o.stopped = j.at("stopped").get<bool>();
    o.first_iteration = j.at("first_iteration").get<int>();
    o.completed_iterations = j.at("completed_iterations").get<int>();
    o.error = j.at("error").get<std::string>();
    o.snapshot_iteration = j.value("snapshot_iteration", -1);
    o.snapshot_layers = j.value("snapshot_layers", 0);
    o.ops = OpsFromJson(j.at("ops"));
    return o;
  });
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << contents;
    out.flush();
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

}  // namespace octopipe::agent
