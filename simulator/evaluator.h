// Evaluator: runs a fixed schedule against a PipelineProblem and reports timing and memory.
//
// Semantics (docs/architecture.md, "Simulator semantics"): F(s,m) <- F(s-1,m);
// B(s,m) <- B(s+1,m), and the last stage's B(s,m) <- F(s,m); W(s,m) <- B(s,m); R(s,m) <- F(s,m)
// and B(s,m) <- R(s,m) when stage s recomputes; plus each device's order. An edge between stages
// on different devices is a transfer of `latency + bytes / bandwidth` that overlaps compute.
// Without link contention the evaluation is one longest-path pass over the DAG in topological
// order, O(ops), over flat arrays; with contention it is an event-driven pass (O(ops log ops))
// in which the transfers on one directed link are served one at a time in order of readiness.
//
// Under vocabulary parallelism (PipelineProblem::vocab_parallel) every device also runs S and
// T passes of its vocabulary shard; the broadcast of the last hidden state is a transfer per
// device and the all-reduce a barrier of vocab_allreduce_s after the last S of the micro-batch
// (pipeline_rules.h), so the pass costs O(ops + devices^2 x micro-batches). With the input
// embedding split too (embed_split), a device's part of the iteration starts
// DeviceEarliestStart before its first op may and ends at DeviceEnd, and its steady-state
// period is DevicePeriod (pipeline_rules.h): the iteration times, and the busy times (its
// lookups and scatter-adds), include them; op times, transfers and the critical path are the
// ops'.
//
// A schedule whose device orders contradict the data dependencies is a deadlock; Evaluate
// returns kInvalidArgument naming the ops on the cycle. Missing, duplicate or misplaced ops are
// also kInvalidArgument, naming the op.
//
// Layout (for speed at thousands of devices): Prepare turns the schedule into one 32-byte node
// per op in schedule order — its earliest start, unresolved inputs, a (kind, stage) index into
// small per-call tables of durations and activation deltas, and the schedule positions of its
// data successors with an index into a small table of edge delays — so the DAG pass touches
// one cache line per op and one per successor, and never looks an op up by id. The pass resets
// each node as it runs it, so the next call starts without a clearing pass. Prepare's
// structural work (validation, positions, successors) is kept while the schedule and the
// problem's shape (devices, stages, micro-batches, placement, recompute, vocab_parallel) stay
// the same, which it checks by comparing them; durations, transfer times, memory and the rest
// of the problem's numbers are read afresh on every call.
//
// Stopping: EvalOptions::should_stop, when set, is polled every kStopPollOps ops of a pass (and
// of preparing a new schedule), so an evaluation shorter than that never polls; when it returns
// true the evaluation returns kDeadlineExceeded, and the next call starts clean.
//
// Thread safety: an Evaluator owns scratch buffers reused across calls (no allocation per op
// once warmed up); use one per thread.
#ifndef OCTOPIPE_SIMULATOR_EVALUATOR_H_
#define OCTOPIPE_SIMULATOR_EVALUATOR_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "absl/status/statusor.h"
#include "core/schedule.h"
#include "simulator/pipeline_rules.h"
#include "simulator/problem.h"

