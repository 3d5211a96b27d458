// PipelineEngine: runs one rank's compute-op list from a plan — any partition, any placement
// (several non-adjacent stages per rank), any valid schedule with B/W split and recompute.
//
// Communication is derived, never stored: F(s, m) sends its output to the rank of stage s+1
// and B/BW(s, m) its input gradient to the rank of stage s-1 whenever that rank is another one.
// Deadlock freedom does not depend on the order (see docs/architecture.md, Executor): at the start of an iteration the
// engine posts every receive the iteration expects (computed from the peers' op lists, in each
// peer's send order) into buffers of their own, and a send never blocks the computing thread
// (it is started, and waited for at the end of the iteration); a compute op waits only for its
// own inputs. So a schedule whose DAG has no cycle always completes, and a dead
// peer surfaces as an error from the transport's timeout, never as a hang. On Gloo the messages
// are the transport's own asynchronous ones (no thread of the engine's: Gloo's event loop reads
// into the posted buffers, the computing thread writes the sends); on other transports
// AsyncMessages runs them on a sending and a receiving thread per peer (executor/async_messages.h).
// A sent tensor is held until the end of the iteration.
//
// Measurement: every op is timed (OpTiming, with the time it waited for a message) and so is
// each layer's share of it (LayerOpTiming: F, B, W, R per layer and micro-batch); the engine
// accounts the activation bytes the rank holds between ops (peak_activation_bytes). These are
// what `octopipe profile` turns into a measured model and what `train --planner` reports.
//
// Message tag of a transfer: ((microbatch * stages + stage) * 2 + direction), stage being the
// producer's stage. Every activation and gradient is a [batch*seq_len, hidden] fp32 tensor.
//
// Vocabulary parallelism (plan.vocab_parallel; executor/layers/vocab_head.h): every rank holds
// one vocabulary shard of the head (its layer L-1 is a VocabShardHead); the rank of the last
// stage (the norm holder) runs the head's norm in F(S-1). The edges of the simulator's rules
// (simulator/pipeline_rules.h) become messages, sent like the others:
//   F(S-1, m) -> S(d, m)     n [T, hidden], from the norm holder to every other rank
//   S(d, m)   -> T(d', m)    the shard's [T, 3] softmax stats, to every other rank
//   S(d, m)   -> back(S-1, m)  the stats and the shard's partial input gradient [2T, hidden],
//                            to the norm holder
// so the all-reduce of max, sum and input gradient is an all-gather of point-to-point
// messages, each rank combining the shards in shard order (deterministic, and free of any
// cross-rank ordering a blocking collective would impose on the schedules). Their tags follow
// the transfer tags: base + (microbatch * ranks + sending shard) * 3 + message kind. S and T
// are timed as ops (OpTiming) only; the head's LayerOpTiming on the norm holder is its norm.
// Shards are the plan's (Plan::vocab_shard_columns, the simulator's speed-sized split; equal
// for a plan without them): BuildRankLayers cuts each rank's VocabShardHead to them.
// When the model's first layer is its embedding, every rank also holds the same vocabulary
// range of it (layer 0 is a VocabShardEmbedding on every rank; the simulator's model and the
// schedule's reasons are in simulator/vocab_parallel.h), with two more messages:
//   prologue  -> F(0, m)   every rank but stage 0's (r0) makes its partial embedding of every
//                          micro-batch before its first op, in the order of r0's F(0, .), and
//                          sends each [T, hidden] to r0, which adds them up in rank order as
//                          stage 0's input (its own shard's rows go in in F)
//   B/BW(0, m) -> epilogue r0 sends the gradient of the embedding's output [T, hidden] to every
//                          other rank, which scatter-adds them into its shard's gradient after
//                          its last op, in micro-batch order (r0 does its own rows in W/BW)
// Their tags are vocabulary tags of kinds kEmbed and kEmbedGrad (the sending shard's).
// Not thread-safe: one engine per rank, RunIteration called from one thread.
#ifndef OCTOPIPE_EXECUTOR_ENGINE_H_
#define OCTOPIPE_EXECUTOR_ENGINE_H_

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/pipeline_edges.h"
#include "core/plan.h"
#include "executor/async_messages.h"
#include "executor/layer.h"
#include "executor/layers/vocab_embedding.h"
#include "executor/layers/vocab_head.h"
#include "executor/tensor.h"
#include "executor/transport.h"

