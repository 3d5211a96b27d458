#include "core/convert.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/file_io.h"
#include "core/limits.h"
#include "core/schedule.h"
#include "core/status_macros.h"
#include "google/protobuf/generated_enum_reflection.h"
#include "google/protobuf/util/json_util.h"

namespace octopipe {
namespace {

absl::Status AtPath(absl::string_view path, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
}

absl::Status InFile(const std::string& path, const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat("file '", path, "': ", s.message()));
}

// ---- model ----

proto::LayerDims DimsToProto(const LayerDims& d) {
  proto::LayerDims p;
  p.set_hidden(d.hidden);
  p.set_ffn(d.ffn);
  p.set_gated(d.gated);
  p.set_heads(d.heads);
  p.set_kv_heads(d.kv_heads);
  p.set_head_dim(d.head_dim);
  p.set_vocab(d.vocab);
  p.set_experts(d.experts);
  p.set_top_k(d.top_k);
  p.set_moe_ffn(d.moe_ffn);
  p.set_shared_experts(d.shared_experts);
  p.set_d_state(d.d_state);
  p.set_expand(d.expand);
  p.set_ssm_heads(d.ssm_heads);
  p.set_ssm_groups(d.ssm_groups);
  p.set_dt_rank(d.dt_rank);
  p.set_q_lora_rank(d.q_lora_rank);
  p.set_kv_lora_rank(d.kv_lora_rank);
  p.set_qk_nope_head_dim(d.qk_nope_head_dim);
  p.set_qk_rope_head_dim(d.qk_rope_head_dim);
  p.set_v_head_dim(d.v_head_dim);
  p.set_tokens(d.tokens);
  p.set_out_hidden(d.out_hidden);
  p.set_max_nodes_per_token(d.max_nodes_per_token);
  return p;
}

LayerDims DimsFromProto(const proto::LayerDims& p) {
  LayerDims d;
  d.hidden = p.hidden();
  d.ffn = p.ffn();
  d.gated = p.gated();
  d.heads = p.heads();
  d.kv_heads = p.kv_heads();
  d.head_dim = p.head_dim();
  d.vocab = p.vocab();
  d.experts = p.experts();
  d.top_k = p.top_k();
  d.moe_ffn = p.moe_ffn();
  d.shared_experts = p.shared_experts();
  d.d_state = p.d_state();
  d.expand = p.expand();
  d.ssm_heads = p.ssm_heads();
  d.ssm_groups = p.ssm_groups();
  d.dt_rank = p.dt_rank();
  d.q_lora_rank = p.q_lora_rank();
  d.kv_lora_rank = p.kv_lora_rank();
  d.qk_nope_head_dim = p.qk_nope_head_dim();
  d.qk_rope_head_dim = p.qk_rope_head_dim();
  d.v_head_dim = p.v_head_dim();
  d.tokens = p.tokens();
  d.out_hidden = p.out_hidden();
  d.max_nodes_per_token = p.max_nodes_per_token();
  return d;
}

proto::MeasuredCosts MeasuredToProto(const MeasuredCosts& m) {
  proto::MeasuredCosts p;
  if (m.forward_s) p.set_forward_s(*m.forward_s);
  if (m.backward_input_s) p.set_backward_input_s(*m.backward_input_s);
  if (m.weight_grad_s) p.set_weight_grad_s(*m.weight_grad_s);
  if (m.activation_bytes) p.set_activation_bytes(*m.activation_bytes);
  if (m.param_bytes) p.set_param_bytes(*m.param_bytes);
  if (m.output_bytes) p.set_output_bytes(*m.output_bytes);
  if (m.recompute_s) p.set_recompute_s(*m.recompute_s);
  if (m.activation_bytes_w) p.set_activation_bytes_w(*m.activation_bytes_w);
  if (m.input_bytes) p.set_input_bytes(*m.input_bytes);
  if (m.tp_degree != 1) p.set_tp_degree(m.tp_degree);
  for (const MeasuredSharded& a : m.sharded) {
    proto::MeasuredSharded* pa = p.add_sharded();
    pa->set_tp_degree(a.tp_degree);
    if (a.ep_degree != 1) pa->set_ep_degree(a.ep_degree);
    pa->set_forward_s(a.forward_s);
    pa->set_backward_input_s(a.backward_input_s);
    pa->set_weight_grad_s(a.weight_grad_s);
    pa->set_recompute_s(a.recompute_s);
    if (a.activation_bytes != 0) pa->set_activation_bytes(a.activation_bytes);
    if (a.activation_bytes_w != 0) pa->set_activation_bytes_w(a.activation_bytes_w);
    if (a.param_bytes != 0) pa->set_param_bytes(a.param_bytes);
  }
  return p;
}

MeasuredCosts MeasuredFromProto(const proto::MeasuredCosts& p) {
  MeasuredCosts m;
  if (p.has_forward_s()) m.forward_s = p.forward_s();
  if (p.has_backward_input_s()) m.backward_input_s = p.backward_input_s();
  if (p.has_weight_grad_s()) m.weight_grad_s = p.weight_grad_s();
  if (p.has_activation_bytes()) m.activation_bytes = p.activation_bytes();
  if (p.has_param_bytes()) m.param_bytes = p.param_bytes();
  if (p.has_output_bytes()) m.output_bytes = p.output_bytes();
  if (p.has_recompute_s()) m.recompute_s = p.recompute_s();
  if (p.has_activation_bytes_w()) m.activation_bytes_w = p.activation_bytes_w();
  if (p.has_input_bytes()) m.input_bytes = p.input_bytes();
  if (p.has_tp_degree()) m.tp_degree = p.tp_degree();
  for (const proto::MeasuredSharded& pa : p.sharded()) {
    m.sharded.push_back(MeasuredSharded{pa.tp_degree() == 0 ? 1 : pa.tp_degree(),
                                        pa.ep_degree() == 0 ? 1 : pa.ep_degree(),
                                        pa.forward_s(), pa.backward_input_s(),
                                        pa.weight_grad_s(), pa.recompute_s(),
                                        pa.activation_bytes(), pa.activation_bytes_w(),
                                        pa.param_bytes()});
  }
  return m;
}

// ---- enums: the one mapping between core and proto enums ----

constexpr std::pair<OpKind, proto::OpKind> kOpKinds[] = {
    {OpKind::kF, proto::OP_KIND_F},   {OpKind::kB, proto::OP_KIND_B},
    {OpKind::kW, proto::OP_KIND_W},   {OpKind::kBW, proto::OP_KIND_BW},
    {OpKind::kR, proto::OP_KIND_R},   {OpKind::kS, proto::OP_KIND_S},
    {OpKind::kT, proto::OP_KIND_T}};

constexpr std::pair<Objective, proto::PlanObjective> kObjectives[] = {
    {Objective::kSynchronous, proto::PLAN_OBJECTIVE_SYNCHRONOUS},
    {Objective::kSteadyState, proto::PLAN_OBJECTIVE_STEADY_STATE}};

constexpr std::pair<ReplanReason, proto::PlanReason> kReplanReasons[] = {
    {ReplanReason::kInitial, proto::PLAN_REASON_INITIAL},
    {ReplanReason::kMeasured, proto::PLAN_REASON_MEASURED},
    {ReplanReason::kNodeFailure, proto::PLAN_REASON_NODE_FAILURE},
    {ReplanReason::kDrain, proto::PLAN_REASON_DRAIN},
    {ReplanReason::kNodeJoin, proto::PLAN_REASON_NODE_JOIN}};

template <typename Core, typename Proto, size_t N>
Proto ToProtoEnum(const std::pair<Core, Proto> (&table)[N], Core value) {
  for (const auto& [core, wire] : table) {
    if (core == value) return wire;
  }
  return Proto{};  // unreachable for a valid core value
}

template <typename Proto>
std::string ProtoEnumName(Proto value) {
  const google::protobuf::EnumValueDescriptor* v =
      google::protobuf::GetEnumDescriptor<Proto>()->FindValueByNumber(value);
  return v != nullptr ? v->name() : absl::StrCat(static_cast<int>(value));
}

// The core value of a wire enum; nullopt when unset (0), kInvalidArgument naming `field` for
// a value this binary does not know (e.g. from a newer sender).
template <typename Core, typename Proto, size_t N>
absl::StatusOr<std::optional<Core>> FromProtoEnum(const std::pair<Core, Proto> (&table)[N],
                                                  Proto typed, absl::string_view field) {
  if (typed == Proto{}) return std::optional<Core>();
  for (const auto& [core, wire] : table) {
    if (wire == typed) return std::optional<Core>(core);
  }
  return absl::InvalidArgumentError(absl::StrCat(field, ": unknown value ", ProtoEnumName(typed)));
}

// ---- plan ----

absl::Status CheckOp(const std::string& path, const Op& op, const Plan& plan) {
  if (IsVocabPass(op.kind)) {
    if (!plan.vocab_parallel) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": vocabulary pass ", OpToString(op), " in a plan without vocab_parallel"));
    }
    if (op.stage >= plan.num_devices) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": vocabulary shard ", op.stage,
                                                     " out of range [0, ", plan.num_devices,
                                                     ")"));
    }
  } else if (op.stage >= plan.num_stages()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": stage ", op.stage,
                                                   " out of range [0, ", plan.num_stages(),
                                                   ")"));
  }
  if (op.microbatch >= plan.num_microbatches) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": micro-batch ", op.microbatch,
                                                   " out of range [0, ", plan.num_microbatches,
                                                   ")"));
  }
  return absl::OkStatus();
}

