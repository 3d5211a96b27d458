#include "simulator/vocab_parallel.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/plan.h"
#include "core/status_macros.h"

namespace octopipe {

absl::Status CheckVocabParallelModel(const ModelGraph& model, int num_devices) {
  if (model.num_layers() < 2 || model.layers.back().kind != LayerKind::kHead) {
    return absl::FailedPreconditionError(absl::StrCat(
        "vocab_parallel: the model '", model.name,
        "' must end with its head (output layer) after at least one other layer"));
  }
  if (model.layers.back().dims.vocab < num_devices) {
    return absl::FailedPreconditionError(absl::StrCat(
        "vocab_parallel: the model '", model.name, "' has a vocabulary of ",
        model.layers.back().dims.vocab, ", smaller than its ", num_devices,
        " devices (every device's shard holds at least one column)"));
  }
  return absl::OkStatus();
}

bool SplitsEmbedding(const ModelGraph& model) {
  return model.num_layers() >= 2 && model.layers.front().kind == LayerKind::kEmbedding &&
         model.layers.back().kind == LayerKind::kHead &&
         model.layers.front().dims.vocab == model.layers.back().dims.vocab;
}

namespace {

absl::Status CheckPerDevice(const PipelineProblem& pb,
                            std::initializer_list<std::pair<const char*, const std::vector<double>*>>
                                vectors) {
  for (const auto& [name, v] : vectors) {
    if (v->size() != static_cast<size_t>(pb.num_devices)) {
      return absl::InvalidArgumentError(absl::StrCat(name, " has ", v->size(), " entries for ",
                                                     pb.num_devices, " devices"));
    }
    for (double x : *v) {
      if (!(x >= 0) || !std::isfinite(x)) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ": every entry must be finite and >= 0, got ", x));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckTime(const char* name, double x) {
  if (!(x >= 0) || !std::isfinite(x)) {
    return absl::InvalidArgumentError(absl::StrCat(name, " must be finite and >= 0, got ", x));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateVocabParallel(const PipelineProblem& pb) {
  if (pb.embed_split && !pb.vocab_parallel) {
    return absl::InvalidArgumentError(
        "embed_split: the embedding is split only with vocab_parallel, which is off");
  }
  if (!pb.vocab_parallel) return absl::OkStatus();
  RETURN_IF_ERROR(CheckPerDevice(pb, {{"vocab_s_s", &pb.vocab_s_s},
                                      {"vocab_t_s", &pb.vocab_t_s},
                                      {"vocab_activation_bytes", &pb.vocab_activation_bytes}}));
  RETURN_IF_ERROR(CheckTime("vocab_allreduce_s", pb.vocab_allreduce_s));
  if (!pb.embed_split) return absl::OkStatus();
  RETURN_IF_ERROR(CheckPerDevice(pb, {{"embed_prologue_s", &pb.embed_prologue_s},
                                      {"embed_epilogue_s", &pb.embed_epilogue_s}}));
  RETURN_IF_ERROR(CheckTime("embed_ready_s", pb.embed_ready_s));
  return CheckTime("embed_broadcast_s", pb.embed_broadcast_s);
}

std::vector<double> VocabShardFractions(const std::vector<double>& head_seconds) {
  const size_t P = head_seconds.size();
  std::vector<double> out(P, P > 0 ? 1.0 / P : 0.0);
  if (std::any_of(head_seconds.begin(), head_seconds.end(), [](double s) { return !(s > 0); })) {
    return out;
  }
  double speed = 0;
  for (double s : head_seconds) speed += 1.0 / s;
  for (size_t d = 0; d < P; ++d) out[d] = (1.0 / head_seconds[d]) / speed;
  return out;
}

std::vector<int64_t> VocabShardColumnsForSpeeds(int64_t vocab,
                                                const std::vector<double>& head_seconds) {
  return VocabShardColumns(vocab, VocabShardFractions(head_seconds));
}

VocabShard VocabShardCost(const LayerCost& head, double fraction, double op_overhead_s) {
  VocabShard v;
  v.s_s = (head.forward_s + head.backward_input_s) * fraction + op_overhead_s;
  v.t_s = head.weight_grad_s * fraction + op_overhead_s;
  // activation_bytes_w is the logits GEMM's input, which every shard keeps whole for its
  // weight gradient; the rest (softmax of the logits) is split with the vocabulary.
  v.activation_bytes =
      head.activation_bytes_w + (head.activation_bytes - head.activation_bytes_w) * fraction;
  v.static_bytes = head.static_bytes * fraction;
  return v;
}

EmbeddingShard EmbeddingShardCost(const LayerCost& embedding, double fraction) {
  EmbeddingShard e;
  e.lookup_s = embedding.forward_s * fraction;
  e.scatter_s = embedding.weight_grad_s * fraction;
  e.static_bytes = embedding.static_bytes * fraction;
  return e;
}

double ChainSeconds(int num_devices, const std::vector<double>& latency_s,
                    const std::vector<double>& inv_bandwidth, double bytes, int root,
                    bool toward_root) {
  const int P = num_devices;
  if (P < 2) return 0;
  double latency = 0, inv_bw = 0;
  for (int k = 0; k + 1 < P; ++k) {
    const int a = (root + k) % P, b = (root + k + 1) % P;
    const size_t link = toward_root ? static_cast<size_t>(b) * P + a : static_cast<size_t>(a) * P + b;
    latency = std::max(latency, latency_s[link]);
    inv_bw = std::max(inv_bw, inv_bandwidth[link]);
  }
  return (P - 1) * latency + bytes * inv_bw;
}

double VocabAllReduceBytes(double hidden_state_bytes, double tokens) {
  constexpr double kFp32 = 4;
  return hidden_state_bytes + 2 * kFp32 * tokens;
}

double RingAllReduceSeconds(int num_devices, const std::vector<double>& latency_s,
                            const std::vector<double>& inv_bandwidth, double bytes) {
  const int P = num_devices;
  if (P < 2) return 0;
  double step = 0;
  for (int d = 0; d < P; ++d) {
    const size_t link = static_cast<size_t>(d) * P + (d + 1) % P;
    step = std::max(step, latency_s[link] + bytes / P * inv_bandwidth[link]);
  }
  return 2.0 * (P - 1) * step;
}

std::vector<LayerCost> WithHeadSplit(std::vector<LayerCost> layers, int num_devices,
                                     bool split_embedding) {
  if (layers.empty() || num_devices < 1) return layers;
  for (LayerCost* c : {&layers.back(), split_embedding ? &layers.front() : nullptr}) {
    if (c == nullptr) continue;
    c->forward_s /= num_devices;
    c->backward_input_s /= num_devices;
    c->weight_grad_s /= num_devices;
  }
  return layers;
}

}  // namespace octopipe
