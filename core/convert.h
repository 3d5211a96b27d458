// Conversion between the core types and their protobuf wire/file forms (proto/*.proto), and
// the model / cluster / plan JSON files. This is the only core library that knows protobuf:
// services, agents and the CLI use it at their edges; simulator, tuner and executor never do.
//
// Contract:
//  - *ToProto never fails and writes every field the core type has. *FromProto checks what the
//    proto cannot express (enum-like strings, index ranges) and then runs the core Validate();
//    errors are kInvalidArgument naming the field path and value ("layers[3].kind: unknown
//    layer kind 'foo' (valid: ...)").
//  - Files are protobuf JSON with the proto's snake_case field names, written pretty-printed
//    with a trailing newline. Unknown fields are rejected (a misspelt field is an error, not a
//    silent default). Load*File errors start with "file '<path>': "; a missing file is
//    kNotFound, malformed JSON kInvalidArgument with the parser's message.
//  - Proto3 leaves unset scalars at 0. For TrainingOptions, tp_degree 0 and zero_degree 0 mean
//    1 and an empty precision / recompute means bf16 / none (the documented defaults); seq_len,
//    micro_batch_size and num_microbatches must be given. LayerDims.gated is false when absent:
//    a SwiGLU MLP must say "gated": true.
//  - Enums that once travelled as text (op kinds, the objective, plan reasons) have a typed
//    wire field and a deprecated text twin. *FromProto takes the typed value when it is set
//    (not UNSPECIFIED), else parses the text; when both are set they must agree. Writers fill
//    both (older readers see the text). These functions are the one mapping between the core
//    enums and the proto enums.
//  - Plans: each device's schedule travels as ScheduleOps (`typed_ops`); the op strings ("F3.7",
//    core/schedule.h; `ops`) are the deprecated wire form and the form of plan *files*.
//    PlanToProto fills only `typed_ops` (both would double a plan's wire size, which the
//    4 MB response limit bounds); plan files carry only the readable strings (WritePlanFile,
//    PlanFileForm). PlanFromProto reads either. It checks
//    everything ValidatePlanShape checks except that the stages end at the model's last layer
//    (the model is not known here; call ValidatePlanShape with it), plus that every scheduled
//    op names an existing stage (an S or T pass of a vocab_parallel plan: a device) and
//    micro-batch; vocab_shard_columns' count and signs are checked too (their sum against the
//    model's vocabulary by PlanVocabShardColumns, core/plan.h). The proto's `predicted` block has no core
//    counterpart: PlanToProto leaves it empty for the caller to fill, PlanFromProto ignores it.
// Stateless; thread-safe.
#ifndef OCTOPIPE_CORE_CONVERT_H_
#define OCTOPIPE_CORE_CONVERT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/cluster.h"
#include "core/layout_plan.h"
#include "core/model_graph.h"
#include "core/objective.h"
#include "core/plan.h"
#include "core/replan_reason.h"
#include "core/schedule.h"
#include "core/vocab_parallel_mode.h"
#include "google/protobuf/message.h"
#include "proto/cluster.pb.h"
#include "proto/model.pb.h"
#include "proto/plan.pb.h"

namespace octopipe {

proto::Model ModelToProto(const ModelGraph& model);
absl::StatusOr<ModelGraph> ModelFromProto(const proto::Model& model);

proto::Cluster ClusterToProto(const Cluster& cluster);
absl::StatusOr<Cluster> ClusterFromProto(const proto::Cluster& cluster);

proto::Plan PlanToProto(const Plan& plan);
absl::StatusOr<Plan> PlanFromProto(const proto::Plan& plan);

// The form plan files carry: each device's schedule as op strings only (typed ops that have no
// strings are turned into them; the typed copies are dropped). Files stay readable and load
// in binaries that predate the typed ops.
void PlanFileForm(proto::Plan* plan);

// Layouts (core/layout_plan.h). LayoutPlanToProto writes every field and the derived rank map
// (`ranks`); its `predicted` is left for the caller. LayoutPlanFromProto converts each
// pipeline's plan (PlanFromProto, errors prefixed "pipelines[i].plan."), checks the layout with
// ValidateLayoutPlan (the pipelines must end at the same layer: the model is not known here)
// and a given `ranks` map against the derived one. rank_order "" means "tp-dp-pp".
proto::LayoutPlan LayoutPlanToProto(const LayoutPlan& plan);
absl::StatusOr<LayoutPlan> LayoutPlanFromProto(const proto::LayoutPlan& plan);
// The file form: each pipeline's plan as PlanFileForm.
void LayoutPlanFileForm(proto::LayoutPlan* plan);

proto::OpKind OpKindToProto(OpKind kind);
// kInvalidArgument naming `kind`: unset, or a value this binary does not know.
absl::StatusOr<OpKind> OpKindFromProto(proto::OpKind kind);

proto::PlanObjective ObjectiveToProto(Objective objective);
// Unset means the default, kSynchronous; kInvalidArgument naming `objective_kind` for a value
// this binary does not know.
absl::StatusOr<Objective> ObjectiveFromProto(proto::PlanObjective objective_kind);

proto::VocabParallelChoice VocabParallelToProto(VocabParallelMode mode);
// kInvalidArgument naming `vocab_parallel` for a value this binary does not know.
absl::StatusOr<VocabParallelMode> VocabParallelFromProto(proto::VocabParallelChoice choice);

proto::PlanReason ReplanReasonToProto(ReplanReason reason);
// kInvalidArgument naming `reason_kind`: unset, or a value this binary does not know (e.g.
// from a newer planner).
absl::StatusOr<ReplanReason> ReplanReasonFromProto(proto::PlanReason reason_kind);

// Protobuf JSON of any message (snake_case names, pretty-printed, no trailing newline), and
// the strict parse of it (kInvalidArgument with the parser's message, e.g. for an unknown
// field). `message` is cleared first.
std::string ProtoToJson(const google::protobuf::Message& message);
absl::Status ProtoFromJson(absl::string_view json, google::protobuf::Message* message);

absl::StatusOr<ModelGraph> LoadModelFile(const std::string& path);
absl::StatusOr<Cluster> LoadClusterFile(const std::string& path);
// A plan file holds a LayoutPlan; a file holding a bare Plan (written before layouts) loads as
// SinglePipelineLayout of it. LoadPlanFile is for callers that run one pipeline: it returns the
// plan of a single-pipeline layout and kInvalidArgument naming the layout otherwise.
// `predicted`, when given, gets the file's prediction block (for a bare Plan file, its plan's
// iteration and tokens/s: the one-pipeline layout's, with no gradient synchronisation).
absl::StatusOr<LayoutPlan> LoadLayoutPlanFile(const std::string& path,
                                              proto::LayoutPrediction* predicted = nullptr);
absl::StatusOr<Plan> LoadPlanFile(const std::string& path);

// Write the JSON file (replacing it). kFailedPrecondition if it cannot be written.
absl::Status WriteModelFile(const std::string& path, const ModelGraph& model);
absl::Status WriteClusterFile(const std::string& path, const Cluster& cluster);
absl::Status WritePlanFile(const std::string& path, const Plan& plan);
// The LayoutPlan form (LayoutPlanFileForm), with `predicted` when given.
absl::Status WriteLayoutPlanFile(const std::string& path, const LayoutPlan& plan,
                                 const proto::LayoutPrediction* predicted = nullptr);

}  // namespace octopipe

#endif  // OCTOPIPE_CORE_CONVERT_H_
