#include "simulator/problem_builder.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "simulator/vocab_parallel.h"

namespace octopipe {
namespace {

// TP/EP collectives are not calibrated (the factors fit compute): they add on top, to F and B,
// and to R, which repeats the forward.
void AddComm(const LayerComm& comm, LayerCost* cost) {
  cost->forward_s += comm.forward_s;
  cost->recompute_s += comm.forward_s;
  cost->backward_input_s += comm.backward_input_s;
}

}  // namespace

absl::StatusOr<ProblemBuilder> ProblemBuilder::Create(
    const ModelGraph& model, const Cluster& cluster, const CostModel& cost_model,
    int num_devices, const std::vector<double>& layer_time_factors, bool vocab_parallel) {
  if (!layer_time_factors.empty() &&
      layer_time_factors.size() != static_cast<size_t>(model.num_layers())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer_time_factors: ", layer_time_factors.size(), " factors for ", model.num_layers(),
        " layers"));
  }
  for (double f : layer_time_factors) {
    if (!(f > 0) || !std::isfinite(f)) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer_time_factors: every factor must be finite and > 0, got ", f));
    }
  }
  if (num_devices < 1) {
    return absl::InvalidArgumentError(absl::StrCat("devices must be >= 1, got ", num_devices));
  }
  if (num_devices > cluster.num_devices()) {
    return absl::InvalidArgumentError(absl::StrCat("devices: ", num_devices,
                                                   " requested but the cluster '", cluster.name,
                                                   "' has ", cluster.num_devices()));
  }
  if (vocab_parallel) RETURN_IF_ERROR(CheckVocabParallelModel(model, num_devices));
  if (model.training.precision == Precision::kFp8) {
    for (int d = 0; d < num_devices; ++d) {
      const HardwareSpec& hw = cluster.device_hardware(d);
      if (!(hw.peak_flops_fp8 > 0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "training.precision: fp8 needs FP8 tensor cores, but hardware '", hw.name,
            "' (device ", d, " of cluster '", cluster.name,
            "') has no peak_flops_fp8; train in bf16 there or give its FP8 peak"));
      }
    }
  }
  if (model.training.ep_comm_overlap) {
    for (int d = 0; d < num_devices; ++d) {
      const HardwareSpec& hw = cluster.device_hardware(d);
      if (hw.sm_count > 0 && model.training.ep_comm_sms >= hw.sm_count) {
        return absl::InvalidArgumentError(absl::StrCat(
            "training.ep_comm_sms: ", model.training.ep_comm_sms,
            " SMs for the overlapped all-to-alls leave no SM for the compute they overlap on "
            "hardware '", hw.name, "' (sm_count ", hw.sm_count, ")"));
      }
    }
  }
  ProblemBuilder pb;
  pb.vocab_parallel_ = vocab_parallel;
  pb.split_embedding_ = vocab_parallel && SplitsEmbedding(model);
  if (vocab_parallel) pb.vocab_ = model.layers.back().dims.vocab;
  pb.num_layers_ = model.num_layers();
  pb.num_devices_ = num_devices;
  pb.tokens_per_microbatch_ = model.tokens_per_microbatch();
  const int L = pb.num_layers_;
  std::vector<std::string> class_names;
  for (int d = 0; d < num_devices; ++d) {
    const HardwareSpec& hw = cluster.device_hardware(d);
    auto it = std::find(class_names.begin(), class_names.end(), hw.name);
    if (it == class_names.end()) {
      class_names.push_back(hw.name);
      HardwareClass hc;
      hc.op_overhead_s = hw.op_overhead_s;
      // The overlapped all-to-alls' kernels hold ep_comm_sms of the SMs while they run; the
      // compute beside them runs on the rest (PipelineProblem::tail_compute_share).
      if (model.training.ep_comm_overlap && hw.sm_count > 0) {
        hc.tail_compute_share = static_cast<double>(model.training.ep_comm_sms) / hw.sm_count;
      }
      hc.message_cpu_s = hw.message_cpu_s;
      // TP and EP collectives of this class's devices: the first such device's node.
      const Node& node = cluster.nodes[cluster.node_of_device(d)];
      const CommLinks links{node.intra_node_link, cluster.inter_node_link, node.num_devices};
      hc.layers.reserve(L);
      std::vector<double> tails_f, tails_b;
      for (int l = 0; l < L; ++l) {
        LayerCost cost = cost_model.Cost(model.layers[l], model.training, hw);
        if (!layer_time_factors.empty()) {
          const double f = layer_time_factors[l];
          cost.forward_s *= f;
          cost.backward_input_s *= f;
          cost.weight_grad_s *= f;
          cost.recompute_s *= f;
        }
        LayerComm comm = cost_model.Comm(model.layers[l], model.training, links);
        // Overlapped EP all-to-alls leave F and B for the communication stream (R keeps them:
        // it runs right before its B, with nothing to overlap).
        double tail_f = 0, tail_b = 0;
        if (model.training.ep_comm_overlap) {
          tail_f = comm.ep_forward_s;
          tail_b = comm.ep_backward_input_s;
          comm.forward_s -= tail_f;
          comm.backward_input_s -= tail_b;
          cost.recompute_s += tail_f;
        }
        AddComm(comm, &cost);
        hc.layers.push_back(cost);
        tails_f.push_back(tail_f);
        tails_b.push_back(tail_b);
      }
      for (auto* v : {&hc.f, &hc.b, &hc.w, &hc.r, &hc.act, &hc.act_w, &hc.statics, &hc.work,
                      &hc.ft, &hc.bt}) {
        v->assign(L + 1, 0.0);
      }
      for (int l = 0; l < L; ++l) {
        // A split head runs as vocabulary shards on every device, not in its stage. A split
        // embedding keeps its activations (the token ids) in stage 0, whose ops get only their
        // device's share of its time (BuildWith); its static bytes are the shards'.
        LayerCost c = vocab_parallel && l == L - 1 ? LayerCost{} : hc.layers[l];
        if (pb.split_embedding_ && l == 0) {
          c.forward_s = c.backward_input_s = c.weight_grad_s = c.recompute_s = 0;
          c.static_bytes = 0;
        }
        hc.f[l + 1] = hc.f[l] + c.forward_s;
        hc.b[l + 1] = hc.b[l] + c.backward_input_s;
        hc.w[l + 1] = hc.w[l] + c.weight_grad_s;
        hc.r[l + 1] = hc.r[l] + c.recompute_s;
        hc.act[l + 1] = hc.act[l] + c.activation_bytes;
        hc.act_w[l + 1] = hc.act_w[l] + c.activation_bytes_w;
        hc.statics[l + 1] = hc.statics[l] + c.static_bytes;
        hc.work[l + 1] = hc.work[l] + c.forward_s + c.backward_input_s + c.weight_grad_s;
        const bool whole = !(vocab_parallel && l == L - 1) && !(pb.split_embedding_ && l == 0);
        hc.ft[l + 1] = hc.ft[l] + (whole ? tails_f[l] : 0.0);
        hc.bt[l + 1] = hc.bt[l] + (whole ? tails_b[l] : 0.0);
        if (whole && (tails_f[l] > 0 || tails_b[l] > 0)) pb.comm_tails_ = true;
      }
      pb.classes_.push_back(std::move(hc));
      it = class_names.end() - 1;
    }
    pb.device_class_.push_back(static_cast<int>(it - class_names.begin()));
    pb.capacity_.push_back(cluster.usable_memory(d));
  }
  const int P = num_devices;
  pb.link_latency_s_.assign(static_cast<size_t>(P) * P, 0.0);
  pb.link_inv_bandwidth_.assign(static_cast<size_t>(P) * P, 0.0);
  for (int a = 0; a < P; ++a) {
    for (int b = 0; b < P; ++b) {
      if (a == b) continue;
      const LinkSpec& link = cluster.link(a, b);
      const size_t i = static_cast<size_t>(a) * P + b;
      pb.link_latency_s_[i] = link.latency_s;
      pb.link_inv_bandwidth_[i] = std::isinf(link.bandwidth) ? 0.0 : 1.0 / link.bandwidth;
    }
  }
  if (vocab_parallel) pb.InitVocabParallel();
  return pb;
}

