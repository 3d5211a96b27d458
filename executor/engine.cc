#include "executor/engine.h"

#include "executor/allocator.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <deque>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "core/pipeline_edges.h"
#include "core/status_macros.h"

namespace octopipe::executor {
namespace {

constexpr int kForward = 0;
constexpr int kBackward = 1;
// The (stage, micro-batch) key under which a vocabulary pass accounts its held bytes.
constexpr int kVocabKey = -1;

}  // namespace

int64_t ContextBytes(const LayerContext& ctx) {
  int64_t bytes = 0;
  for (const Tensor& t : ctx.saved) bytes += static_cast<int64_t>(t.size()) * sizeof(float);
  for (const auto& v : ctx.saved_index) bytes += static_cast<int64_t>(v.size()) * sizeof(int32_t);
  return bytes;
}

int64_t ParamBytes(Layer& layer) {
  int64_t bytes = 0;
  for (const Tensor* p : layer.params()) bytes += static_cast<int64_t>(p->size()) * sizeof(float);
  return bytes;
}

PipelineEngine::PipelineEngine(const Plan& plan, int rank,
                               std::vector<std::unique_ptr<Layer>>* layers, Transport* transport,
                               int tokens_per_microbatch, int hidden)
    : plan_(plan), rank_(rank), layers_(layers), transport_(transport),
      messages_(std::make_unique<AsyncMessages>(transport)), tokens_(tokens_per_microbatch),
      hidden_(hidden) {
  for (const StageAssignment& st : plan_.stages) recompute_.push_back(st.recompute ? 1 : 0);
  RetainFreedMemory();  // see executor/allocator.h: ops must not page-fault their buffers
}

uint32_t PipelineEngine::Tag(int stage, int microbatch, int direction) const {
  return static_cast<uint32_t>((microbatch * plan_.num_stages() + stage) * 2 + direction);
}

uint32_t PipelineEngine::VocabTag(int microbatch, int shard, VocabMessage kind) const {
  const uint32_t base = static_cast<uint32_t>(plan_.num_microbatches * plan_.num_stages() * 2);
  return base + static_cast<uint32_t>((microbatch * plan_.num_devices + shard) *
                                          kVocabMessageKinds +
                                      static_cast<int>(kind));
}

PipelineEngine::Message PipelineEngine::VocabMessageTo(int to, int microbatch, int shard,
                                                       VocabMessage kind) const {
  const int rows = kind == VocabMessage::kGrad ? 2 * tokens_ : tokens_;
  const int cols = kind == VocabMessage::kStats ? 3 : hidden_;
  return {to, VocabTag(microbatch, shard, kind), rows, cols};
}

std::vector<PipelineEngine::Message> PipelineEngine::SendsBetween(int from, int to) const {
  std::vector<Message> out;
  const bool embed = ShardEmbedding() != nullptr;
  const int r0 = EmbeddingHolder();
  if (embed && from != r0 && to == r0) {  // the prologue's partials, in r0's order of F(0, .)
    for (const Op& op : plan_.schedule.ops[r0]) {
      if (op.kind == OpKind::kF && op.stage == 0) {
        out.push_back(VocabMessageTo(to, op.microbatch, from, VocabMessage::kEmbed));
      }
    }
  }
  // The pipeline's edges (core/pipeline_edges.h, as the simulator costs them) whose consumer
  // runs on `to`, in the order of `from`'s ops: each is one message.
  const PipelineShape shape = Shape();
  const auto backward = [](int) { return OpKind::kB; };  // B or BW: the same device
  for (const Op& op : plan_.schedule.ops[from]) {
    const int s = op.stage, m = op.microbatch;
    if (embed && s == 0 && (op.kind == OpKind::kB || op.kind == OpKind::kBW)) {
      out.push_back(VocabMessageTo(to, m, from, VocabMessage::kEmbedGrad));
    }
    ForEachSuccessor(shape, op.kind, s, backward, [&](OpKind kind, int stage, EdgeData data) {
      if (ConsumerDevice(kind, stage) != to) return;
      switch (data) {
        case EdgeData::kActivation:
          out.push_back({to, Tag(s, m, kForward), tokens_, hidden_});
          break;
        case EdgeData::kGradient:
          out.push_back({to, Tag(s, m, kBackward), tokens_, hidden_});
          break;
        case EdgeData::kVocabInput:
          out.push_back(VocabMessageTo(to, m, from, VocabMessage::kInput));
          break;
        case EdgeData::kVocabAllReduce:
          // The barrier as the executor runs it: every shard's softmax statistics to every
          // T, and its partial input gradient to the holder of the last stage's backward.
          out.push_back(VocabMessageTo(to, m, from,
                                       kind == OpKind::kT ? VocabMessage::kStats
                                                          : VocabMessage::kGrad));
          break;
        case EdgeData::kNone:
          break;
      }
    });
  }
  return out;
}

VocabShardHead* PipelineEngine::ShardHead() const {
  if (!plan_.vocab_parallel || plan_.stages.empty()) return nullptr;
  const size_t head = static_cast<size_t>(plan_.stages.back().last_layer);
  if (head >= layers_->size()) return nullptr;
  return dynamic_cast<VocabShardHead*>((*layers_)[head].get());
}

VocabShardEmbedding* PipelineEngine::ShardEmbedding() const {
  if (!plan_.vocab_parallel || layers_->empty()) return nullptr;
  return dynamic_cast<VocabShardEmbedding*>((*layers_)[0].get());
}

absl::Status PipelineEngine::ValidateVocabParallel() const {
  for (const Op& op : plan_.schedule.ops[rank_]) {
    if (!IsVocabPass(op.kind)) continue;
    if (!plan_.vocab_parallel) {
      return absl::InvalidArgumentError(absl::StrCat(
          "op ", OpToString(op), " on rank ", rank_,
          ": vocabulary passes need a vocab_parallel plan, and this one is not"));
    }
    if (op.stage != rank_) {
      return absl::InvalidArgumentError(
          absl::StrCat("op ", OpToString(op), " on rank ", rank_,
                       ": a vocabulary pass runs the rank's own shard, ", rank_));
    }
  }
  // A split embedding needs a vocab_parallel plan, which splits an embedding that is layer 0.
  const Layer* first = layers_->empty() ? nullptr : (*layers_)[0].get();
  if (first != nullptr && first->kind() == "embedding" &&
      plan_.vocab_parallel != (dynamic_cast<const VocabShardEmbedding*>(first) != nullptr)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "vocab_parallel: layer 0 on rank ", rank_,
        plan_.vocab_parallel
            ? " must be this rank's vocabulary shard of the embedding (BuildRankLayers builds it)"
            : " is a vocabulary shard of the embedding, but the plan is not vocab_parallel"));
  }
  if (!plan_.vocab_parallel) return absl::OkStatus();
  const VocabShardHead* head = ShardHead();
  if (head == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "vocab_parallel: layer ", plan_.stages.back().last_layer, " on rank ", rank_,
        " must be this rank's vocabulary shard of the head (BuildRankLayers builds it)"));
  }
  if (head->holds_norm() != (rank_ == NormHolder())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "vocab_parallel: the head's norm belongs on rank ", NormHolder(),
        " (the last stage's), rank ", rank_, (head->holds_norm() ? " holds" : " lacks"), " it"));
  }
  return absl::OkStatus();
}