namespace octopipe {

struct EvalOptions {
  bool timeline = false;       // fill op/transfer start and end times
  bool critical_path = false;  // fill the critical path (implies tracking predecessors)
  // Polled every kStopPollOps ops of one evaluation (not per op); true stops it with
  // kDeadlineExceeded (a search's budget or a cancelled request). Null: never stops. Not owned.
  const std::function<bool()>* should_stop = nullptr;
};

// Ops an evaluation runs between two polls of EvalOptions::should_stop.
inline constexpr int32_t kStopPollOps = 4096;

struct DeviceResult {
  double busy_s = 0;
  double first_start_s = 0;  // 0 for a device without ops
  double last_end_s = 0;
  double bubble_ratio = 0;               // 1 - busy / synchronous iteration time
  double steady_state_bubble_ratio = 0;  // 1 - busy / steady-state iteration time
  double peak_memory_bytes = 0;          // static + peak live activations
  bool fits_memory = true;
};

struct TransferRecord {
  int32_t from_device = 0;
  int32_t to_device = 0;
  Op consumer;  // the op that waits for it (F of the next stage or B of the previous one)
  double bytes = 0;
  double start_s = 0;
  double end_s = 0;
};

struct CriticalPathEntry {
  int32_t device = 0;
  Op op;
  double start_s = 0;
  double end_s = 0;
  bool waited_on_transfer = false;  // its start was set by a transfer into it
};

struct SimResult {
  double iteration_time_s = 0;                // synchronous: first op start to last op end
  double steady_state_iteration_time_s = 0;   // longest per-device span
  double bubble_ratio = 0;                    // 1 - sum busy / (devices * iteration time)
  double steady_state_bubble_ratio = 0;
  double tokens_per_s = 0;  // per pipeline, synchronous iteration
  bool fits_memory = true;
  std::vector<DeviceResult> devices;
  // With EvalOptions::timeline: op_start_s[d][i] / op_end_s[d][i] for schedule.ops[d][i].
  std::vector<std::vector<double>> op_start_s;
  std::vector<std::vector<double>> op_end_s;
  std::vector<TransferRecord> transfers;
  std::vector<CriticalPathEntry> critical_path;  // in time order
};

// Device d's peak live activations: its peak memory less the weights, gradients and optimizer
// state of its stages (what the executor measures as peak_activation_bytes).
inline double PeakActivationBytes(const PipelineProblem& pb, const SimResult& r, int d) {
  const double static_bytes =
      d < static_cast<int>(pb.static_bytes.size()) ? pb.static_bytes[d] : 0.0;
  return r.devices[d].peak_memory_bytes - static_bytes;
}

class Evaluator {
 public:
  Evaluator() = default;
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  absl::StatusOr<SimResult> Evaluate(const PipelineProblem& problem, const Schedule& schedule,
                                     const EvalOptions& options = {});

  // Only the synchronous and steady-state iteration times and memory fit, for search loops;
  // skips building per-device results. Same errors as Evaluate.
  struct Summary {
    double iteration_time_s = 0;
    double steady_state_iteration_time_s = 0;
    bool fits_memory = true;
    // Largest (peak - capacity) over devices: how far the worst device is over (<= 0: fits).
    double memory_overflow_bytes = -std::numeric_limits<double>::infinity();
  };
  // Of `options`, only should_stop is read.
  absl::StatusOr<Summary> EvaluateSummary(const PipelineProblem& problem,
                                          const Schedule& schedule,
                                          const EvalOptions& options = {});

 private:
  // One op of the DAG pass, in schedule order; 32 bytes, so a cache line holds two.
  struct Node {
    double ready;      // earliest start from the data predecessors resolved so far
    int32_t pending;   // data predecessors not yet resolved
    int32_t ks;        // index into kind_stage_
    int32_t succ[2];   // schedule positions of the data successors (-1: none; see kFanOut)
    int32_t edge[2];   // their entries in edges_
  };
  static_assert(sizeof(Node) == 32, "two nodes per cache line");
  // Per (kind, stage): what an op of that kind on that stage costs. Rebuilt on every call.
  struct KindStage {
    double duration = 0;
    double tail = 0;           // OpTail: communication-stream seconds after the compute
    double delta = 0;          // activation bytes it adds (> 0) or frees
    int32_t predecessors = 0;  // data predecessors
    int32_t kind = 0;          // OpKind (TailOverlapsNext)
  };
  static_assert(sizeof(KindStage) == 32, "two per cache line");
  // Per (kind, stage, successor slot), then per device for the vocabulary fan-outs: an edge's
  // delay and where it goes. Rebuilt on every call.
  struct Edge {
    double delay = 0;  // EdgeDelay: transfer, all-reduce or 0
    double bytes = 0;  // as the rules report it (< 0: within a stage, or the all-reduce)
    int32_t to_device = 0;
    bool transfer = false;  // IsTransferEdge
  };