proto::ScheduleOp ScheduleOpToProto(const Op& op) {
  proto::ScheduleOp p;
  p.set_kind(ToProtoEnum(kOpKinds, op.kind));
  p.set_stage(op.stage);
  p.set_microbatch(op.microbatch);
  return p;
}

absl::StatusOr<Op> ScheduleOpFromProto(const proto::ScheduleOp& p) {
  ASSIGN_OR_RETURN(std::optional<OpKind> kind, FromProtoEnum(kOpKinds, p.kind(), "kind"));
  if (!kind) return absl::InvalidArgumentError("kind: required");
  if (p.stage() < 0 || p.microbatch() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("stage ", p.stage(), " and micro-batch ",
                                                   p.microbatch(), " must be >= 0"));
  }
  return Op{*kind, p.stage(), p.microbatch()};
}

// One device's ops: from `typed_ops` when present (and then `ops`, if also present, must say
// the same), else from the op strings. Each op is checked against the plan's stages and
// micro-batches.
absl::StatusOr<std::vector<Op>> DeviceOpsFromProto(const std::string& path,
                                                   const proto::DeviceSchedule& pd,
                                                   const Plan& plan) {
  const bool typed = pd.typed_ops_size() > 0;
  if (typed && pd.ops_size() > 0 && pd.ops_size() != pd.typed_ops_size()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", pd.typed_ops_size(),
                                                   " typed_ops but ", pd.ops_size(),
                                                   " ops; they must agree"));
  }
  const int n = typed ? pd.typed_ops_size() : pd.ops_size();
  std::vector<Op> ops;
  ops.reserve(n);
  for (int j = 0; j < n; ++j) {
    const std::string op_path = absl::StrCat(path, typed ? ".typed_ops[" : ".ops[", j, "]");
    absl::StatusOr<Op> op = typed ? ScheduleOpFromProto(pd.typed_ops(j)) : ParseOp(pd.ops(j));
    if (!op.ok()) return AtPath(op_path, op.status());
    if (typed && pd.ops_size() > 0 && pd.ops(j) != OpToString(*op)) {
      return absl::InvalidArgumentError(absl::StrCat(op_path, " ", OpToString(*op), " and ",
                                                     path, ".ops[", j, "] '", pd.ops(j),
                                                     "' disagree"));
    }
    RETURN_IF_ERROR(CheckOp(op_path, *op, plan));
    ops.push_back(*op);
  }
  return ops;
}

}  // namespace