absl::Status PipelineEngine::Validate() const {
  if (transport_->size() != plan_.num_devices) {
    return absl::FailedPreconditionError(absl::StrCat("transport has ", transport_->size(),
                                                      " ranks but the plan uses ",
                                                      plan_.num_devices, " devices"));
  }
  if (rank_ < 0 || rank_ >= plan_.num_devices) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank_, " outside the plan's ",
                                                   plan_.num_devices, " devices"));
  }
  RETURN_IF_ERROR(ValidateVocabParallel());
  for (const StageAssignment& st : plan_.stages) {
    if (st.device != rank_) continue;
    for (int l = st.first_layer; l <= st.last_layer; ++l) {
      if (l >= static_cast<int>(layers_->size()) || (*layers_)[l] == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("layer ", l, " of stage on rank ", rank_,
                                                       " is not built"));
      }
    }
  }
  return absl::OkStatus();
}

// One RunIteration's state: its messages in flight and the per (stage, micro-batch) tensors,
// layer contexts and held activation bytes on this rank. Only the computing thread touches it.
struct PipelineEngine::Iteration {
  explicit Iteration(const std::vector<MicroBatch>& mbs) : microbatches(mbs) {}

  double Now() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  // Vocabulary parallelism, per micro-batch: every shard's stats and (norm holder) partial
  // gradients once taken, until the ops that read them (T, and the head's backward) are done.
  struct VocabState {
    std::vector<Tensor> stats, grads;  // by shard; empty until there
    int readers = 0;
  };
  VocabState& Vocab(int m, int shards, int readers) {
    auto [entry, created] = vocab.try_emplace(m);
    if (created) {
      entry->second.stats.resize(shards);
      entry->second.grads.resize(shards);
      entry->second.readers = readers;
    }
    return entry->second;
  }
  void ReleaseVocab(int m) {
    if (--vocab[m].readers == 0) vocab.erase(m);
  }