namespace octopipe::executor {

struct OpTiming {
  Op op;
  double start_s = 0;  // since the iteration began
  double end_s = 0;
  // Seconds the op blocked waiting for a message before start_s (0 when its input was local
  // or had already arrived). start_s - previous op's end_s - wait_s is the engine's own time
  // between ops.
  double wait_s = 0;
};

// One layer's share of one op: F, B, W or R of `layer` for `microbatch` (a BW op yields one B
// and one W entry per layer). `seconds` is the layer's own compute, so the op's duration minus
// the sum of its layers' seconds is the engine's per-op overhead.
struct LayerOpTiming {
  int layer = 0;
  int stage = 0;
  int microbatch = 0;
  OpKind kind = OpKind::kF;  // kF, kB, kW or kR
  double seconds = 0;
  // The computing thread's CPU time over those seconds: below `seconds` when the thread waited
  // for its core (other threads or processes ran on it). Time the machine's host takes from a
  // virtual CPU is not seen here.
  double cpu_seconds = 0;
  // F, R and B: the bytes the layer's context holds for this micro-batch when the op's share of
  // the layer ends (ContextBytes: what F keeps for B, what B keeps for W); -1 for W.
  int64_t held_bytes = -1;
};

struct IterationStats {
  bool has_loss = false;  // true on the rank that holds the head
  double loss = 0;        // mean over micro-batches
  double wall_s = 0;
  std::vector<OpTiming> ops;
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  // Per-layer op times, in execution order.
  std::vector<LayerOpTiming> layer_ops;
  // The engine's own accounting of the activation bytes this rank holds between ops: every
  // tensor and index saved in a layer context (from F until its W / BW) plus the stage inputs
  // kept for recompute. Not RSS; received messages and the weights are not counted.
  int64_t peak_activation_bytes = 0;
  // With a split embedding on a rank other than stage 0's: seconds of computing its partial
  // embeddings (before its first op) and of scatter-adding the received gradients (after its
  // last op, waits for them not counted); 0 otherwise.
  double embed_lookup_s = 0;
  double embed_scatter_s = 0;
  // std::chrono::steady_clock time of the iteration's start, in seconds since the clock's
  // epoch: on one machine it is the same clock in every process, so ranks' op times can be
  // compared (e.g. a message's producer end with its consumer's start).
  double start_steady_s = 0;
  // CPU seconds over the iteration: the whole process, and the thread that ran RunIteration
  // (the ops). The difference is what the communication threads (sending, receiving, Gloo's
  // event loop) used: `messages` (sent + received by this rank) cost that much CPU, taken from
  // some core that would otherwise run compute.
  double process_cpu_s = 0;
  double compute_thread_cpu_s = 0;
  int messages = 0;
  // Data parallelism (executor/layout_trainer.h): seconds the rank waited after its last op for
  // its gradient all-reduces to finish (what the overlap did not hide), and the seconds the
  // all-reduces themselves took on the communication thread.
  double grad_sync_wait_s = 0;
  double grad_sync_s = 0;
  // What the rank's other threads used: process - computing thread, never negative. Only
  // meaningful when the rank is a process of its own (not an inproc thread).
  double comm_cpu_s() const { return std::max(0.0, process_cpu_s - compute_thread_cpu_s); }
};

// Bytes a layer context holds (saved tensors as fp32, saved indices as int32).
int64_t ContextBytes(const LayerContext& ctx);
// Bytes of a layer's weights (fp32), as this rank holds them.
int64_t ParamBytes(Layer& layer);

class PipelineEngine {
 public:
  // `layers` holds the model's layers by index; only those of this rank's stages are used (the
  // others may be null). The engine does not own them.
  PipelineEngine(const Plan& plan, int rank, std::vector<std::unique_ptr<Layer>>* layers,
                 Transport* transport, int tokens_per_microbatch, int hidden);

  // Data parallelism (executor/layout_trainer.h): the loss of each micro-batch is scaled by
  // 1 / `global_microbatches` (the layout's global batch) instead of 1 / the plan's micro-batches,
  // so summing the replicas' gradients gives the global batch's. Called before any iteration.
  void set_loss_scale_microbatches(int global_microbatches) {
    loss_scale_microbatches_ = global_microbatches;
  }
  // Called on the computing thread after each op of this rank's list completes (with its index
  // in plan.schedule.ops[rank]), e.g. to start a layer's gradient all-reduce as soon as its last
  // weight-gradient op is done.
  void set_on_op_done(std::function<void(size_t op_index)> on_op_done) {
    on_op_done_ = std::move(on_op_done);
  }

  // Checks that the plan is runnable here: every stage's layers exist on this rank, the
  // transport has the plan's number of ranks. kInvalidArgument / kFailedPrecondition.
  absl::Status Validate() const;

  // One iteration over `microbatches` (index = micro-batch id; every rank gets all of them,
  // the first stage reads tokens, the head reads targets). Gradients accumulate into the
  // layers' gradient buffers (zero them before, step the optimizer after). Errors: a transport
  // failure names the peer and the op that waited.
  absl::StatusOr<IterationStats> RunIteration(const std::vector<MicroBatch>& microbatches);

 private:
  struct Message {
    int peer;
    uint32_t tag;
    int rows;  // the fp32 tensor it carries
    int cols;
  };
  // The messages of vocabulary parallelism (see the top comment).
  enum class VocabMessage { kInput = 0, kStats = 1, kGrad = 2, kEmbed = 3, kEmbedGrad = 4 };
  static constexpr int kVocabMessageKinds = 5;
  uint32_t Tag(int stage, int microbatch, int direction) const;
  uint32_t VocabTag(int microbatch, int shard, VocabMessage kind) const;
  Message VocabMessageTo(int to, int microbatch, int shard, VocabMessage kind) const;
  // The rank of the last stage, which holds the head's norm.
  int NormHolder() const { return plan_.stages.back().device; }
  // This rank's shard of the head (null unless the plan is vocab_parallel and it is built).
  VocabShardHead* ShardHead() const;
  // This rank's shard of the embedding (null unless the plan is vocab_parallel and layer 0 is
  // one: the embedding is split), and the rank of stage 0, which runs the embedding's layer.
  VocabShardEmbedding* ShardEmbedding() const;
  int EmbeddingHolder() const { return plan_.stages.front().device; }
  // Validate's checks of a vocab_parallel plan.
  absl::Status ValidateVocabParallel() const;
  // Messages `from` sends to `to`, in `from`'s op order.
  std::vector<Message> SendsBetween(int from, int to) const;