  absl::Status Prepare(const PipelineProblem& problem, const Schedule& schedule,
                       const std::function<bool()>* should_stop);
  bool SameStructure(const PipelineProblem& problem, const Schedule& schedule) const;
  absl::Status BuildStructure(const PipelineProblem& problem, const Schedule& schedule,
                              const std::function<bool()>* should_stop);
  // BuildStructure's steps, forced inline into it.
  void ResetStructure(const PipelineProblem& problem, size_t n);
  absl::Status PlaceOps(const PipelineProblem& problem, const Schedule& schedule,
                        const std::function<bool()>* should_stop);
  absl::Status CheckOpsComplete(const PipelineProblem& problem) const;
  void IndexSpecialPositions();
  void BuildTables(const PipelineProblem& problem);
  absl::Status BuildNodes(const PipelineProblem& problem,
                          const std::function<bool()>* should_stop);
  void ResetNodes();
  // Under vocabulary parallelism every device has an S and a T pass per micro-batch.
  absl::Status CheckVocabPassesPresent(const PipelineProblem& problem) const;
  // Calls fn(consumer position, edge index) for every data successor of the op at `p`, in the
  // rules' order (ForEachDataSuccessor).
  template <typename Fn>
  void ForEachSuccessor(int32_t p, Fn&& fn) const;
  template <bool kTimes, bool kTrack>
  absl::Status RunDag(const std::function<bool()>* should_stop);
  // The DAG pass's arrays as raw pointers, taken once per run so the hot loop keeps them in
  // registers (its byte stores to queued_ could alias any member).
  struct DagView {
    Node* nodes;
    const KindStage* kind_stage;
    const Edge* edges;
    int32_t* cursor;
    uint8_t* queued;
    const int32_t* vocab_pos;
    int32_t last_b0;
    int P;
  };
  // One device's running state in the DAG pass, kept in locals while it runs its order.
  struct DeviceRun {
    double device_free, comm_free, live, max_live;
    TailWindow window;  // the previous op's tail, beside the next op (ComputeBesideTail)
  };
  // RunDag's helpers, all forced inline into it (the pass allocates nothing per op).
  template <bool kTimes, bool kTrack>
  void ResetDagRun();
  void PrefetchAhead(const DagView& v, size_t head) const;
  template <bool kTimes, bool kTrack>
  bool RunDevice(const DagView& v, int d, const std::function<bool()>* should_stop,
                 int64_t* poll_left, int64_t* processed);
  template <bool kTimes, bool kTrack>
  int32_t RunReadyOps(const DagView& v, int d, int32_t p, int32_t lim, int32_t hi,
                      DeviceRun* run);
  template <bool kTrack>
  void RelaxSuccessors(const DagView& v, int32_t p, int d, double end, const Node& links);
  template <bool kTrack>
  void Relax(const DagView& v, int32_t p, int d, double end, int32_t c, int32_t e);
  absl::Status DagCycle();
  // Under contention: an event is an op's start or a transfer's arrival at its link.
  struct Event {
    double time;
    int64_t seq;       // push order: ties in time go to the earlier push
    int32_t producer;  // for transfers; -1 for op starts
    int32_t op;
    int32_t edge;      // for transfers
    bool operator>(const Event& o) const {
      return time != o.time ? time > o.time : seq > o.seq;
    }
  };
  // The contention pass's running state, kept in locals while it runs.
  struct EventRun {
    int64_t seq;  // of the next event pushed
    bool track_pred, log_transfers;
  };
  absl::Status RunEvents(const PipelineProblem& problem, bool track_pred, bool log_transfers,
                         const std::function<bool()>* should_stop);
  // RunEvents' helpers, forced inline into it but for ResolveInput (its comment says why); the
  // pass allocates nothing per op.
  void ResetEventRun(bool track_pred);
  void SeedEvents(EventRun* run);
  void PushEvent(const Event& e);
  void ResolveInput(int32_t c, double t, int32_t p, bool transfer, EventRun* run);
  void ServeTransfer(const Event& e, EventRun* run);
  void StartEventOp(const Event& e, EventRun* run);
  void FinishEventRun();
  absl::Status StoppedError() const;
  absl::Status CycleError(const PipelineProblem& problem, const Schedule& schedule) const;
  // Per-device activation peaks from the schedule order (the DAG pass computes them itself).
  void ComputeMemory();
  // Iteration times and memory fit of the last run; fills peak_.
  Summary Summarize(const PipelineProblem& problem);
  absl::Status Run(const PipelineProblem& problem, bool times, bool track_pred, bool log_transfers,
                   const std::function<bool()>* should_stop);
  // Evaluate's parts of the result, from the last run.
  void FillDeviceResults(const PipelineProblem& problem, SimResult* r) const;
  void FillTimeline(const PipelineProblem& problem, const Schedule& schedule, SimResult* r) const;
  void TraceCriticalPath(const Schedule& schedule, SimResult* r) const;