  const std::vector<MicroBatch>& microbatches;
  std::chrono::steady_clock::time_point t0;
  IterationStats stats;

  // A message in flight and its tensor (declared first: destroyed after the message, which
  // may still write into it until then).
  struct InFlight {
    Tensor tensor;
    std::unique_ptr<PendingMessage> message;
    int peer = 0;
  };
  std::map<uint32_t, InFlight> receives;  // posted at the start, by tag
  std::deque<InFlight> sends;             // in send order (a deque: entries never move)
  // The first communication failure (a message that could not start or failed).
  absl::Status comm_error;
  int64_t received = 0, sent = 0;

  std::map<std::pair<int, int>, Tensor> local_fwd, local_bwd, stage_input;
  std::map<std::pair<int, int>, std::vector<LayerContext>> ctx;
  std::map<std::pair<int, int>, int64_t> held;  // activation bytes per (stage, micro-batch)
  std::map<int, VocabState> vocab;
  std::map<int, Tensor> vocab_input;       // the norm holder's n for its own S, by micro-batch
  std::map<int, LayerContext> vocab_ctx;   // this rank's shard, from S to T, by micro-batch
  int64_t held_total = 0;
  double loss_sum = 0;
};

namespace {

double ClockSeconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The calling thread's CPU time in seconds.
double ThreadCpuSeconds() { return ClockSeconds(CLOCK_THREAD_CPUTIME_ID); }

// Runs `body` and records its duration (and the thread's CPU time meanwhile) as layer `l`'s
// share of op (kind, s, m).
template <typename Body>
void TimedLayer(IterationStats* stats, int l, OpKind kind, int s, int m, Body&& body) {
  const double cpu0 = ThreadCpuSeconds();
  const auto start = std::chrono::steady_clock::now();
  body();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats->layer_ops.push_back(LayerOpTiming{l, s, m, kind, wall, ThreadCpuSeconds() - cpu0});
}

}  // namespace

absl::Status PipelineEngine::CommError(bool send, int peer, const absl::Status& s) const {
  return absl::Status(s.code(), absl::StrCat("rank ", rank_, send ? ": sending to rank "
                                                                  : ": receiving from rank ",
                                             peer, " failed: ", s.message()));
}

void PipelineEngine::StartCommunication(Iteration* it) {
  const int P = plan_.num_devices;
  for (int peer = 0; peer < P && it->comm_error.ok(); ++peer) {
    if (peer == rank_) continue;
    const std::vector<Message> expect = SendsBetween(peer, rank_);
    it->stats.messages += static_cast<int>(expect.size() + SendsBetween(rank_, peer).size());
    // In the order the peer sends them (the threaded fallback receives in start order).
    for (const Message& m : expect) {
      Iteration::InFlight& slot = it->receives[m.tag];
      if (slot.message != nullptr) {
        it->comm_error = absl::InternalError(absl::StrCat("rank ", rank_, ": two messages with tag ",
                                                          m.tag, " in one iteration"));
        return;
      }
      slot.tensor = Tensor(m.rows, m.cols);
      slot.peer = peer;
      absl::StatusOr<std::unique_ptr<PendingMessage>> started = messages_->StartRecv(
          peer, m.tag, slot.tensor.data(), static_cast<size_t>(slot.tensor.size()) * sizeof(float));
      if (!started.ok()) {
        it->comm_error = CommError(/*send=*/false, peer, started.status());
        return;
      }
      slot.message = std::move(*started);
    }
  }
}