proto::Model ModelToProto(const ModelGraph& model) {
  proto::Model p;
  p.set_name(model.name);
  p.set_source(model.source);
  p.set_host_probe_s(model.host_probe_s);
  for (const Layer& l : model.layers) {
    proto::Layer* pl = p.add_layers();
    pl->set_name(l.name);
    pl->set_kind(std::string(LayerKindName(l.kind)));
    *pl->mutable_dims() = DimsToProto(l.dims);
    const MeasuredCosts& m = l.measured;
    if (m.forward_s || m.backward_input_s || m.weight_grad_s || m.activation_bytes ||
        m.param_bytes || m.output_bytes || m.recompute_s || m.activation_bytes_w ||
        m.input_bytes || !m.sharded.empty()) {
      *pl->mutable_measured() = MeasuredToProto(m);
    }
  }
  proto::TrainingOptions* t = p.mutable_training();
  t->set_seq_len(model.training.seq_len);
  t->set_micro_batch_size(model.training.micro_batch_size);
  t->set_num_microbatches(model.training.num_microbatches);
  t->set_precision(std::string(PrecisionName(model.training.precision)));
  t->set_tp_degree(model.training.tp_degree);
  t->set_recompute(std::string(RecomputePolicyName(model.training.recompute)));
  t->set_zero_degree(model.training.zero_degree);
  // Written only when used, so files without expert parallelism stay as they were.
  if (model.training.ep_degree != 1) t->set_ep_degree(model.training.ep_degree);
  if (model.training.ep_comm_overlap) t->set_ep_comm_overlap(true);
  if (model.training.ep_comm_sms != kDefaultEpCommSms) {
    t->set_ep_comm_sms(static_cast<int32_t>(model.training.ep_comm_sms));
  }
  if (model.training.attention_kernel != AttentionKernel::kFlash) {
    t->set_attention_kernel(std::string(AttentionKernelName(model.training.attention_kernel)));
  }
  if (model.training.ep_ranks_per_node != 0) {
    t->set_ep_ranks_per_node(model.training.ep_ranks_per_node);
  }
  if (model.training.moe_dispatcher != MoeDispatcher::kAllToAll) {
    t->set_moe_dispatcher(std::string(MoeDispatcherName(model.training.moe_dispatcher)));
  }
  if (model.training.recompute == RecomputePolicy::kSelective &&
      !(model.training.recompute_modules == RecomputeModules{})) {
    for (const std::string& name : RecomputeModuleNames(model.training.recompute_modules)) {
      t->add_recompute_modules(name);
    }
  }
  return p;
}