  // Structure, kept while SameStructure holds.
  bool prepared_ = false;
  int P_ = 0, S_ = 0, M_ = 0, stage_ids_ = 0;
  bool vocab_ = false;
  std::vector<int32_t> stage_device_;
  std::vector<uint8_t> recompute_;
  std::vector<int32_t> pos_;  // by op id = (stage * M + microbatch) * kNumOpKinds + kind; -1 absent
  // Indexed by flat position (device 0's order, then device 1's, ...).
  std::vector<Op> ops_;
  std::vector<int32_t> device_;
  std::vector<int32_t> device_offset_;
  std::vector<int32_t> vocab_pos_;  // (micro-batch * P + device) * 2 + {0: S, 1: T}
  int32_t last_b0_pos_ = -1;        // stage 0's last B or BW in its device's order
  std::vector<Node> nodes_;  // one per op, then a sentinel
  bool dirty_ = true;  // nodes_ not in their initial state (a run stopped, failed or used events)

  // Per call.
  std::vector<double> device_start_;  // DeviceEarliestStart per device
  std::vector<KindStage> kind_stage_;
  std::vector<double> tail_share_;  // per kind_stage_ entry: TailComputeShare of its stage
  std::vector<Edge> edges_;
  int32_t fanout_s_edges_ = 0, fanout_t_edges_ = 0;  // first edges_ entry of each fan-out

  // Per run.
  std::vector<double> start_;  // with times
  std::vector<double> end_;
  std::vector<int32_t> pred_;  // flat position of the predecessor that set the start
  std::vector<uint8_t> pred_transfer_;
  std::vector<int32_t> cursor_;  // per device: next op to run
  std::vector<double> device_free_;
  // Per device: when its communication stream is free (OpTail; device_start_ when no op has
  // a tail). A device's part of the iteration ends at the later of the two.
  std::vector<double> comm_free_;
  // Per device: the tail its next op runs beside (TailWindow; none when to <= from).
  std::vector<TailWindow> tail_window_;
  std::vector<double> compute_end_;  // with times: end_ without the op's tail
  std::vector<double> live_, max_live_;
  std::vector<double> first_start_;
  double b0_end_ = 0;  // end of stage 0's last backward (DeviceEnd)
  std::vector<int32_t> worklist_;  // devices that may advance
  std::vector<uint8_t> queued_;
  // Under contention: the event heap and each directed link's next free time.
  std::vector<Event> heap_;
  std::vector<double> link_free_;
  std::vector<TransferRecord> transfer_log_;  // served transfers under contention
  std::vector<double> peak_;                  // per device, of the last run
  int64_t run_ops_ = 0;                       // ops run before a stop, for its message
};

// Convenience: a fresh Evaluator, full result.
absl::StatusOr<SimResult> Simulate(const PipelineProblem& problem, const Schedule& schedule,
                                   const EvalOptions& options = {});

}  // namespace octopipe

#endif  // OCTOPIPE_SIMULATOR_EVALUATOR_H_