void PipelineEngine::Send(int peer, uint32_t tag, Tensor t, Iteration* it) {
  if (!it->comm_error.ok()) return;  // the iteration is failing: send nothing more
  const size_t bytes = static_cast<size_t>(t.size()) * sizeof(float);
  Iteration::InFlight& sent = it->sends.emplace_back();
  sent.tensor = std::move(t);
  sent.peer = peer;
  absl::StatusOr<std::unique_ptr<PendingMessage>> started =
      messages_->StartSend(peer, tag, sent.tensor.data(), bytes);
  if (!started.ok()) {
    it->comm_error = CommError(/*send=*/true, peer, started.status());
    return;
  }
  sent.message = std::move(*started);
}

void PipelineEngine::FinishCommunication(Iteration* it) {
  // After a failure the remaining messages are abandoned (waiting for each would wait out its
  // own timeout); otherwise every send must have left.
  if (it->comm_error.ok()) {
    for (Iteration::InFlight& s : it->sends) {
      if (s.message == nullptr) continue;
      absl::Status done = s.message->Wait();
      if (!done.ok()) {
        it->comm_error = CommError(/*send=*/true, s.peer, done);
        break;
      }
      it->sent += static_cast<int64_t>(s.tensor.size()) * static_cast<int64_t>(sizeof(float));
    }
  }
  it->sends.clear();
  it->receives.clear();
}

absl::Status PipelineEngine::Receive(const Op& op, uint32_t tag, const std::string& what,
                                     Iteration* it, OpTiming* timing, Tensor* out) {
  return ReceiveTagged(tag, absl::StrCat(what, OpToString(op)), it, &timing->wait_s, out);
}

absl::Status PipelineEngine::ReceiveTagged(uint32_t tag, const std::string& waiter,
                                           Iteration* it, double* wait_s, Tensor* out) {
  auto failed = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat(s.message(), " (waiting for ", waiter, ")"));
  };
  if (!it->comm_error.ok()) return failed(it->comm_error);
  auto found = it->receives.find(tag);
  if (found == it->receives.end()) {
    return failed(absl::InternalError(absl::StrCat("rank ", rank_, ": no message with tag ", tag,
                                                   " is expected in this iteration")));
  }
  const double wait_from = it->Now();
  absl::Status done = found->second.message->Wait();
  *wait_s += it->Now() - wait_from;
  if (!done.ok()) {
    it->comm_error = CommError(/*send=*/false, found->second.peer, done);
    return failed(it->comm_error);
  }
  it->received += static_cast<int64_t>(found->second.tensor.size()) *
                  static_cast<int64_t>(sizeof(float));
  found->second.message.reset();
  *out = std::move(found->second.tensor);
  it->receives.erase(found);
  return absl::OkStatus();
}

