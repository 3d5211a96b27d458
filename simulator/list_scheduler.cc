#include "simulator/list_scheduler.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <queue>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "simulator/pipeline_rules.h"
#include "simulator/vocab_parallel.h"

namespace octopipe {

// How often ListSchedulerOptions::should_stop is polled (emitted ops), as the Evaluator does.
constexpr size_t kListStopPollOps = 4096;
namespace {

constexpr int kF = static_cast<int>(OpKind::kF);
constexpr int kW = static_cast<int>(OpKind::kW);
constexpr double kInf = std::numeric_limits<double>::infinity();

absl::Status ValidateInput(const PipelineProblem& pb, const ListSchedulerOptions& options) {
  const int P = pb.num_devices, S = pb.num_stages, M = pb.num_microbatches;
  if (P <= 0 || S <= 0 || M <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("list scheduler: devices (", P,
                                                   "), stages (", S, ") and micro-batches (",
                                                   M, ") must all be > 0"));
  }
  if (absl::Status vocab = ValidateVocabParallel(pb); !vocab.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("list scheduler: ", vocab.message()));
  }
  for (const auto& [name, size] : {std::pair{"activation_cap_bytes", options.activation_cap_bytes.size()},
                                    std::pair{"inflight_cap", options.inflight_cap.size()}}) {
    if (size != 0 && size != static_cast<size_t>(P)) {
      return absl::InvalidArgumentError(absl::StrCat("list scheduler: ", name, " has ", size,
                                                     " entries for ", P, " devices"));
    }
  }
  return absl::OkStatus();
}

// One run of the list scheduler: the state of the greedy construction and its steps. The data
// edges and per-op costs come from pipeline_rules.h; R is not a node here (it is emitted right
// before its backward), so edges into and out of R are skipped.
class ListScheduleRun {
 public:
  ListScheduleRun(const PipelineProblem& pb, const SchedulePolicy& policy,
                  const ListSchedulerOptions& options);

  absl::StatusOr<ListScheduleResult> Run();

 private:
  // A vocabulary pass's stage is its device, so stage ids span num_stage_ids() (SI_).
  int32_t IdOf(int kind, int s, int m) const { return (kind * SI_ + s) * M_ + m; }
  int KindOf(int32_t id) const { return id / (SI_ * M_); }
  int StageOf(int32_t id) const { return (id / M_) % SI_; }
  int DeviceOf(int32_t id) const {
    return OpDevice(pb_, static_cast<OpKind>(KindOf(id)), StageOf(id));
  }
  int MicrobatchOf(int32_t id) const { return id % M_; }
  OpKind BackwardKind() const { return split_ ? OpKind::kB : OpKind::kBW; }

  // Pending data predecessors of every op; the first forward of stage 0 is available.
  void InitPending();
  // Whether device d may start op `id` under its in-flight and activation caps.
  bool CapOk(int d, int32_t id) const;
  // One data predecessor of c finished, its output available at t.
  void Release(int32_t c, double t);
  // Recomputes device d's earliest possible start and pushes it on the heap.
  void Refresh(int d);
  // Pops the device with the earliest possible start; false when none can start anything.
  bool PopEarliestDevice(int* d, double* t);
  // Why no device can proceed: kResourceExhausted naming the blocked device and its caps.
  absl::Status BlockedError() const;
  // Index in available_[d] of the ready op the policy ranks first at time t.
  size_t PickOp(int d, double t) const;
  // Appends op `id` (and its R under recompute) to device d's order starting no earlier than
  // t, updates memory and in-flight counts; returns its end time.
  double Emit(int d, double t, int32_t id);
  // Releases the data successors of op `id`, which ended at `finish`.
  void ReleaseSuccessors(int32_t id, double finish);
  // Refreshes the devices whose state changed in the step that ran on device d.
  void RefreshAfterStep(int d);

  const PipelineProblem& pb_;
  const SchedulePolicy& policy_;
  const ListSchedulerOptions& options_;
  const int P_, S_, M_, SI_;
  const bool split_;