absl::StatusOr<ModelGraph> ModelFromProto(const proto::Model& p) {
  ModelGraph m;
  m.name = p.name();
  m.source = p.source();
  m.host_probe_s = p.host_probe_s();
  m.layers.reserve(p.layers_size());
  for (int i = 0; i < p.layers_size(); ++i) {
    const proto::Layer& pl = p.layers(i);
    Layer l;
    l.name = pl.name();
    absl::StatusOr<LayerKind> kind = ParseLayerKind(pl.kind());
    if (!kind.ok()) return AtPath(absl::StrCat("layers[", i, "].kind"), kind.status());
    l.kind = *kind;
    l.dims = DimsFromProto(pl.dims());
    l.measured = MeasuredFromProto(pl.measured());
    m.layers.push_back(std::move(l));
  }
  const proto::TrainingOptions& t = p.training();
  m.training.seq_len = t.seq_len();
  m.training.micro_batch_size = t.micro_batch_size();
  m.training.num_microbatches = t.num_microbatches();
  absl::StatusOr<Precision> precision = ParsePrecision(t.precision());
  if (!precision.ok()) return AtPath("training.precision", precision.status());
  m.training.precision = *precision;
  m.training.tp_degree = t.tp_degree() == 0 ? 1 : t.tp_degree();
  absl::StatusOr<RecomputePolicy> recompute = ParseRecomputePolicy(t.recompute());
  if (!recompute.ok()) return AtPath("training.recompute", recompute.status());
  m.training.recompute = *recompute;
  m.training.zero_degree = t.zero_degree() == 0 ? 1 : t.zero_degree();
  m.training.ep_degree = t.ep_degree() == 0 ? 1 : t.ep_degree();
  m.training.ep_ranks_per_node = t.ep_ranks_per_node();
  m.training.ep_comm_overlap = t.ep_comm_overlap();
  if (t.has_ep_comm_sms()) m.training.ep_comm_sms = t.ep_comm_sms();
  absl::StatusOr<AttentionKernel> kernel = ParseAttentionKernel(t.attention_kernel());
  if (!kernel.ok()) return AtPath("training.attention_kernel", kernel.status());
  m.training.attention_kernel = *kernel;
  absl::StatusOr<MoeDispatcher> dispatcher = ParseMoeDispatcher(t.moe_dispatcher());
  if (!dispatcher.ok()) return AtPath("training.moe_dispatcher", dispatcher.status());
  m.training.moe_dispatcher = *dispatcher;
  if (t.recompute_modules_size() > 0) {
    if (m.training.recompute != RecomputePolicy::kSelective) {
      return absl::InvalidArgumentError(absl::StrCat(
          "training.recompute_modules: names what selective recompute recomputes, but "
          "training.recompute is '", RecomputePolicyName(m.training.recompute),
          "' (set it to \"selective\")"));
    }
    absl::StatusOr<RecomputeModules> modules = ParseRecomputeModules(
        std::vector<std::string>(t.recompute_modules().begin(), t.recompute_modules().end()));
    if (!modules.ok()) return AtPath("training.recompute_modules", modules.status());
    m.training.recompute_modules = *modules;
  }
  RETURN_IF_ERROR(Validate(m));
  return m;
}

namespace {

proto::Link LinkToProto(const LinkSpec& link) {
  proto::Link p;
  p.set_bandwidth(link.bandwidth);
  p.set_latency_s(link.latency_s);
  p.set_allreduce_bandwidth(link.allreduce_bandwidth);
  p.set_allreduce_latency_s(link.allreduce_latency_s);
  p.set_allreduce_overlapped_bandwidth(link.allreduce_overlapped_bandwidth);
  p.set_allreduce_overlapped_latency_s(link.allreduce_overlapped_latency_s);
  return p;
}

LinkSpec LinkFromProto(const proto::Link& p) {
  return LinkSpec{p.bandwidth(),
                  p.latency_s(),
                  p.allreduce_bandwidth(),
                  p.allreduce_latency_s(),
                  p.allreduce_overlapped_bandwidth(),
                  p.allreduce_overlapped_latency_s()};
}

}  // namespace

proto::Cluster ClusterToProto(const Cluster& cluster) {
  proto::Cluster p;
  p.set_name(cluster.name);
  for (const HardwareSpec& h : cluster.hardware) {
    proto::HardwareSpec* ph = p.add_hardware();
    ph->set_name(h.name);
    ph->set_peak_flops(h.peak_flops);
    ph->set_memory_bytes(h.memory_bytes);
    ph->set_memory_bandwidth(h.memory_bandwidth);
    ph->set_op_overhead_s(h.op_overhead_s);
    ph->set_message_cpu_s(h.message_cpu_s);
    ph->set_peak_flops_fp8(h.peak_flops_fp8);
    ph->set_sm_count(h.sm_count);
  }
  for (const Node& n : cluster.nodes) {
    proto::Node* pn = p.add_nodes();
    pn->set_name(n.name);
    pn->set_hardware(n.hardware);
    pn->set_num_devices(n.num_devices);
    *pn->mutable_intra_node_link() = LinkToProto(n.intra_node_link);
  }
  *p.mutable_inter_node_link() = LinkToProto(cluster.inter_node_link);
  p.set_memory_reserve_bytes(cluster.memory_reserve_bytes);
  p.set_executor_ranks(cluster.executor_ranks);
  return p;
}