absl::Status PipelineEngine::TakeInputs(const Op& op, Iteration* it, OpTiming* timing,
                                        Tensor* input, Tensor* grad) {
  const int S = plan_.num_stages();
  const int s = op.stage, m = op.microbatch;
  auto receive = [&](uint32_t tag, const char* what, Tensor* out) {
    return Receive(op, tag, what, it, timing, out);
  };
  if (IsVocabPass(op.kind) ||
      (plan_.vocab_parallel && s == S - 1 && (op.kind == OpKind::kB || op.kind == OpKind::kBW))) {
    RETURN_IF_ERROR(TakeVocabInputs(op, it, timing, input));
  }
  if (op.kind == OpKind::kF && s == 0 && ShardEmbedding() != nullptr) {
    // Stage 0's input: the other shards' partial embeddings, added up in rank order.
    for (int d = 0; d < plan_.num_devices; ++d) {
      if (d == rank_) continue;
      Tensor part;
      RETURN_IF_ERROR(Receive(op, VocabTag(m, d, VocabMessage::kEmbed),
                              absl::StrCat("shard ", d, "'s embedding rows for "), it, timing,
                              &part));
      if (input->size() == 0) {
        *input = std::move(part);
      } else {
        *input += part;
      }
    }
  }
  if (op.kind == OpKind::kF && s > 0) {
    if (plan_.stages[s - 1].device == rank_) {
      *input = std::move(it->local_fwd[{s - 1, m}]);
      it->local_fwd.erase({s - 1, m});
    } else {
      RETURN_IF_ERROR(receive(Tag(s - 1, m, kForward), "the input of ", input));
    }
  }
  if ((op.kind == OpKind::kB || op.kind == OpKind::kBW) && s + 1 < S) {
    if (plan_.stages[s + 1].device == rank_) {
      *grad = std::move(it->local_bwd[{s + 1, m}]);
      it->local_bwd.erase({s + 1, m});
    } else {
      RETURN_IF_ERROR(receive(Tag(s + 1, m, kBackward), "the gradient of ", grad));
    }
  }
  return absl::OkStatus();
}

absl::Status PipelineEngine::TakeVocabInputs(const Op& op, Iteration* it, OpTiming* timing,
                                             Tensor* input) {
  const int P = plan_.num_devices, m = op.microbatch, holder = NormHolder();
  if (op.kind == OpKind::kS) {
    if (holder != rank_) {
      return Receive(op, VocabTag(m, holder, VocabMessage::kInput), "the hidden state of ", it,
                     timing, input);
    }
    auto n = it->vocab_input.find(m);
    if (n == it->vocab_input.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", rank_, ": op ", OpToString(op), " runs before F", plan_.num_stages() - 1, ".",
          m, ", the last stage's forward"));
    }
    *input = std::move(n->second);
    it->vocab_input.erase(n);
    return absl::OkStatus();
  }
  // T reads every shard's stats; the head's backward also every partial gradient.
  Iteration::VocabState& v = it->Vocab(m, P, rank_ == holder ? 2 : 1);
  const bool grads = op.kind != OpKind::kT;
  for (int d = 0; d < P; ++d) {
    for (auto [needed, kind, slot] : {std::tuple{true, VocabMessage::kStats, &v.stats[d]},
                                      std::tuple{grads, VocabMessage::kGrad, &v.grads[d]}}) {
      if (!needed || slot->size() > 0) continue;
      if (d == rank_) {
        return absl::FailedPreconditionError(
            absl::StrCat("rank ", rank_, ": op ", OpToString(op), " runs before S", rank_, ".", m,
                         ", its shard's S pass"));
      }
      RETURN_IF_ERROR(Receive(op, VocabTag(m, d, kind),
                              absl::StrCat("shard ", d, "'s S pass output for "), it, timing,
                              slot));
    }
  }
  return absl::OkStatus();
}

void PipelineEngine::RunShardForward(int m, const Tensor& n, Iteration* it) {
  const int P = plan_.num_devices, holder = NormHolder();
  // Timed as an op only: vocabulary passes are not per layer (LayerOpTiming is F, B, W, R).
  VocabPartial partial = ShardHead()->ShardForward(n, it->microbatches[m], &it->vocab_ctx[m]);
  for (int d = 0; d < P; ++d) {
    if (d != rank_) Send(d, VocabTag(m, rank_, VocabMessage::kStats), partial.stats, it);
  }
  Iteration::VocabState& v = it->Vocab(m, P, rank_ == holder ? 2 : 1);
  if (holder == rank_) {
    v.grads[rank_] = std::move(partial.grad);
  } else {
    Send(holder, VocabTag(m, rank_, VocabMessage::kGrad), std::move(partial.grad), it);
  }
  v.stats[rank_] = std::move(partial.stats);
}