  // The steps of RunIteration, over one iteration's state (defined in engine.cc).
  struct Iteration;
  // "rank R: sending to rank P failed: ..." (or receiving from), keeping s's code.
  absl::Status CommError(bool send, int peer, const absl::Status& s) const;
  // Posts every receive of the iteration (it->comm_error when one cannot start).
  void StartCommunication(Iteration* it);
  // Starts sending `t` (kept in the iteration until sent); nothing after a failure.
  void Send(int peer, uint32_t tag, Tensor t, Iteration* it);
  // Waits for every send (unless the iteration failed) and drops what is still in flight.
  void FinishCommunication(Iteration* it);
  // The op's activation input (F) or incoming gradient (B, BW), local or received; the time
  // spent waiting goes to timing->wait_s; an error names the op that waited.
  absl::Status TakeInputs(const Op& op, Iteration* it, OpTiming* timing, Tensor* input,
                          Tensor* grad);
  // Takes the received message `tag` into *out, counting the wait in timing->wait_s; an error
  // names the op and `what` it waited for.
  absl::Status Receive(const Op& op, uint32_t tag, const std::string& what, Iteration* it,
                       OpTiming* timing, Tensor* out);
  // The same for a wait outside an op: the error ends "(waiting for `waiter`)".
  absl::Status ReceiveTagged(uint32_t tag, const std::string& waiter, Iteration* it,
                             double* wait_s, Tensor* out);
  // The split embedding's work outside the ops: a rank's partials before its first op and its
  // scatter-adds of the received gradients after its last (see the top comment).
  void EmbeddingPrologue(Iteration* it);
  absl::Status EmbeddingEpilogue(Iteration* it);
  // The inputs of a vocabulary op: n for S, every shard's stats for T, and every shard's stats
  // and partial gradients for the last stage's backward (kept in the iteration's vocab state).
  absl::Status TakeVocabInputs(const Op& op, Iteration* it, OpTiming* timing, Tensor* input);
  // S and T of this rank's shard; the combined input gradient of the last stage's backward.
  void RunShardForward(int microbatch, const Tensor& n, Iteration* it);
  void RunShardWeight(int microbatch, Iteration* it);
  Tensor CombineHeadGradient(int microbatch, Iteration* it);
  // Runs the stage's layers forward (timed per layer as `kind`, F or R), keeping their contexts
  // for the backward.
  Tensor ForwardStage(int stage, int microbatch, const Tensor& input, OpKind kind,
                      Iteration* it);
  // Computes the op and hands its output to the next stage (local, or started as a message).
  void RunOp(const Op& op, Tensor input, Tensor grad, Iteration* it);
  // Where an F's output goes, along the edges that leave it (core/pipeline_edges.h): the next
  // stage's F (kept when it is this rank's, else sent), or every vocabulary shard's S.
  void RouteForwardOutput(const Op& op, Tensor out, Iteration* it);
  // A B's or BW's input gradient to the previous stage's backward (the kGradient edge).
  void RouteInputGradient(const Op& op, Tensor dy, Iteration* it);
  // The first communication failure of a sharded layer of the op's stage (Layer::comm_status),
  // naming the op and the layer.
  absl::Status StageCommStatus(const Op& op) const;
  int LossScale(int microbatches) const {
    return loss_scale_microbatches_ > 0 ? loss_scale_microbatches_ : microbatches;
  }
  // Re-measures the activation bytes held for (stage, micro-batch) after an op.
  void Account(const std::pair<int, int>& key, Iteration* it);
  // The plan's edges (core/pipeline_edges.h): what each op feeds, as the simulator costs it.
  PipelineShape Shape() const {
    return PipelineShape{plan_.num_stages(), plan_.num_devices, plan_.vocab_parallel,
                         recompute_.data()};
  }
  // The device of an op that consumes an edge: its stage's, a vocabulary pass's own.
  int ConsumerDevice(OpKind kind, int stage) const {
    return IsVocabPass(kind) ? stage : plan_.stages[stage].device;
  }

  const Plan& plan_;
  std::vector<uint8_t> recompute_;  // per stage, 1: it recomputes (for Shape)
  const int rank_;
  std::vector<std::unique_ptr<Layer>>* layers_;
  Transport* transport_;
  std::unique_ptr<AsyncMessages> messages_;
  const int tokens_;
  const int hidden_;
  int loss_scale_microbatches_ = 0;  // 0: the plan's micro-batches
  std::function<void(size_t)> on_op_done_;
};

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_ENGINE_H_