absl::StatusOr<Cluster> ClusterFromProto(const proto::Cluster& p) {
  Cluster c;
  c.name = p.name();
  for (const proto::HardwareSpec& ph : p.hardware()) {
    c.hardware.push_back(
        HardwareSpec{ph.name(), ph.peak_flops(), ph.memory_bytes(), ph.memory_bandwidth(),
                     ph.op_overhead_s(), ph.message_cpu_s(), ph.peak_flops_fp8(),
                     ph.sm_count()});
  }
  for (const proto::Node& pn : p.nodes()) {
    Node n;
    n.name = pn.name();
    n.hardware = pn.hardware();
    n.num_devices = pn.num_devices();
    n.intra_node_link = LinkFromProto(pn.intra_node_link());
    c.nodes.push_back(std::move(n));
  }
  c.inter_node_link = LinkFromProto(p.inter_node_link());
  c.memory_reserve_bytes = p.memory_reserve_bytes();
  c.executor_ranks = p.executor_ranks();
  RETURN_IF_ERROR(Validate(c));
  return c;
}

proto::Plan PlanToProto(const Plan& plan) {
  proto::Plan p;
  p.set_version(plan.version);
  p.set_cost_model_generation(plan.cost_model_generation);
  p.set_schedule_name(plan.schedule_name);
  p.set_num_devices(plan.num_devices);
  p.set_num_microbatches(plan.num_microbatches);
  p.set_vocab_parallel(plan.vocab_parallel);
  p.mutable_vocab_shard_columns()->Add(plan.vocab_shard_columns.begin(),
                                       plan.vocab_shard_columns.end());
  for (const StageAssignment& s : plan.stages) {
    proto::StageSpec* ps = p.add_stages();
    ps->set_first_layer(s.first_layer);
    ps->set_last_layer(s.last_layer);
    ps->set_device(s.device);
    ps->set_recompute(s.recompute);
  }
  for (int d = 0; d < plan.schedule.num_devices(); ++d) {
    proto::DeviceSchedule* pd = p.add_schedule();
    pd->set_device(d);
    pd->mutable_typed_ops()->Reserve(static_cast<int>(plan.schedule.ops[d].size()));
    for (const Op& op : plan.schedule.ops[d]) *pd->add_typed_ops() = ScheduleOpToProto(op);
  }
  return p;
}

absl::StatusOr<Plan> PlanFromProto(const proto::Plan& p) {
  Plan plan;
  plan.version = p.version();
  plan.cost_model_generation = p.cost_model_generation();
  plan.schedule_name = p.schedule_name();
  plan.num_devices = p.num_devices();
  plan.num_microbatches = p.num_microbatches();
  plan.vocab_parallel = p.vocab_parallel();
  plan.vocab_shard_columns.assign(p.vocab_shard_columns().begin(),
                                  p.vocab_shard_columns().end());
  for (const proto::StageSpec& ps : p.stages()) {
    plan.stages.push_back(
        StageAssignment{ps.first_layer(), ps.last_layer(), ps.device(), ps.recompute()});
  }
  // The model is unknown here: check the shape against the layer count the stages imply.
  const int implied_layers = plan.stages.empty() ? 0 : plan.stages.back().last_layer + 1;
  RETURN_IF_ERROR(ValidatePlanShape(plan, implied_layers));

  plan.schedule.ops.assign(plan.num_devices, {});
  std::vector<bool> seen(plan.num_devices, false);
  for (int i = 0; i < p.schedule_size(); ++i) {
    const proto::DeviceSchedule& pd = p.schedule(i);
    const std::string path = absl::StrCat("schedule[", i, "]");
    if (pd.device() < 0 || pd.device() >= plan.num_devices) {
      return absl::InvalidArgumentError(absl::StrCat(path, ".device must be in [0, ",
                                                     plan.num_devices - 1, "], got ",
                                                     pd.device()));
    }
    if (seen[pd.device()]) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ".device ", pd.device(), " has a second schedule entry"));
    }
    seen[pd.device()] = true;
    ASSIGN_OR_RETURN(plan.schedule.ops[pd.device()], DeviceOpsFromProto(path, pd, plan));
  }
  return plan;
}