void PipelineEngine::RunShardWeight(int m, Iteration* it) {
  const int M = static_cast<int>(it->microbatches.size());
  std::vector<const Tensor*> stats;
  for (const Tensor& t : it->vocab[m].stats) stats.push_back(&t);
  ShardHead()->ShardBackwardWeight(CombineNormaliser(stats), 1.0f / static_cast<float>(LossScale(M)),
                                   it->microbatches[m], &it->vocab_ctx[m]);
  it->vocab_ctx.erase(m);
  it->ReleaseVocab(m);
}

Tensor PipelineEngine::CombineHeadGradient(int m, Iteration* it) {
  const int M = static_cast<int>(it->microbatches.size());
  Iteration::VocabState& v = it->vocab[m];
  std::vector<const Tensor*> stats, grads;
  for (const Tensor& t : v.stats) stats.push_back(&t);
  for (const Tensor& t : v.grads) grads.push_back(&t);
  float loss = 0;
  Tensor dn = CombineInputGradient(stats, grads, 1.0f / static_cast<float>(LossScale(M)), &loss);
  it->loss_sum += loss;
  for (Tensor& g : v.grads) g = Tensor();
  it->ReleaseVocab(m);
  return dn;
}

Tensor PipelineEngine::ForwardStage(int s, int m, const Tensor& in, OpKind kind, Iteration* it) {
  const int lo = plan_.stages[s].first_layer, hi = plan_.stages[s].last_layer;
  std::vector<LayerContext>& c = it->ctx[{s, m}];
  c.assign(hi - lo + 1, LayerContext{});
  Tensor x = in;
  for (int l = lo; l <= hi; ++l) {
    TimedLayer(&it->stats, l, kind, s, m,
               [&] { x = (*layers_)[l]->Forward(x, it->microbatches[m], &c[l - lo]); });
    it->stats.layer_ops.back().held_bytes = ContextBytes(c[l - lo]);
  }
  return x;
}

void PipelineEngine::RouteForwardOutput(const Op& op, Tensor out, Iteration* it) {
  const int s = op.stage, m = op.microbatch;
  ForEachSuccessor(Shape(), OpKind::kF, s, [](int) { return OpKind::kB; },
                   [&](OpKind kind, int stage, EdgeData data) {
                     const int device = ConsumerDevice(kind, stage);
                     if (data == EdgeData::kActivation && device == rank_) {
                       it->local_fwd[{s, m}] = std::move(out);
                     } else if (data == EdgeData::kActivation) {
                       Send(device, Tag(s, m, kForward), std::move(out), it);
                     } else if (data == EdgeData::kVocabInput && device != rank_) {
                       // n goes to every shard's S pass, this rank's own below.
                       Send(device, VocabTag(m, rank_, VocabMessage::kInput), out, it);
                     }
                   });
  if (plan_.vocab_parallel && s == plan_.num_stages() - 1) it->vocab_input[m] = std::move(out);
}

void PipelineEngine::RouteInputGradient(const Op& op, Tensor dy, Iteration* it) {
  const int s = op.stage, m = op.microbatch;
  ForEachSuccessor(Shape(), op.kind, s, [](int) { return OpKind::kB; },
                   [&](OpKind kind, int stage, EdgeData data) {
                     if (data != EdgeData::kGradient) return;
                     const int device = ConsumerDevice(kind, stage);
                     if (device == rank_) {
                       it->local_bwd[{s, m}] = std::move(dy);
                     } else {
                       Send(device, Tag(s, m, kBackward), std::move(dy), it);
                     }
                   });
}