  std::vector<int32_t> pending_;  // a vocabulary T pass and the last backward wait on P ops
  std::vector<double> ready_;
  std::vector<std::vector<int32_t>> available_;
  std::vector<double> free_at_, live_;
  std::vector<int> inflight_;
  // In-flight caps are a heuristic budget, not a hard limit: when every device is blocked by
  // them (e.g. a device holding the first and the last stage has filled its budget with
  // early micro-batches before the first one comes back), one op is let through.
  bool relax_inflight_ = false;
  std::vector<int> touched_;  // devices whose ready set grew during this step
  double stage0_backward_end_ = 0;  // the last B/BW of stage 0 (DeviceEnd)
  // Ready W ops queue per stage with only the oldest in the ready list: ZeroBubble-style orders
  // defer W, and scanning a long tail of interchangeable W ops at every step would make the
  // scheduler O(ops x M).
  std::vector<std::deque<int32_t>> w_waiting_;
  std::vector<uint8_t> w_listed_;
  // Each device's earliest possible start (free time vs. its ready ops that fit), kept in a
  // min-heap with lazy deletion, so a step costs O(ready ops on one device + log P).
  std::vector<double> key_;
  std::vector<uint32_t> version_;
  using Entry = std::tuple<double, int, uint32_t>;  // (key, device, version)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap_;
  ListScheduleResult result_;
};

ListScheduleRun::ListScheduleRun(const PipelineProblem& pb, const SchedulePolicy& policy,
                                 const ListSchedulerOptions& options)
    : pb_(pb),
      policy_(policy),
      options_(options),
      P_(pb.num_devices),
      S_(pb.num_stages),
      M_(pb.num_microbatches),
      SI_(pb.num_stage_ids()),
      split_(options.split_backward) {
  const size_t num_ids = static_cast<size_t>(kNumOpKinds) * SI_ * M_;
  pending_.assign(num_ids, 0);
  ready_.assign(num_ids, 0.0);
  available_.resize(P_);
  free_at_.resize(P_);
  for (int d = 0; d < P_; ++d) free_at_[d] = DeviceEarliestStart(pb, d);
  live_.assign(P_, 0.0);
  inflight_.assign(P_, 0);
  w_waiting_.resize(S_);
  w_listed_.assign(S_, 0);
  key_.assign(P_, kInf);
  version_.assign(P_, 0);
  result_.schedule.ops.resize(P_);
}

void ListScheduleRun::InitPending() {
  auto backward = [&](int) { return BackwardKind(); };
  for (int s = 0; s < S_; ++s) {
    for (int m = 0; m < M_; ++m) {
      for (OpKind kind : {OpKind::kF, BackwardKind(), OpKind::kW}) {
        if (kind == OpKind::kW && !split_) continue;
        int count = 0;
        ForEachDataPredecessor(pb_, kind, s, backward, [&](OpKind k, int) {
          if (k != OpKind::kR) ++count;
        });
        pending_[IdOf(static_cast<int>(kind), s, m)] = count;
      }
    }
  }
  if (pb_.vocab_parallel) {
    for (int d = 0; d < P_; ++d) {
      for (int m = 0; m < M_; ++m) {
        for (OpKind kind : {OpKind::kS, OpKind::kT}) {
          pending_[IdOf(static_cast<int>(kind), d, m)] = DataPredecessorCount(pb_, kind, d);
        }
      }
    }
  }
  // Micro-batches enter stage 0 in order (they are interchangeable there): only the next
  // one is ever available, which keeps the first device's ready list short.
  available_[pb_.stage_device[0]].push_back(IdOf(kF, 0, 0));
}

bool ListScheduleRun::CapOk(int d, int32_t id) const {
  if (KindOf(id) != kF) return true;  // backward work always proceeds: it frees memory
  const int s = StageOf(id);
  if (!relax_inflight_ && !options_.inflight_cap.empty() &&
      inflight_[d] >= options_.inflight_cap[d]) {
    return false;
  }
  if (!options_.activation_cap_bytes.empty()) {
    const double alloc = ActivationDelta(pb_, OpKind::kF, s);
    if (live_[d] + alloc > options_.activation_cap_bytes[d] * (1 + 1e-12)) return false;
  }
  return true;
}

void ListScheduleRun::Release(int32_t c, double t) {
  ready_[c] = std::max(ready_[c], t);
  if (--pending_[c] != 0) return;
  const int st = StageOf(c);
  const int dev = DeviceOf(c);
  if (KindOf(c) == kW) {
    if (w_listed_[st]) {
      w_waiting_[st].push_back(c);
      return;
    }
    w_listed_[st] = 1;
  }
  available_[dev].push_back(c);
  touched_.push_back(dev);
}

void ListScheduleRun::Refresh(int d) {
  double k = kInf;
  for (int32_t id : available_[d]) {
    if (CapOk(d, id)) k = std::min(k, std::max(free_at_[d], ready_[id]));
  }
  key_[d] = k;
  ++version_[d];
  if (k < kInf) heap_.push(Entry{k, d, version_[d]});
}