void PlanFileForm(proto::Plan* plan) {
  for (proto::DeviceSchedule& pd : *plan->mutable_schedule()) {
    if (pd.ops_size() == 0) {
      for (const proto::ScheduleOp& op : pd.typed_ops()) {
        absl::StatusOr<Op> core = ScheduleOpFromProto(op);
        // An op this binary cannot read keeps its numbers, so the file shows what was sent
        // (and fails to load with a message naming it).
        pd.add_ops(core.ok() ? OpToString(*core)
                             : absl::StrCat("?", op.stage(), ".", op.microbatch()));
      }
    }
    pd.clear_typed_ops();
  }
}

proto::LayoutPlan LayoutPlanToProto(const LayoutPlan& plan) {
  proto::LayoutPlan out;
  proto::ParallelLayoutSpec* l = out.mutable_layout();
  l->set_pp(plan.layout.pp);
  l->set_tp(plan.layout.tp);
  l->set_ep(plan.layout.ep);
  l->set_dp(plan.layout.dp);
  l->set_rank_order(plan.layout.RankOrder());
  out.set_num_ranks(plan.num_ranks);
  out.set_global_microbatches(plan.global_microbatches);
  for (const LayoutPipelinePlan& pipe : plan.pipelines) {
    proto::LayoutPipelinePlan* p = out.add_pipelines();
    *p->mutable_plan() = PlanToProto(pipe.plan);
    for (const PipelineReplica& r : pipe.replicas) {
      proto::PipelineReplica* pr = p->add_replicas();
      pr->set_dp_rank(r.dp_rank);
      pr->set_first_microbatch(r.first_microbatch);
      for (int rank : r.device_ranks) pr->add_device_ranks(rank);
    }
  }
  // The rank map of a valid layout (the model's layer count is pipeline 0's).
  const int layers = plan.pipelines.empty() || plan.pipelines[0].plan.stages.empty()
                         ? 0
                         : plan.pipelines[0].plan.stages.back().last_layer + 1;
  if (ValidateLayoutPlan(plan, layers).ok()) {
    const std::vector<RankRole> roles = RankRoles(plan);
    for (size_t i = 0; i < roles.size(); ++i) {
      proto::RankRole* r = out.add_ranks();
      r->set_rank(static_cast<int32_t>(i));
      r->set_pipeline(roles[i].pipeline);
      r->set_replica(roles[i].replica);
      r->set_dp_rank(roles[i].dp_rank);
      r->set_device(roles[i].device);
      r->set_tp_rank(roles[i].tp_rank);
      r->set_ep_rank(roles[i].ep_rank);
    }
  }
  out.set_version(plan.pipelines.empty() ? 0 : plan.pipelines[0].plan.version);
  return out;
}

absl::StatusOr<LayoutPlan> LayoutPlanFromProto(const proto::LayoutPlan& p) {
  LayoutPlan plan;
  const proto::ParallelLayoutSpec& l = p.layout();
  plan.layout.pp = l.pp();
  plan.layout.tp = l.tp() == 0 ? 1 : l.tp();
  plan.layout.ep = l.ep() == 0 ? 1 : l.ep();
  plan.layout.dp = l.dp();
  if (l.rank_order().empty() || l.rank_order() == "tp-dp-pp") {
    plan.layout.pp_outer = true;
  } else if (l.rank_order() == "tp-pp-dp") {
    plan.layout.pp_outer = false;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "layout.rank_order: '", l.rank_order(), "' (valid: tp-dp-pp, tp-pp-dp)"));
  }
  plan.num_ranks = p.num_ranks();
  plan.global_microbatches = p.global_microbatches();
  int num_layers = -1;
  for (int i = 0; i < p.pipelines_size(); ++i) {
    const proto::LayoutPipelinePlan& pp = p.pipelines(i);
    absl::StatusOr<Plan> core = PlanFromProto(pp.plan());
    if (!core.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("pipelines[", i, "].plan.", core.status().message()));
    }
    const int layers = core->stages.empty() ? 0 : core->stages.back().last_layer + 1;
    if (num_layers >= 0 && layers != num_layers) {
      return absl::InvalidArgumentError(absl::StrCat("pipelines[", i, "].plan.stages: end at layer ",
                                                     layers - 1, ", pipeline 0's at ",
                                                     num_layers - 1));
    }
    num_layers = layers;
    LayoutPipelinePlan pipe;
    pipe.plan = std::move(*core);
    for (const proto::PipelineReplica& r : pp.replicas()) {
      PipelineReplica rep;
      rep.dp_rank = r.dp_rank();
      rep.first_microbatch = r.first_microbatch();
      rep.device_ranks.assign(r.device_ranks().begin(), r.device_ranks().end());
      pipe.replicas.push_back(std::move(rep));
    }
    plan.pipelines.push_back(std::move(pipe));
  }
  RETURN_IF_ERROR(ValidateLayoutPlan(plan, std::max(0, num_layers)));
  if (p.ranks_size() > 0) {
    const std::vector<RankRole> roles = RankRoles(plan);
    if (p.ranks_size() != static_cast<int>(roles.size())) {
      return absl::InvalidArgumentError(absl::StrCat("ranks: ", p.ranks_size(),
                                                     " entries for ", roles.size(), " ranks"));
    }
    for (int i = 0; i < p.ranks_size(); ++i) {
      const proto::RankRole& r = p.ranks(i);
      const RankRole& d = roles[i];
      if (r.rank() != i || r.pipeline() != d.pipeline || r.replica() != d.replica ||
          r.dp_rank() != d.dp_rank || r.device() != d.device || r.tp_rank() != d.tp_rank ||
          r.ep_rank() != d.ep_rank) {
        return absl::InvalidArgumentError(absl::StrCat(
            "ranks[", i, "]: disagrees with the replicas' device_ranks (rank ", i,
            " is pipeline ", d.pipeline, " replica ", d.replica, " device ", d.device,
            " tp_rank ", d.tp_rank, " ep_rank ", d.ep_rank, ")"));
      }
    }
  }
  return plan;
}