void PipelineEngine::RunOp(const Op& op, Tensor input, Tensor grad, Iteration* it) {
  const int S = plan_.num_stages();
  const int M = static_cast<int>(it->microbatches.size());
  const int s = op.stage, m = op.microbatch;
  const auto key = std::make_pair(s, m);
  const std::vector<MicroBatch>& microbatches = it->microbatches;
  const int lo = plan_.stages[s].first_layer, hi = plan_.stages[s].last_layer;
  IterationStats* stats = &it->stats;
  switch (op.kind) {
    case OpKind::kF: {
      if (plan_.stages[s].recompute) it->stage_input[key] = input;
      Tensor out = ForwardStage(s, m, input, OpKind::kF, it);
      if (plan_.stages[s].recompute) it->ctx.erase(key);  // R rebuilds it before the backward
      if (s == S - 1 && !plan_.vocab_parallel) {  // the loss edge: F(S-1) -> its backward
        it->loss_sum += out(0, 0);
        break;
      }
      RouteForwardOutput(op, std::move(out), it);
      break;
    }
    case OpKind::kR: {
      ForwardStage(s, m, it->stage_input[key], OpKind::kR, it);
      it->stage_input.erase(key);
      break;
    }
    case OpKind::kB:
    case OpKind::kBW: {
      Tensor dy = s < S - 1               ? std::move(grad)
                  : plan_.vocab_parallel ? CombineHeadGradient(m, it)
                                         : Tensor::Constant(1, 1, 1.0f / LossScale(M));
      std::vector<LayerContext>& c = it->ctx[key];
      const bool embed = s == 0 && ShardEmbedding() != nullptr;
      for (int l = hi; l >= lo; --l) {
        if (l == 0 && embed) {  // the embedding output's gradient, to every other shard
          for (int d = 0; d < plan_.num_devices; ++d) {
            if (d != rank_) Send(d, VocabTag(m, rank_, VocabMessage::kEmbedGrad), dy, it);
          }
        }
        TimedLayer(stats, l, OpKind::kB, s, m,
                   [&] { dy = (*layers_)[l]->BackwardInput(dy, microbatches[m], &c[l - lo]); });
        stats->layer_ops.back().held_bytes = ContextBytes(c[l - lo]);
      }
      if (op.kind == OpKind::kBW) {
        for (int l = lo; l <= hi; ++l) {
          TimedLayer(stats, l, OpKind::kW, s, m,
                     [&] { (*layers_)[l]->BackwardWeight(microbatches[m], &c[l - lo]); });
        }
        it->ctx.erase(key);
      }
      RouteInputGradient(op, std::move(dy), it);
      break;
    }
    case OpKind::kW: {
      std::vector<LayerContext>& c = it->ctx[key];
      for (int l = lo; l <= hi; ++l) {
        TimedLayer(stats, l, OpKind::kW, s, m,
                   [&] { (*layers_)[l]->BackwardWeight(microbatches[m], &c[l - lo]); });
      }
      it->ctx.erase(key);
      break;
    }
    case OpKind::kS:
      RunShardForward(m, input, it);
      break;
    case OpKind::kT:
      RunShardWeight(m, it);
      break;
  }
}

void PipelineEngine::EmbeddingPrologue(Iteration* it) {
  VocabShardEmbedding* shard = ShardEmbedding();
  const int r0 = EmbeddingHolder();
  if (shard == nullptr || rank_ == r0) return;
  const double start = it->Now();
  for (const Op& op : plan_.schedule.ops[r0]) {
    if (op.kind != OpKind::kF || op.stage != 0) continue;
    Send(r0, VocabTag(op.microbatch, rank_, VocabMessage::kEmbed),
         shard->Partial(it->microbatches[op.microbatch]), it);
  }
  it->stats.embed_lookup_s = it->Now() - start;
}

absl::Status PipelineEngine::EmbeddingEpilogue(Iteration* it) {
  VocabShardEmbedding* shard = ShardEmbedding();
  const int r0 = EmbeddingHolder();
  if (shard == nullptr || rank_ == r0) return absl::OkStatus();
  const double start = it->Now();
  double waited = 0;
  for (int m = 0; m < static_cast<int>(it->microbatches.size()); ++m) {
    Tensor dy;
    RETURN_IF_ERROR(ReceiveTagged(
        VocabTag(m, r0, VocabMessage::kEmbedGrad),
        absl::StrCat("the embedding gradient of micro-batch ", m, " after rank ", rank_,
                     "'s last op"),
        it, &waited, &dy));
    shard->AccumulateGradient(dy, it->microbatches[m]);
  }
  it->stats.embed_scatter_s = it->Now() - start - waited;
  return absl::OkStatus();
}