bool ListScheduleRun::PopEarliestDevice(int* d, double* t) {
  while (!heap_.empty()) {
    const auto [k, dev, v] = heap_.top();
    heap_.pop();
    if (v != version_[dev]) continue;
    *d = dev;
    *t = k;
    return true;
  }
  return false;
}

absl::Status ListScheduleRun::BlockedError() const {
  for (int d = 0; d < P_; ++d) {
    if (!available_[d].empty()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "list scheduler: device ", d, " cannot start any ready op within its memory cap (",
          options_.inflight_cap.empty()
              ? std::string("no in-flight cap")
              : absl::StrCat("in-flight cap ", options_.inflight_cap[d]),
          options_.activation_cap_bytes.empty()
              ? std::string()
              : absl::StrCat(", activation cap ", options_.activation_cap_bytes[d], " bytes"),
          ") and no other device can make progress"));
    }
  }
  return absl::InternalError("list scheduler: no op is available");
}

size_t ListScheduleRun::PickOp(int d, double t) const {
  const std::vector<int32_t>& avail = available_[d];
  const DeviceState state{d, t, live_[d], inflight_[d]};
  size_t pick = avail.size();
  double pick_priority = -kInf;
  for (size_t i = 0; i < avail.size(); ++i) {
    const int32_t id = avail[i];
    if (ready_[id] > t || !CapOk(d, id)) continue;
    const Op op{static_cast<OpKind>(KindOf(id)), StageOf(id), MicrobatchOf(id)};
    const double pr = policy_.Priority(pb_, op, ready_[id], state);
    if (pick == avail.size() || pr > pick_priority ||
        (pr == pick_priority && id < avail[pick])) {
      pick = i;
      pick_priority = pr;
    }
  }
  return pick;
}

double ListScheduleRun::Emit(int d, double t, int32_t id) {
  const OpKind kind = static_cast<OpKind>(KindOf(id));
  const int s = StageOf(id);
  const int m = MicrobatchOf(id);
  std::vector<Op>& order = result_.schedule.ops[d];
  double start = t;
  if (IsBackward(kind) && pb_.recompute[s]) {
    // R needs only its own F, done long before, so it runs as soon as the device is free
    // (filling any wait for the gradient); B follows it and its upstream gradient.
    order.push_back(Op{OpKind::kR, s, m});
    live_[d] += ActivationDelta(pb_, OpKind::kR, s);
    start = std::max(t, free_at_[d] + OpDuration(pb_, OpKind::kR, s));
  }
  order.push_back(Op{kind, s, m});
  live_[d] += ActivationDelta(pb_, kind, s);
  switch (kind) {
    case OpKind::kF:
      ++inflight_[d];
      break;
    case OpKind::kB:
      if (options_.inflight_until_b) --inflight_[d];
      break;
    case OpKind::kW:
      if (w_waiting_[s].empty()) {
        w_listed_[s] = 0;
      } else {
        available_[d].push_back(w_waiting_[s].front());
        w_waiting_[s].pop_front();
      }
      if (!options_.inflight_until_b) --inflight_[d];
      break;
    case OpKind::kS:
    case OpKind::kT:
      break;  // vocabulary passes are not a stage's micro-batch in flight
    default:  // BW
      --inflight_[d];
      break;
  }
  const double finish = start + OpDuration(pb_, kind, s);
  free_at_[d] = finish;
  if (s == 0 && IsBackward(kind)) stage0_backward_end_ = std::max(stage0_backward_end_, finish);
  return finish;
}

void ListScheduleRun::ReleaseSuccessors(int32_t id, double finish) {
  const OpKind kind = static_cast<OpKind>(KindOf(id));
  const int s = StageOf(id);
  const int m = MicrobatchOf(id);
  if (kind == OpKind::kF && s == 0 && m + 1 < M_) {
    available_[pb_.stage_device[0]].push_back(IdOf(kF, 0, m + 1));  // ready from the start
  }
  auto backward = [&](int) { return BackwardKind(); };
  ForEachDataSuccessor(pb_, kind, s, backward, [&](OpKind k, int to_stage, double bytes) {
    if (k == OpKind::kR) return;
    const int a = OpDevice(pb_, kind, s), b = OpDevice(pb_, k, to_stage);
    Release(IdOf(static_cast<int>(k), to_stage, m), finish + EdgeDelay(pb_, bytes, a, b));
  });
}

void ListScheduleRun::RefreshAfterStep(int d) {
  if (relax_inflight_) {
    relax_inflight_ = false;
    for (int dev = 0; dev < P_; ++dev) Refresh(dev);
  } else {
    Refresh(d);
    for (int dev : touched_) {
      if (dev != d) Refresh(dev);
    }
  }
  touched_.clear();
}