void ProblemBuilder::InitVocabParallel() {
  const int P = num_devices_, head = num_layers_ - 1;
  std::vector<double> head_seconds(P);
  for (int d = 0; d < P; ++d) {
    const LayerCost& c = layer_cost(head, d);
    head_seconds[d] = c.forward_s + c.backward_input_s + c.weight_grad_s;
  }
  vocab_shard_columns_ = VocabShardColumnsForSpeeds(vocab_, head_seconds);
  vocab_costs_ = VocabCostsOf(vocab_shard_columns_);
  vocab_input_bytes_ = layer_cost(head, 0).input_bytes;
  vocab_allreduce_s_ =
      RingAllReduceSeconds(P, link_latency_s_, link_inv_bandwidth_,
                           VocabAllReduceBytes(vocab_input_bytes_, tokens_per_microbatch_));
  if (split_embedding_) embed_bytes_ = layer_cost(0, 0).output_bytes;
}

ProblemBuilder::VocabShardCosts ProblemBuilder::VocabCostsOf(
    const std::vector<int64_t>& columns) const {
  const int P = num_devices_, head = num_layers_ - 1;
  VocabShardCosts out;
  for (auto* v : {&out.s_s, &out.t_s, &out.activation_bytes, &out.static_bytes}) v->resize(P);
  if (split_embedding_) {
    for (auto* v : {&out.embed_f, &out.embed_b, &out.embed_w, &out.embed_r}) v->resize(P);
  }
  for (int d = 0; d < P; ++d) {
    const HardwareClass& hc = classes_[device_class_[d]];
    const double fraction = static_cast<double>(columns[d]) / static_cast<double>(vocab_);
    const VocabShard shard = VocabShardCost(hc.layers[head], fraction, hc.op_overhead_s);
    out.s_s[d] = shard.s_s;
    out.t_s[d] = shard.t_s;
    out.activation_bytes[d] = shard.activation_bytes;
    out.static_bytes[d] = shard.static_bytes;
    if (split_embedding_) {
      const LayerCost& embedding = hc.layers[0];
      const EmbeddingShard e = EmbeddingShardCost(embedding, fraction);
      out.embed_f[d] = e.lookup_s;
      out.embed_b[d] = embedding.backward_input_s * fraction;
      out.embed_w[d] = e.scatter_s;
      out.embed_r[d] = embedding.recompute_s * fraction;
      out.static_bytes[d] += e.static_bytes;
    }
  }
  return out;
}