void LayoutPlanFileForm(proto::LayoutPlan* plan) {
  for (proto::LayoutPipelinePlan& p : *plan->mutable_pipelines()) PlanFileForm(p.mutable_plan());
}

proto::OpKind OpKindToProto(OpKind kind) { return ToProtoEnum(kOpKinds, kind); }

absl::StatusOr<OpKind> OpKindFromProto(proto::OpKind kind) {
  ASSIGN_OR_RETURN(std::optional<OpKind> k, FromProtoEnum(kOpKinds, kind, "kind"));
  if (!k) return absl::InvalidArgumentError("kind: required");
  return *k;
}

proto::PlanObjective ObjectiveToProto(Objective objective) {
  return ToProtoEnum(kObjectives, objective);
}

absl::StatusOr<Objective> ObjectiveFromProto(proto::PlanObjective objective_kind) {
  ASSIGN_OR_RETURN(std::optional<Objective> o,
                   FromProtoEnum(kObjectives, objective_kind, "objective_kind"));
  return o.value_or(Objective::kSynchronous);
}

proto::VocabParallelChoice VocabParallelToProto(VocabParallelMode mode) {
  switch (mode) {
    case VocabParallelMode::kOn: return proto::VOCAB_PARALLEL_ON;
    case VocabParallelMode::kOff: return proto::VOCAB_PARALLEL_OFF;
    default: return proto::VOCAB_PARALLEL_AUTO;
  }
}

absl::StatusOr<VocabParallelMode> VocabParallelFromProto(proto::VocabParallelChoice choice) {
  switch (choice) {
    case proto::VOCAB_PARALLEL_AUTO: return VocabParallelMode::kAuto;
    case proto::VOCAB_PARALLEL_ON: return VocabParallelMode::kOn;
    case proto::VOCAB_PARALLEL_OFF: return VocabParallelMode::kOff;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("vocab_parallel: unknown value ", static_cast<int>(choice)));
  }
}

proto::PlanReason ReplanReasonToProto(ReplanReason reason) {
  return ToProtoEnum(kReplanReasons, reason);
}

absl::StatusOr<ReplanReason> ReplanReasonFromProto(proto::PlanReason reason_kind) {
  ASSIGN_OR_RETURN(std::optional<ReplanReason> r,
                   FromProtoEnum(kReplanReasons, reason_kind, "reason_kind"));
  if (!r) return absl::InvalidArgumentError("reason_kind: required");
  return *r;
}

std::string ProtoToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  std::string out;
  // Printing a valid message with the generated pool cannot fail.
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

absl::Status ProtoFromJson(absl::string_view json, google::protobuf::Message* message) {
  message->Clear();
  // Strict JSON first (RFC 8259): protobuf's parser lets some mistakes through (a trailing
  // comma) or reports them far from where they are; say where the text breaks.
  try {
    (void)nlohmann::json::parse(json.begin(), json.end());
  } catch (const nlohmann::json::out_of_range& e) {  // e.g. 1e400: not a double
    return absl::InvalidArgumentError(absl::StrCat("invalid JSON for ",
                                                   message->GetDescriptor()->full_name(), ": ",
                                                   e.what()));
  } catch (const nlohmann::json::parse_error& e) {
    const size_t at = std::min(e.byte > 0 ? e.byte - 1 : 0, json.size());
    const absl::string_view before = json.substr(0, at);
    const size_t line = 1 + std::count(before.begin(), before.end(), '\n');
    const size_t last_newline = before.rfind('\n');
    const size_t column = at - (last_newline == absl::string_view::npos ? 0 : last_newline + 1) + 1;
    std::string what = e.what();
    if (const size_t colon = what.find("syntax error"); colon != std::string::npos) {
      what = what.substr(colon);
    }
    return absl::InvalidArgumentError(absl::StrCat("invalid JSON for ",
                                                   message->GetDescriptor()->full_name(),
                                                   " at line ", line, ", column ", column, ": ",
                                                   what));
  }
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), message, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("invalid JSON for ",
                                                   message->GetDescriptor()->full_name(), ": ",
                                                   std::string(status.message())));
  }
  return absl::OkStatus();
}

