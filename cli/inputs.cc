#include "cli/inputs.h"

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/cluster_presets.h"
#include "core/convert.h"
#include "core/limits.h"
#include "core/status_macros.h"
#include "core/model_zoo.h"
#include "core/synthetic_model.h"
#include "executor/model_spec.h"

namespace octopipe::cli {
namespace {

absl::Status Prefixed(const std::string& flag, const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(flag, ": ", s.message()));
}

}  // namespace

std::string ResolvePath(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  const char* base = std::getenv("BUILD_WORKING_DIRECTORY");
  if (base == nullptr || *base == '\0') return path;
  return absl::StrCat(base, "/", path);
}

void AddModelClusterFlags(CommandLine& flags, std::string* model, std::string* cluster) {
  flags.String("model", model,
               "model: a model file (protobuf JSON, see examples/models/), zoo:NAME\n"
               "(llama3-8b, nemotron-h-8b, jamba-v0.1, deepseek-v3, ...),\n"
               "synthetic:layers=L,f=F,b=B,w=W (every layer costs F/B/W seconds, no memory), or\n"
               "ref:pattern=... (the executor's reference model, see executor/model_spec.h)");
  flags.String("cluster", cluster,
               "cluster: a cluster file (see examples/clusters/), preset:NAME (h100-1node,\n"
               "h100-4nodes, h100-16nodes, h200-1node, a100-1node, mixed-h100-a100), or\n"
               "synthetic:devices=P (identical devices, unlimited memory, free links)");
}

absl::StatusOr<ModelGraph> LoadModelArg(const std::string& spec) {
  absl::StatusOr<ModelGraph> model;
  if (absl::StartsWith(spec, "synthetic:")) {
    model = ParseSyntheticModel(spec.substr(10));
  } else if (absl::StartsWith(spec, "ref:")) {
    // The executor's reference model, so plans made here run with `octopipe train`.
    absl::StatusOr<executor::ModelSpec> ref = executor::ParseModelSpec(spec);
    if (ref.ok()) {
      model = executor::ToModelGraph(*ref);
    } else {
      model = ref.status();
    }
  } else if (absl::StartsWith(spec, "zoo:")) {
    // Zoo models train at sequence length 4096, micro-batch size 1, bf16, and 32 micro-batches
    // (4 x an 8-device pipeline), as the example model files do.
    TrainingOptions training;
    training.num_microbatches = 32;
    model = ZooModel(spec.substr(4), training);
  } else {
    model = LoadModelFile(ResolvePath(spec));
  }
  if (!model.ok()) return Prefixed("--model", model.status());
  if (absl::Status s = CheckModelSize(*model, SizeLimits()); !s.ok()) {
    return Prefixed("--model", s);
  }
  return model;
}

absl::StatusOr<std::vector<StageAssignment>> ParseFixedStages(const std::string& partition,
                                                             const std::string& placement) {
  std::vector<StageAssignment> stages;
  for (absl::string_view item : absl::StrSplit(partition, ',', absl::SkipEmpty())) {
    std::vector<absl::string_view> ends = absl::StrSplit(item, '-');
    StageAssignment st;
    if (ends.size() > 2 || !absl::SimpleAtoi(ends[0], &st.first_layer) ||
        !absl::SimpleAtoi(ends.back(), &st.last_layer)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--fixed_partition: expected FIRST-LAST layer ranges separated by commas, got '", item,
          "'"));
    }
    stages.push_back(st);
  }
  if (placement.empty()) return stages;
  std::vector<absl::string_view> devices = absl::StrSplit(placement, ',', absl::SkipEmpty());
  if (devices.size() != stages.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--fixed_placement: ", devices.size(), " devices for ", stages.size(),
        " stages of --fixed_partition (one device per stage)"));
  }
  for (size_t s = 0; s < devices.size(); ++s) {
    if (!absl::SimpleAtoi(devices[s], &stages[s].device)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--fixed_placement: expected a device number, got '", devices[s], "'"));
    }
  }
  return stages;
}

absl::Status CheckRunFlags(const ModelGraph& model, int64_t devices, int64_t chunks,
                           int64_t microbatches, int64_t threads) {
  RunSizeNames names;
  names.devices = "--devices";
  names.chunks = "--chunks";
  names.microbatches = "--microbatches";
  names.threads = "--threads";
  return CheckRunSize(model.num_layers(), devices, chunks, microbatches, threads, SizeLimits(),
                      names);
}

absl::StatusOr<Cluster> LoadClusterArg(const std::string& spec) {
  if (absl::StartsWith(spec, "synthetic:")) {
    const std::string rest = spec.substr(10);
    int devices = 0;
    if (!absl::StartsWith(rest, "devices=") || !absl::SimpleAtoi(rest.substr(8), &devices) ||
        devices < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--cluster: expected synthetic:devices=P with P >= 1, got '", spec, "'"));
    }
    RETURN_IF_ERROR(Prefixed("--cluster", CheckLimit("synthetic:devices", devices,
                                                     SizeLimits().max_devices, "max_devices")));
    return SyntheticCluster(devices);
  }
  absl::StatusOr<Cluster> cluster = absl::StartsWith(spec, "preset:")
                                        ? ClusterPreset(spec.substr(7))
                                        : LoadClusterFile(ResolvePath(spec));
  if (!cluster.ok()) return Prefixed("--cluster", cluster.status());
  if (absl::Status s = CheckClusterSize(*cluster, SizeLimits()); !s.ok()) {
    return Prefixed("--cluster", s);
  }
  return cluster;
}

absl::StatusOr<LayoutPlan> LoadLayoutPlanArg(const std::string& path,
                                             proto::LayoutPrediction* predicted) {
  absl::StatusOr<LayoutPlan> plan = LoadLayoutPlanFile(ResolvePath(path), predicted);
  if (!plan.ok()) return Prefixed("--plan", plan.status());
  return plan;
}

}  // namespace octopipe::cli