double ProblemBuilder::Work(int first, int last, int device) const {
  const HardwareClass& hc = classes_[device_class_[device]];
  return hc.work[last + 1] - hc.work[first];
}

double ProblemBuilder::StaticBytes(int first, int last, int device) const {
  const HardwareClass& hc = classes_[device_class_[device]];
  return hc.statics[last + 1] - hc.statics[first];
}

double ProblemBuilder::ActivationBytes(int first, int last, int device) const {
  const HardwareClass& hc = classes_[device_class_[device]];
  return hc.act[last + 1] - hc.act[first];
}

void ProblemBuilder::BuildInto(const std::vector<StageAssignment>& stages, int num_microbatches,
                               PipelineProblem* out) const {
  BuildWith(stages, num_microbatches, vocab_costs_, out);
}

void ProblemBuilder::BuildWith(const std::vector<StageAssignment>& stages, int num_microbatches,
                               const VocabShardCosts& vocab, PipelineProblem* out) const {
  PipelineProblem& p = *out;
  const int S = static_cast<int>(stages.size());
  const int P = num_devices_;
  p.num_devices = P;
  p.num_stages = S;
  p.num_microbatches = num_microbatches;
  p.stage_device.resize(S);
  for (auto* v : {&p.forward_s, &p.backward_input_s, &p.weight_grad_s, &p.recompute_s,
                  &p.activation_bytes, &p.activation_bytes_w, &p.input_bytes, &p.output_bytes,
                  &p.op_overhead_s}) {
    v->resize(S);
  }
  p.recompute.resize(S);
  p.forward_tail_s.assign(comm_tails_ ? S : 0, 0.0);
  p.backward_tail_s.assign(comm_tails_ ? S : 0, 0.0);
  p.tail_compute_share.assign(comm_tails_ ? S : 0, 0.0);
  p.static_bytes.assign(P, 0.0);
  p.memory_capacity = capacity_;
  for (int s = 0; s < S; ++s) {
    const StageAssignment& st = stages[s];
    const HardwareClass& hc = classes_[device_class_[st.device]];
    const int lo = st.first_layer, hi = st.last_layer + 1;
    p.stage_device[s] = st.device;
    p.recompute[s] = st.recompute ? 1 : 0;
    const int messages = (s > 0 && stages[s - 1].device != st.device ? 1 : 0) +
                         (s + 1 < S && stages[s + 1].device != st.device ? 1 : 0);
    p.forward_s[s] = hc.f[hi] - hc.f[lo] + hc.op_overhead_s + messages * hc.message_cpu_s;
    p.backward_input_s[s] =
        hc.b[hi] - hc.b[lo] + hc.op_overhead_s + messages * hc.message_cpu_s;
    p.weight_grad_s[s] = hc.w[hi] - hc.w[lo] + hc.op_overhead_s;
    p.recompute_s[s] = hc.r[hi] - hc.r[lo] + hc.op_overhead_s;
    p.op_overhead_s[s] = hc.op_overhead_s;
    if (comm_tails_) {
      p.forward_tail_s[s] = hc.ft[hi] - hc.ft[lo];
      p.backward_tail_s[s] = hc.bt[hi] - hc.bt[lo];
      p.tail_compute_share[s] = hc.tail_compute_share;
    }
    p.activation_bytes[s] = hc.act[hi] - hc.act[lo];
    p.activation_bytes_w[s] = hc.act_w[hi] - hc.act_w[lo];
    // Under recompute F keeps the stage input; never more than F would hold anyway.
    p.input_bytes[s] = std::min(hc.layers[lo].input_bytes, p.activation_bytes[s]);
    p.output_bytes[s] = hc.layers[hi - 1].output_bytes;
    p.static_bytes[st.device] += hc.statics[hi] - hc.statics[lo];
    if (split_embedding_ && lo == 0) {
      // Stage 0 runs its device's shard of the embedding, whose input under recompute is the
      // reduced embedding (the other shards' partials cannot be looked up again).
      const int r0 = st.device;
      p.forward_s[s] += vocab.embed_f[r0];
      p.backward_input_s[s] += vocab.embed_b[r0];
      p.weight_grad_s[s] += vocab.embed_w[r0];
      p.recompute_s[s] += vocab.embed_r[r0];
      p.input_bytes[s] = std::min(hc.layers[0].output_bytes, p.activation_bytes[s]);
    }
  }
  p.link_latency_s = link_latency_s_;
  p.link_inv_bandwidth = link_inv_bandwidth_;
  p.tokens_per_microbatch = tokens_per_microbatch_;
  p.vocab_parallel = vocab_parallel_;
  p.vocab_s_s = vocab.s_s;
  p.vocab_t_s = vocab.t_s;
  p.vocab_activation_bytes = vocab.activation_bytes;
  p.vocab_input_bytes = vocab_input_bytes_;
  p.vocab_allreduce_s = vocab_allreduce_s_;
  for (int d = 0; d < static_cast<int>(vocab.static_bytes.size()); ++d) {
    p.static_bytes[d] += vocab.static_bytes[d];
  }
  p.embed_split = split_embedding_;
  if (!split_embedding_) {
    p.embed_prologue_s.clear();
    p.embed_epilogue_s.clear();
    p.embed_ready_s = p.embed_broadcast_s = 0;
    return;
  }
  // Every device but stage 0's looks up its rows for every micro-batch before its first op and
  // scatter-adds every gradient after its last (simulator/vocab_parallel.h).
  const int r0 = stages.front().device;
  p.embed_prologue_s.assign(P, 0.0);
  p.embed_epilogue_s.assign(P, 0.0);
  double lookup = 0;  // the slowest first partial
  for (int d = 0; d < P; ++d) {
    if (d == r0) continue;
    p.embed_prologue_s[d] = num_microbatches * vocab.embed_f[d];
    p.embed_epilogue_s[d] = num_microbatches * vocab.embed_w[d];
    lookup = std::max(lookup, vocab.embed_f[d]);
  }
  p.embed_ready_s = lookup + ChainSeconds(P, link_latency_s_, link_inv_bandwidth_, embed_bytes_,
                                          r0, /*toward_root=*/true);
  p.embed_broadcast_s = ChainSeconds(P, link_latency_s_, link_inv_bandwidth_, embed_bytes_, r0,
                                     /*toward_root=*/false);
}