void PipelineEngine::Account(const std::pair<int, int>& key, Iteration* it) {
  int64_t bytes = 0;
  if (key.first == kVocabKey) {
    if (auto c = it->vocab_ctx.find(key.second); c != it->vocab_ctx.end()) {
      bytes += ContextBytes(c->second);
    }
  }
  if (auto c = it->ctx.find(key); c != it->ctx.end()) {
    for (const LayerContext& lc : c->second) bytes += ContextBytes(lc);
  }
  if (auto in = it->stage_input.find(key); in != it->stage_input.end()) {
    bytes += static_cast<int64_t>(in->second.size()) * sizeof(float);
  }
  it->held_total += bytes - it->held[key];
  if (bytes == 0) {
    it->held.erase(key);
  } else {
    it->held[key] = bytes;
  }
  it->stats.peak_activation_bytes = std::max(it->stats.peak_activation_bytes, it->held_total);
}

absl::Status PipelineEngine::StageCommStatus(const Op& op) const {
  const StageAssignment& st = plan_.stages[op.stage];
  for (int l = st.first_layer; l <= st.last_layer; ++l) {
    const Layer* layer = (*layers_)[l].get();
    if (layer == nullptr) continue;
    if (absl::Status s = layer->comm_status(); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("rank ", rank_, ": ", OpToString(op),
                                                 ", layer ", l, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<IterationStats> PipelineEngine::RunIteration(
    const std::vector<MicroBatch>& microbatches) {
  RETURN_IF_ERROR(Validate());
  const int M = static_cast<int>(microbatches.size());
  if (M != plan_.num_microbatches) {
    return absl::InvalidArgumentError(absl::StrCat("microbatches: the plan has ",
                                                   plan_.num_microbatches, ", got ", M));
  }
  Iteration it(microbatches);
  const double process_cpu0 = ClockSeconds(CLOCK_PROCESS_CPUTIME_ID);
  const double thread_cpu0 = ThreadCpuSeconds();
  it.t0 = std::chrono::steady_clock::now();
  it.stats.start_steady_s = std::chrono::duration<double>(it.t0.time_since_epoch()).count();
  StartCommunication(&it);
  if (it.comm_error.ok()) EmbeddingPrologue(&it);
  absl::Status failure;
  for (const Op& op : plan_.schedule.ops[rank_]) {
    OpTiming timing;
    timing.op = op;
    // Inputs first (waiting for them is not compute time).
    Tensor input, grad;
    failure = TakeInputs(op, &it, &timing, &input, &grad);
    if (!failure.ok()) break;
    timing.start_s = it.Now();
    RunOp(op, std::move(input), std::move(grad), &it);
    timing.end_s = it.Now();
    it.stats.ops.push_back(timing);
    Account({IsVocabPass(op.kind) ? kVocabKey : op.stage, op.microbatch}, &it);
    if (!it.comm_error.ok()) break;  // a send failed to start
    if (!IsVocabPass(op.kind)) {  // a sharded layer's collective inside the op
      failure = StageCommStatus(op);
      if (!failure.ok()) break;
    }
    if (on_op_done_) on_op_done_(it.stats.ops.size() - 1);
  }
  if (failure.ok() && it.comm_error.ok()) failure = EmbeddingEpilogue(&it);
  FinishCommunication(&it);
  if (failure.ok()) failure = it.comm_error;
  if (!failure.ok()) return failure;
  IterationStats stats = std::move(it.stats);
  stats.has_loss = plan_.stages.back().device == rank_;
  stats.loss = stats.has_loss ? it.loss_sum / M : 0;
  stats.wall_s = it.Now();
  stats.bytes_sent = it.sent;
  stats.bytes_received = it.received;
  stats.process_cpu_s = ClockSeconds(CLOCK_PROCESS_CPUTIME_ID) - process_cpu0;
  stats.compute_thread_cpu_s = ThreadCpuSeconds() - thread_cpu0;
  return stats;
}

}  // namespace octopipe::executor