namespace {

// A file's text, refusing what is not a regular file of bounded size (/dev/zero or a FIFO
// would be read forever). Errors name the path.
absl::StatusOr<std::string> ReadBoundedFile(const std::string& path) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (!ec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st) &&
      !std::filesystem::is_directory(st)) {
    return absl::InvalidArgumentError(
        absl::StrCat("file '", path, "': not a regular file (a device, FIFO or socket)"));
  }
  if (!ec && std::filesystem::is_regular_file(st)) {
    const uintmax_t size = std::filesystem::file_size(path, ec);
    if (!ec) {
      RETURN_IF_ERROR(InFile(path, CheckLimit("size in bytes", static_cast<int64_t>(size),
                                              SizeLimits().max_file_bytes, "max_file_bytes")));
    }
  }
  return ReadFileToString(path);  // already names the path
}

template <typename ProtoT, typename CoreT>
absl::StatusOr<CoreT> LoadFile(const std::string& path,
                               absl::StatusOr<CoreT> (*from_proto)(const ProtoT&)) {
  ASSIGN_OR_RETURN(std::string text, ReadBoundedFile(path));
  ProtoT p;
  absl::Status s = ProtoFromJson(text, &p);
  if (!s.ok()) return InFile(path, s);
  absl::StatusOr<CoreT> value = from_proto(p);
  if (!value.ok()) return InFile(path, value.status());
  return value;
}

absl::Status WriteJson(const std::string& path, const google::protobuf::Message& message) {
  return WriteStringToFile(path, ProtoToJson(message) + "\n");
}

}  // namespace

absl::StatusOr<ModelGraph> LoadModelFile(const std::string& path) {
  return LoadFile<proto::Model, ModelGraph>(path, &ModelFromProto);
}

absl::StatusOr<Cluster> LoadClusterFile(const std::string& path) {
  return LoadFile<proto::Cluster, Cluster>(path, &ClusterFromProto);
}

absl::StatusOr<LayoutPlan> LoadLayoutPlanFile(const std::string& path,
                                              proto::LayoutPrediction* predicted) {
  ASSIGN_OR_RETURN(std::string text, ReadBoundedFile(path));
  proto::LayoutPlan layout;
  absl::Status as_layout = ProtoFromJson(text, &layout);
  if (predicted != nullptr) predicted->Clear();
  if (as_layout.ok() && layout.pipelines_size() > 0) {
    if (predicted != nullptr) *predicted = layout.predicted();
    absl::StatusOr<LayoutPlan> plan = LayoutPlanFromProto(layout);
    if (!plan.ok()) return InFile(path, plan.status());
    return plan;
  }
  proto::Plan single;
  absl::Status as_plan = ProtoFromJson(text, &single);
  if (!as_plan.ok()) {
    // Report the form the file was meant to be in.
    return InFile(path, absl::StrContains(text, "\"pipelines\"") ? as_layout : as_plan);
  }
  absl::StatusOr<Plan> plan = PlanFromProto(single);
  if (!plan.ok()) return InFile(path, plan.status());
  // The plan's own prediction is the one-pipeline layout's (no gradient synchronisation).
  if (predicted != nullptr) {
    predicted->set_iteration_time_s(single.predicted().iteration_time_s());
    predicted->set_pipeline_time_s(single.predicted().iteration_time_s());
    predicted->set_tokens_per_s(single.predicted().tokens_per_s());
  }
  return SinglePipelineLayout(*plan);
}

absl::StatusOr<Plan> LoadPlanFile(const std::string& path) {
  ASSIGN_OR_RETURN(LayoutPlan layout, LoadLayoutPlanFile(path));
  if (!layout.single_pipeline()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "file '", path, "': holds a layout (", layout.layout.ToString(), ", ",
        layout.pipelines.size(), " distinct pipelines, ", layout.num_ranks,
        " ranks), not one pipeline"));
  }
  return std::move(layout.pipelines[0].plan);
}

absl::Status WriteModelFile(const std::string& path, const ModelGraph& model) {
  return WriteJson(path, ModelToProto(model));
}

absl::Status WriteClusterFile(const std::string& path, const Cluster& cluster) {
  return WriteJson(path, ClusterToProto(cluster));
}

absl::Status WritePlanFile(const std::string& path, const Plan& plan) {
  proto::Plan p = PlanToProto(plan);
  PlanFileForm(&p);
  return WriteJson(path, p);
}

absl::Status WriteLayoutPlanFile(const std::string& path, const LayoutPlan& plan,
                                 const proto::LayoutPrediction* predicted) {
  proto::LayoutPlan p = LayoutPlanToProto(plan);
  if (predicted != nullptr) *p.mutable_predicted() = *predicted;
  LayoutPlanFileForm(&p);
  return WriteJson(path, p);
}

}  // namespace octopipe