absl::StatusOr<ListScheduleResult> ListScheduleRun::Run() {
  InitPending();
  for (int d = 0; d < P_; ++d) Refresh(d);
  const size_t total = static_cast<size_t>(S_) * M_ * (split_ ? 3 : 2) +
                       (pb_.vocab_parallel ? static_cast<size_t>(P_) * M_ * 2 : 0);
  double makespan = 0;
  for (size_t emitted = 0; emitted < total;) {
    int d = -1;
    double t = kInf;
    if (!PopEarliestDevice(&d, &t)) {
      if (!relax_inflight_ && !options_.inflight_cap.empty()) {
        relax_inflight_ = true;
        for (int dev = 0; dev < P_; ++dev) Refresh(dev);
        continue;
      }
      return BlockedError();
    }
    const size_t pick = PickOp(d, t);
    std::vector<int32_t>& avail = available_[d];
    const int32_t id = avail[pick];
    avail[pick] = avail.back();
    avail.pop_back();
    const double finish = Emit(d, t, id);
    ++emitted;
    if (options_.should_stop != nullptr && emitted % kListStopPollOps == 0 &&
        (*options_.should_stop)()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "list scheduling stopped after ", emitted, " of ", total, " ops (time budget)"));
    }
    makespan = std::max(makespan, finish);
    ReleaseSuccessors(id, finish);
    RefreshAfterStep(d);
  }
  // The iteration begins at 0: stage 0's first F then (or after DeviceEarliestStart, and each
  // device's part of it ends at DeviceEnd, when the embedding is split).
  for (int d = 0; d < P_; ++d) {
    makespan = std::max(makespan, DeviceEnd(pb_, d, free_at_[d], stage0_backward_end_));
  }
  result_.iteration_time_s = makespan;
  return std::move(result_);
}

}  // namespace

double WeightedPolicy::Priority(const PipelineProblem& problem, const Op& op, double ready_s,
                                const DeviceState& state) const {
  (void)problem;
  (void)state;
  double bonus = 0;
  if (op.kind == OpKind::kF) {
    if (static_cast<size_t>(op.stage) < forward_bonus.size()) bonus = forward_bonus[op.stage];
  } else if (op.kind == OpKind::kB || op.kind == OpKind::kBW) {
    if (static_cast<size_t>(op.stage) < backward_bonus.size()) bonus = backward_bonus[op.stage];
  }
  return kind_weight[static_cast<int>(PolicyKind(op.kind))] - microbatch_weight * op.microbatch +
         stage_weight * op.stage - age_weight * ready_s + bonus;
}

void FeedBonuses(const PipelineProblem& problem, double weight, std::vector<double>* forward,
                 std::vector<double>* backward) {
  const int S = problem.num_stages, P = problem.num_devices;
  forward->assign(S, 0.0);
  backward->assign(S, 0.0);
  if (weight == 0 || S < 1 || P < 1) return;
  std::vector<double> start(P, -1.0), load(P, 0.0);
  double below = 0;
  for (int s = 0; s < S; ++s) {
    const int d = problem.stage_device[s];
    if (start[d] < 0) start[d] = below;
    load[d] += problem.forward_s[s] + problem.backward_input_s[s] + problem.weight_grad_s[s];
    below += problem.forward_s[s];
  }
  std::vector<double> tight(P, 0.0);
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (int d = 0; d < P; ++d) {
    if (start[d] < 0) continue;
    tight[d] = start[d] + problem.num_microbatches * load[d];
    lo = std::min(lo, tight[d]);
    hi = std::max(hi, tight[d]);
  }
  if (!(hi > lo)) return;
  for (int d = 0; d < P; ++d) tight[d] = start[d] < 0 ? 0.0 : (tight[d] - lo) / (hi - lo);
  for (int s = 0; s < S; ++s) {
    (*forward)[s] = weight * tight[problem.stage_device[s + 1 < S ? s + 1 : s]];
    if (s > 0) (*backward)[s] = weight * tight[problem.stage_device[s - 1]];
  }
}

absl::StatusOr<ListScheduleResult> ListSchedule(const PipelineProblem& pb, const SchedulePolicy& policy,
                                      const ListSchedulerOptions& options) {
  if (absl::Status valid = ValidateInput(pb, options); !valid.ok()) return valid;
  ListScheduleRun run(pb, policy, options);
  return run.Run();
}

}  // namespace octopipe