absl::StatusOr<PipelineProblem> ProblemBuilder::Build(const Plan& plan) const {
  RETURN_IF_ERROR(ValidatePlanShape(plan, num_layers_));
  if (plan.vocab_parallel != vocab_parallel_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vocab_parallel: the plan has ", plan.vocab_parallel ? "true" : "false",
        " but the problem is built with ", vocab_parallel_ ? "true" : "false"));
  }
  if (plan.num_devices != num_devices_) {
    return absl::InvalidArgumentError(absl::StrCat("num_devices: the plan uses ",
                                                   plan.num_devices, " devices, expected ",
                                                   num_devices_));
  }
  PipelineProblem p;
  if (!vocab_parallel_) {
    BuildInto(plan.stages, plan.num_microbatches, &p);
    return p;
  }
  // The plan's own shards, which the executor runs.
  ASSIGN_OR_RETURN(const std::vector<int64_t> columns, PlanVocabShardColumns(plan, vocab_));
  if (columns == vocab_shard_columns_) {
    BuildInto(plan.stages, plan.num_microbatches, &p);
  } else {
    BuildWith(plan.stages, plan.num_microbatches, VocabCostsOf(columns), &p);
  }
  return p;
}

absl::StatusOr<PipelineProblem> BuildProblem(const ModelGraph& model, const Cluster& cluster,
                                             const CostModel& cost_model, const Plan& plan) {
  ASSIGN_OR_RETURN(ProblemBuilder builder,
                   ProblemBuilder::Create(model, cluster, cost_model, plan.num_devices, {},
                                          plan.vocab_parallel));
  return builder.Build(plan);
}

}  // namespace octopipe
