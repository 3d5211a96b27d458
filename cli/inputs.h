// Resolves the CLI's --model / --cluster / --plan arguments into core types.
//
//   --model:   FILE (protobuf JSON of octopipe.proto.Model), zoo:NAME (a model-zoo builder),
//              synthetic:layers=L,f=F,b=B,w=W (unit-cost theory checks), or ref:pattern=...
//              (the executor's reference model, see executor/model_spec.h)
//   --cluster: FILE (protobuf JSON of octopipe.proto.Cluster), preset:NAME (a built-in
//              cluster), or synthetic:devices=P
// Relative paths are taken from the directory `bazel run` was started in when set
// (BUILD_WORKING_DIRECTORY), else the current directory. Errors name the flag.
#ifndef OCTOPIPE_CLI_INPUTS_H_
#define OCTOPIPE_CLI_INPUTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/command_line.h"
#include "core/cluster.h"
#include "core/model_graph.h"
#include "core/layout_plan.h"
#include "core/plan.h"
#include "proto/plan.pb.h"

namespace octopipe::cli {

std::string ResolvePath(const std::string& path);

// Declares --model and --cluster with the help text above (one wording for every command).
void AddModelClusterFlags(CommandLine& flags, std::string* model, std::string* cluster);

absl::StatusOr<ModelGraph> LoadModelArg(const std::string& spec);
absl::StatusOr<Cluster> LoadClusterArg(const std::string& spec);
// The plan file at `path` as a layout (LoadLayoutPlanFile), `predicted` its prediction block;
// errors prefixed with --plan.
absl::StatusOr<LayoutPlan> LoadLayoutPlanArg(const std::string& path,
                                             proto::LayoutPrediction* predicted);

// The run the flags ask for, against the same limits as the planner service (core/limits.h
// defaults): kResourceExhausted naming the flag and the limit. Call before any value is
// narrowed to an int and before anything is allocated for it.
// --fixed_partition "0-3,4-9,10-11" (each stage's first-last layer, in order; a single
// layer may be written "7") and --fixed_placement "0,1,0" (each stage's device) as stages;
// `placement` may be empty. kInvalidArgument naming the flag and the bad item. Whether the
// stages partition the model is checked by the tuner (ValidateConstraints).
absl::StatusOr<std::vector<StageAssignment>> ParseFixedStages(const std::string& partition,
                                                             const std::string& placement);

absl::Status CheckRunFlags(const ModelGraph& model, int64_t devices, int64_t chunks,
                           int64_t microbatches, int64_t threads);

}  // namespace octopipe::cli

#endif  // OCTOPIPE_CLI_INPUTS_H_
