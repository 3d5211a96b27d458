// The optimised Evaluator must give bit-identical results to (1) a frozen copy of the evaluator
// before its optimisation (evaluator_reference.h): every field of SimResult and Summary, the
// timelines, transfers, critical paths (ties included) and the exact error of an invalid
// schedule; and (2) a straightforward longest-path written here from the documented semantics
// (docs/architecture.md, "Simulator semantics": memoised recursion over explicit predecessors,
// no rules library), for the timing and memory without link contention.
//
// Seeded random problems: random placements (several stages per device, idle devices), costs
// (continuous, and on a coarse grid so ties are common), recompute, per-(stage, micro-batch)
// split or unsplit backward, op overheads, transfers, link contention, vocabulary parallelism;
// random deadlock-free orders, list-scheduled orders, classic orders, and mutated orders
// (deadlocks, missing, duplicate, misplaced ops). One Evaluator is reused across all of them
// (and the same schedule is re-run with new costs) so state carried between calls is covered.
#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "simulator/evaluator.h"
#include "simulator/evaluator_reference.h"
#include "simulator/list_scheduler.h"
#include "simulator/pipeline_rules.h"
#include "simulator/problem.h"
#include "simulator/schedules.h"

namespace octopipe {
namespace {

using evaluator_reference::ReferenceEvaluator;
using Rng = std::mt19937_64;

uint64_t Bits(double x) {
  uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

#define EXPECT_BITS_EQ(a, b) EXPECT_EQ(Bits(a), Bits(b)) << #a << " = " << (a) << " vs " << (b)

double Uniform(Rng& rng, double lo, double hi) {
  return std::uniform_real_distribution<double>(lo, hi)(rng);
}
int UniformInt(Rng& rng, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }
bool Chance(Rng& rng, double p) { return std::bernoulli_distribution(p)(rng); }

// Continuous values, or (when `coarse`) multiples of 0.25 including 0, so ties are common.
double Value(Rng& rng, bool coarse, double lo, double hi) {
  if (coarse) return 0.25 * UniformInt(rng, static_cast<int>(lo * 4), static_cast<int>(hi * 4));
  return Chance(rng, 0.05) ? 0.0 : Uniform(rng, lo, hi);
}

// Randomises every number of `pb` (shape kept): costs, memory, links, vocabulary passes.
void RandomiseCosts(Rng& rng, PipelineProblem* pb) {
  const bool coarse = Chance(rng, 0.4);
  const int S = pb->num_stages, P = pb->num_devices;
  const bool overhead = Chance(rng, 0.5);
  pb->op_overhead_s.clear();
  for (int s = 0; s < S; ++s) {
    pb->forward_s[s] = Value(rng, coarse, 0.1, 2);
    pb->backward_input_s[s] = Value(rng, coarse, 0.1, 2);
    pb->weight_grad_s[s] = Value(rng, coarse, 0.1, 2);
    pb->recompute_s[s] = Chance(rng, 0.5) ? pb->forward_s[s] : Value(rng, coarse, 0.1, 2);
    pb->activation_bytes[s] = Value(rng, coarse, 0, 100);
    pb->activation_bytes_w[s] = pb->activation_bytes[s] * Uniform(rng, 0, 1);
    pb->input_bytes[s] = pb->activation_bytes[s] * Uniform(rng, 0, 1);
    pb->output_bytes[s] = Value(rng, coarse, 0, 50);
    if (overhead) pb->op_overhead_s.push_back(Value(rng, coarse, 0, 0.1));
  }
  for (int d = 0; d < P; ++d) {
    pb->static_bytes[d] = Value(rng, coarse, 0, 100);
    pb->memory_capacity[d] =
        Chance(rng, 0.2) ? std::numeric_limits<double>::infinity() : Value(rng, coarse, 50, 600);
    for (int e = 0; e < P; ++e) {
      const size_t i = static_cast<size_t>(d) * P + e;
      pb->link_latency_s[i] = d == e ? 0.0 : Value(rng, coarse, 0, 0.5);
      pb->link_inv_bandwidth[i] = d == e ? 0.0 : (coarse ? 0.01 : Uniform(rng, 0, 0.02));
    }
  }
  pb->tokens_per_microbatch = UniformInt(rng, 1, 4096);
  if (pb->vocab_parallel) {
    pb->vocab_s_s.resize(P);
    pb->vocab_t_s.resize(P);
    pb->vocab_activation_bytes.resize(P);
    for (int d = 0; d < P; ++d) {
      pb->vocab_s_s[d] = Value(rng, coarse, 0, 1);
      pb->vocab_t_s[d] = Value(rng, coarse, 0, 1);
      pb->vocab_activation_bytes[d] = Value(rng, coarse, 0, 50);
    }
    pb->vocab_input_bytes = Value(rng, coarse, 0, 20);
    pb->vocab_allreduce_s = Value(rng, coarse, 0, 0.5);
  }
}

PipelineProblem RandomProblem(Rng& rng, std::vector<int> placement, int P, int M) {
  PipelineProblem pb = UniformProblem(placement, P, M, 1, 1, 1);
  for (int s = 0; s < pb.num_stages; ++s) pb.recompute[s] = Chance(rng, 0.3) ? 1 : 0;
  pb.link_contention = Chance(rng, 0.4);
  pb.vocab_parallel = Chance(rng, 0.25);
  RandomiseCosts(rng, &pb);
  return pb;
}

std::vector<int> RandomPlacement(Rng& rng, int P) {
  const int S = UniformInt(rng, 1, 3 * P);
  std::vector<int> placement(S);
  for (int& d : placement) d = UniformInt(rng, 0, P - 1);
  return placement;
}

// The ops of a complete schedule: F, R when the stage recomputes, a split (B, W) or unsplit
// (BW) backward chosen per (stage, micro-batch), and S and T on every device under vocabulary
// parallelism.
std::vector<Op> AllOps(Rng& rng, const PipelineProblem& pb, double split_p) {
  std::vector<Op> ops;
  for (int s = 0; s < pb.num_stages; ++s) {
    for (int m = 0; m < pb.num_microbatches; ++m) {
      ops.push_back(Op{OpKind::kF, s, m});
      if (pb.recompute[s]) ops.push_back(Op{OpKind::kR, s, m});
      if (Chance(rng, split_p)) {
        ops.push_back(Op{OpKind::kB, s, m});
        ops.push_back(Op{OpKind::kW, s, m});
      } else {
        ops.push_back(Op{OpKind::kBW, s, m});
      }
    }
  }
  if (pb.vocab_parallel) {
    for (int d = 0; d < pb.num_devices; ++d) {
      for (int m = 0; m < pb.num_microbatches; ++m) {
        ops.push_back(Op{OpKind::kS, d, m});
        ops.push_back(Op{OpKind::kT, d, m});
      }
    }
  }
  return ops;
}

using OpKey = std::tuple<int, int, int>;
OpKey Key(const Op& op) { return {static_cast<int>(op.kind), op.stage, op.microbatch}; }
OpKey Key(OpKind kind, int stage, int m) { return {static_cast<int>(kind), stage, m}; }

// A random topological order of the data dependencies, split into device orders: deadlock-free
// by construction. `greed` biases the pick towards the oldest ready op (more pipeline-like).
Schedule RandomValidSchedule(Rng& rng, const PipelineProblem& pb, double split_p) {
  const std::vector<Op> ops = AllOps(rng, pb, split_p);
  std::map<OpKey, int> index;
  for (size_t i = 0; i < ops.size(); ++i) index[Key(ops[i])] = static_cast<int>(i);
  auto backward = [&](int st, int m) {
    return index.count(Key(OpKind::kB, st, m)) ? OpKind::kB : OpKind::kBW;
  };
  std::vector<int> pending(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    pending[i] = DataPredecessorCount(pb, ops[i].kind, ops[i].stage);
  }
  std::vector<int> ready;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (pending[i] == 0) ready.push_back(static_cast<int>(i));
  }
  Schedule schedule;
  schedule.ops.resize(pb.num_devices);
  const double greed = Uniform(rng, 0, 1);
  while (!ready.empty()) {
    size_t pick = Chance(rng, greed) ? 0 : UniformInt(rng, 0, static_cast<int>(ready.size()) - 1);
    const int i = ready[pick];
    ready.erase(ready.begin() + pick);
    const Op op = ops[i];
    schedule.ops[OpDevice(pb, op.kind, op.stage)].push_back(op);
    const int m = op.microbatch;
    ForEachDataSuccessor(pb, op.kind, op.stage, [&](int st) { return backward(st, m); },
                         [&](OpKind kind, int st, double) {
                           const int c = index.at(Key(kind, st, m));
                           if (--pending[c] == 0) ready.push_back(c);
                         });
  }
  return schedule;
}

// An invalid or possibly deadlocked variant of `s`.
Schedule Mutate(Rng& rng, const PipelineProblem& pb, Schedule s) {
  const int P = s.num_devices();
  int d = UniformInt(rng, 0, P - 1);
  for (int tries = 0; tries < 8 && s.ops[d].empty(); ++tries) d = UniformInt(rng, 0, P - 1);
  std::vector<Op>& order = s.ops[d];
  if (order.empty()) return s;
  const int n = static_cast<int>(order.size());
  const int i = UniformInt(rng, 0, n - 1), j = UniformInt(rng, 0, n - 1);
  switch (UniformInt(rng, 0, 9)) {
    case 0:
    case 1:
    case 2:  // swap two ops of a device: a deadlock or a slower order
      std::swap(order[i], order[j]);
      break;
    case 3:  // move one op to the front
      std::rotate(order.begin(), order.begin() + i, order.begin() + i + 1);
      break;
    case 4:
      order.erase(order.begin() + i);
      break;
    case 5:
      order.push_back(order[i]);
      break;
    case 6:  // to another device
      if (P > 1) {
        const Op op = order[i];
        order.erase(order.begin() + i);
        s.ops[(d + 1) % P].push_back(op);
      }
      break;
    case 7:
      order[i].microbatch = Chance(rng, 0.5) ? -1 : pb.num_microbatches;
      break;
    case 8:
      order[i].kind = static_cast<OpKind>(UniformInt(rng, 0, kNumOpKinds - 1));
      break;
    case 9:
      if (Chance(rng, 0.5)) {
        s.ops.pop_back();
      } else {
        order[i].stage = Chance(rng, 0.5) ? -1 : pb.num_stage_ids();
      }
      break;
  }
  return s;
}

// --- Independent longest path (no contention) ---------------------------------------------

struct Straight {
  double iteration_time_s = 0;
  double steady_state_iteration_time_s = 0;
  std::vector<std::vector<double>> start, end;
  std::vector<double> peak;
};

// Memoised recursion: an op starts when its device's previous op has ended and every data input
// has arrived (producer end + transfer, or + the all-reduce); each edge written out by hand.
Straight StraightLongestPath(const PipelineProblem& pb, const Schedule& sc) {
  const int P = pb.num_devices, S = pb.num_stages;
  std::map<OpKey, std::pair<int, int>> where;
  for (int d = 0; d < P; ++d) {
    for (size_t i = 0; i < sc.ops[d].size(); ++i) where[Key(sc.ops[d][i])] = {d, static_cast<int>(i)};
  }
  Straight out;
  out.start.resize(P);
  out.end.resize(P);
  std::vector<std::vector<char>> done(P);
  for (int d = 0; d < P; ++d) {
    out.start[d].assign(sc.ops[d].size(), 0);
    out.end[d].assign(sc.ops[d].size(), 0);
    done[d].assign(sc.ops[d].size(), 0);
  }
  auto dev = [&](OpKind k, int s) { return k == OpKind::kS || k == OpKind::kT ? s : pb.stage_device[s]; };
  auto transfer = [&](int a, int b, double bytes) {
    return a == b ? 0.0 : pb.link_latency_s[a * P + b] + bytes * pb.link_inv_bandwidth[a * P + b];
  };
  auto duration = [&](const Op& op) {
    const int s = op.stage;
    switch (op.kind) {
      case OpKind::kF: return pb.forward_s[s];
      case OpKind::kB: return pb.backward_input_s[s];
      case OpKind::kW: return pb.weight_grad_s[s];
      case OpKind::kBW:
        return pb.backward_input_s[s] + pb.weight_grad_s[s] -
               (pb.op_overhead_s.empty() ? 0.0 : pb.op_overhead_s[s]);
      case OpKind::kR: return pb.recompute_s[s];
      case OpKind::kS: return pb.vocab_s_s[s];
      case OpKind::kT: return pb.vocab_t_s[s];
    }
    return 0.0;
  };
  std::function<double(const Op&)> end_of = [&](const Op& op) -> double {
    const auto [d, i] = where.at(Key(op));
    if (done[d][i]) return out.end[d][i];
    const int s = op.stage, m = op.microbatch;
    double start = i > 0 ? end_of(sc.ops[d][i - 1]) : 0.0;
    auto input = [&](const Op& producer, double arrival_delay) {
      start = std::max(start, end_of(producer) + arrival_delay);
    };
    auto back = [&](int st) {
      return where.count(Key(OpKind::kB, st, m)) ? Op{OpKind::kB, st, m} : Op{OpKind::kBW, st, m};
    };
    switch (op.kind) {
      case OpKind::kF:
        if (s > 0) input(Op{OpKind::kF, s - 1, m}, transfer(dev(OpKind::kF, s - 1), d, pb.output_bytes[s - 1]));
        break;
      case OpKind::kR:
        input(Op{OpKind::kF, s, m}, 0);
        break;
      case OpKind::kB:
      case OpKind::kBW:
        if (s + 1 < S) {
          input(back(s + 1), transfer(dev(OpKind::kB, s + 1), d, pb.output_bytes[s]));
        } else if (pb.vocab_parallel) {
          for (int e = 0; e < P; ++e) input(Op{OpKind::kS, e, m}, pb.vocab_allreduce_s);
        } else {
          input(Op{OpKind::kF, s, m}, 0);
        }
        if (pb.recompute[s]) input(Op{OpKind::kR, s, m}, 0);
        break;
      case OpKind::kW:
        input(Op{OpKind::kB, s, m}, 0);
        break;
      case OpKind::kS:
        input(Op{OpKind::kF, S - 1, m}, transfer(pb.stage_device[S - 1], d, pb.vocab_input_bytes));
        break;
      case OpKind::kT:
        for (int e = 0; e < P; ++e) input(Op{OpKind::kS, e, m}, pb.vocab_allreduce_s);
        break;
    }
    out.start[d][i] = start;
    out.end[d][i] = start + duration(op);
    done[d][i] = 1;
    return out.end[d][i];
  };
  double first = std::numeric_limits<double>::infinity(), last = 0;
  bool any = false;
  out.peak.resize(P);
  for (int d = 0; d < P; ++d) {
    double live = 0, max_live = 0;
    for (const Op& op : sc.ops[d]) {
      const int s = op.stage;
      const double act = pb.activation_bytes[std::min(s, S - 1)];
      double delta = 0;
      switch (op.kind) {
        case OpKind::kF: delta = pb.recompute[s] ? pb.input_bytes[s] : act; break;
        case OpKind::kR: delta = act - pb.input_bytes[s]; break;
        case OpKind::kB: delta = -(act - pb.activation_bytes_w[s]); break;
        case OpKind::kW: delta = -pb.activation_bytes_w[s]; break;
        case OpKind::kBW: delta = -act; break;
        case OpKind::kS: delta = pb.vocab_activation_bytes[s]; break;
        case OpKind::kT: delta = -pb.vocab_activation_bytes[s]; break;
      }
      live += delta;
      max_live = std::max(max_live, live);
    }
    out.peak[d] = pb.static_bytes[d] + max_live;
    if (sc.ops[d].empty()) continue;
    any = true;
    end_of(sc.ops[d].front());
    const double lo = out.start[d][0];
    const double hi = end_of(sc.ops[d].back());
    first = std::min(first, lo);
    last = std::max(last, hi);
    out.steady_state_iteration_time_s = std::max(out.steady_state_iteration_time_s, hi - lo);
  }
  out.iteration_time_s = any ? last - first : 0;
  return out;
}

// --- Comparison -------------------------------------------------------------------------------

void ExpectSameResult(const SimResult& a, const SimResult& b) {
  EXPECT_BITS_EQ(a.iteration_time_s, b.iteration_time_s);
  EXPECT_BITS_EQ(a.steady_state_iteration_time_s, b.steady_state_iteration_time_s);
  EXPECT_BITS_EQ(a.bubble_ratio, b.bubble_ratio);
  EXPECT_BITS_EQ(a.steady_state_bubble_ratio, b.steady_state_bubble_ratio);
  EXPECT_BITS_EQ(a.tokens_per_s, b.tokens_per_s);
  EXPECT_EQ(a.fits_memory, b.fits_memory);
  ASSERT_EQ(a.devices.size(), b.devices.size());
  for (size_t d = 0; d < a.devices.size(); ++d) {
    SCOPED_TRACE(absl::StrCat("device ", d));
    const DeviceResult& x = a.devices[d];
    const DeviceResult& y = b.devices[d];
    EXPECT_BITS_EQ(x.busy_s, y.busy_s);
    EXPECT_BITS_EQ(x.first_start_s, y.first_start_s);
    EXPECT_BITS_EQ(x.last_end_s, y.last_end_s);
    EXPECT_BITS_EQ(x.bubble_ratio, y.bubble_ratio);
    EXPECT_BITS_EQ(x.steady_state_bubble_ratio, y.steady_state_bubble_ratio);
    EXPECT_BITS_EQ(x.peak_memory_bytes, y.peak_memory_bytes);
    EXPECT_EQ(x.fits_memory, y.fits_memory);
  }
  ASSERT_EQ(a.op_start_s.size(), b.op_start_s.size());
  ASSERT_EQ(a.op_end_s.size(), b.op_end_s.size());
  for (size_t d = 0; d < a.op_start_s.size(); ++d) {
    ASSERT_EQ(a.op_start_s[d].size(), b.op_start_s[d].size());
    ASSERT_EQ(a.op_end_s[d].size(), b.op_end_s[d].size());
    for (size_t i = 0; i < a.op_start_s[d].size(); ++i) {
      EXPECT_BITS_EQ(a.op_start_s[d][i], b.op_start_s[d][i]);
      EXPECT_BITS_EQ(a.op_end_s[d][i], b.op_end_s[d][i]);
    }
  }
  ASSERT_EQ(a.transfers.size(), b.transfers.size());
  for (size_t i = 0; i < a.transfers.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("transfer ", i));
    const TransferRecord& x = a.transfers[i];
    const TransferRecord& y = b.transfers[i];
    EXPECT_EQ(x.from_device, y.from_device);
    EXPECT_EQ(x.to_device, y.to_device);
    EXPECT_EQ(x.consumer, y.consumer);
    EXPECT_BITS_EQ(x.bytes, y.bytes);
    EXPECT_BITS_EQ(x.start_s, y.start_s);
    EXPECT_BITS_EQ(x.end_s, y.end_s);
  }
  ASSERT_EQ(a.critical_path.size(), b.critical_path.size());
  for (size_t i = 0; i < a.critical_path.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("critical path entry ", i));
    const CriticalPathEntry& x = a.critical_path[i];
    const CriticalPathEntry& y = b.critical_path[i];
    EXPECT_EQ(x.device, y.device);
    EXPECT_EQ(x.op, y.op);
    EXPECT_BITS_EQ(x.start_s, y.start_s);
    EXPECT_BITS_EQ(x.end_s, y.end_s);
    EXPECT_EQ(x.waited_on_transfer, y.waited_on_transfer);
  }
}

void ExpectSameSummary(const Evaluator::Summary& a, const Evaluator::Summary& b) {
  EXPECT_BITS_EQ(a.iteration_time_s, b.iteration_time_s);
  EXPECT_BITS_EQ(a.steady_state_iteration_time_s, b.steady_state_iteration_time_s);
  EXPECT_EQ(a.fits_memory, b.fits_memory);
  EXPECT_BITS_EQ(a.memory_overflow_bytes, b.memory_overflow_bytes);
}

template <typename T, typename U>
void ExpectSameStatus(const absl::StatusOr<T>& a, const absl::StatusOr<U>& b) {
  EXPECT_EQ(a.status().code(), b.status().code());
  EXPECT_EQ(a.status().message(), b.status().message());
}

struct Counts {
  int ok = 0, errors = 0, deadlocks = 0, contention = 0, vocab = 0;
};

// Compares `ev` (reused across calls) with a fresh reference on every evaluation mode. `stop`
// (a check that never fires, or null) is given to `ev`: polling must not change a result.
void CheckAgainstReference(Evaluator& ev, const PipelineProblem& pb, const Schedule& sc,
                           Counts* counts, const std::function<bool()>* stop = nullptr) {
  ReferenceEvaluator ref;
  const EvalOptions modes[] = {{}, {.timeline = true}, {.critical_path = true},
                               {.timeline = true, .critical_path = true}};
  for (EvalOptions o : modes) {
    SCOPED_TRACE(absl::StrCat("timeline ", o.timeline, " critical_path ", o.critical_path));
    absl::StatusOr<SimResult> want = ref.Evaluate(pb, sc, o);
    o.should_stop = stop;
    absl::StatusOr<SimResult> got = ev.Evaluate(pb, sc, o);
    ExpectSameStatus(got, want);
    if (want.ok() && got.ok()) ExpectSameResult(*got, *want);
  }
  absl::StatusOr<Evaluator::Summary> want = ref.EvaluateSummary(pb, sc);
  absl::StatusOr<Evaluator::Summary> got = ev.EvaluateSummary(pb, sc, {.should_stop = stop});
  ExpectSameStatus(got, want);
  if (want.ok() && got.ok()) ExpectSameSummary(*got, *want);
  // Again: a second call on the same inputs must not depend on what the first left behind.
  absl::StatusOr<Evaluator::Summary> again = ev.EvaluateSummary(pb, sc);
  ExpectSameStatus(again, want);
  if (want.ok() && again.ok()) ExpectSameSummary(*again, *want);
  if (want.ok()) {
    ++counts->ok;
    counts->contention += pb.link_contention;
    counts->vocab += pb.vocab_parallel;
  } else {
    ++counts->errors;
    counts->deadlocks += want.status().message().find("deadlock") != absl::string_view::npos;
  }
}

void CheckAgainstStraight(const PipelineProblem& pb, const Schedule& sc) {
  if (pb.link_contention) return;
  Evaluator ev;
  absl::StatusOr<SimResult> got = ev.Evaluate(pb, sc, {.timeline = true});
  ASSERT_TRUE(got.ok()) << got.status();
  const Straight want = StraightLongestPath(pb, sc);
  EXPECT_BITS_EQ(got->iteration_time_s, want.iteration_time_s);
  EXPECT_BITS_EQ(got->steady_state_iteration_time_s, want.steady_state_iteration_time_s);
  for (int d = 0; d < pb.num_devices; ++d) {
    EXPECT_BITS_EQ(got->devices[d].peak_memory_bytes, want.peak[d]);
    for (size_t i = 0; i < sc.ops[d].size(); ++i) {
      EXPECT_BITS_EQ(got->op_start_s[d][i], want.start[d][i]);
      EXPECT_BITS_EQ(got->op_end_s[d][i], want.end[d][i]);
    }
  }
}

TEST(EvaluatorEquivalenceTest, RandomOrdersMatchTheReferenceAndTheLongestPath) {
  Rng rng(20261201);
  Evaluator ev;  // reused: state carried across calls must never leak into a result
  Counts counts;
  for (int trial = 0; trial < 1000; ++trial) {
    SCOPED_TRACE(absl::StrCat("trial ", trial));
    const int P = UniformInt(rng, 1, 5);
    PipelineProblem pb = RandomProblem(rng, RandomPlacement(rng, P), P, UniformInt(rng, 1, 6));
    const Schedule sc = RandomValidSchedule(rng, pb, Uniform(rng, 0, 1));
    CheckAgainstReference(ev, pb, sc, &counts);
    CheckAgainstStraight(pb, sc);
    // Same schedule, new numbers (and contention flipped): nothing cached may go stale.
    RandomiseCosts(rng, &pb);
    pb.link_contention = !pb.link_contention;
    CheckAgainstReference(ev, pb, sc, &counts);
    CheckAgainstStraight(pb, sc);
    // Broken variants: the same error (or, if still valid, the same result).
    for (int k = 0; k < 3; ++k) CheckAgainstReference(ev, pb, Mutate(rng, pb, sc), &counts);
    if (HasFailure()) break;
  }
  // The generator covers what it claims.
  std::printf("valid %d (contention %d, vocab %d), errors %d (deadlocks %d)\n", counts.ok,
              counts.contention, counts.vocab, counts.errors, counts.deadlocks);
  EXPECT_GT(counts.ok, 2000);
  EXPECT_GT(counts.contention, 1000);
  EXPECT_GT(counts.vocab, 500);
  EXPECT_GT(counts.errors, 2000);
  EXPECT_GT(counts.deadlocks, 500);
}

// Overlapped expert-parallel communication (PipelineProblem::forward_tail_s): every op's tail
// runs on its device's communication stream after its compute; the device's next op starts
// beside it (slowed by the SMs it holds, tail_compute_share) when of another kind and after it
// when of the same — the fast evaluator and the reference agree on every mode, with and
// without link contention.
TEST(EvaluatorEquivalenceTest, OverlappedCommunicationTailsMatchTheReference) {
  Rng rng(20261205);
  Evaluator ev;
  Counts counts;
  int with_tails = 0;
  for (int trial = 0; trial < 300; ++trial) {
    SCOPED_TRACE(absl::StrCat("trial ", trial));
    const int P = UniformInt(rng, 1, 5);
    PipelineProblem pb = RandomProblem(rng, RandomPlacement(rng, P), P, UniformInt(rng, 1, 6));
    pb.forward_tail_s.assign(pb.num_stages, 0.0);
    pb.backward_tail_s.assign(pb.num_stages, 0.0);
    for (int s = 0; s < pb.num_stages; ++s) {
      if (Uniform(rng, 0, 1) < 0.7) pb.forward_tail_s[s] = Uniform(rng, 0, 2);
      if (Uniform(rng, 0, 1) < 0.7) pb.backward_tail_s[s] = Uniform(rng, 0, 2);
      with_tails += pb.forward_tail_s[s] > 0 || pb.backward_tail_s[s] > 0;
    }
    if (trial % 2 == 1) {
      pb.tail_compute_share.assign(pb.num_stages, 0.0);
      for (double& share : pb.tail_compute_share) share = Uniform(rng, 0, 0.9);
    }
    const Schedule sc = RandomValidSchedule(rng, pb, Uniform(rng, 0, 1));
    CheckAgainstReference(ev, pb, sc, &counts);
    pb.link_contention = !pb.link_contention;
    CheckAgainstReference(ev, pb, sc, &counts);
    if (HasFailure()) break;
  }
  EXPECT_GT(counts.ok, 400);
  EXPECT_GT(with_tails, 500);
}

TEST(EvaluatorEquivalenceTest, ListScheduledAndClassicOrdersMatchTheReference) {
  Rng rng(7);
  Evaluator ev;
  Counts counts;
  for (int trial = 0; trial < 120; ++trial) {
    SCOPED_TRACE(absl::StrCat("trial ", trial));
    const int P = UniformInt(rng, 1, 6);
    const int M = UniformInt(rng, 1, 12);
    if (trial % 2 == 0) {
      // A list-scheduled order with a random policy and caps.
      PipelineProblem pb = RandomProblem(rng, RandomPlacement(rng, P), P, M);
      WeightedPolicy policy;
      for (double& w : policy.kind_weight) w = Uniform(rng, 0, 4);
      policy.microbatch_weight = Uniform(rng, -1e-3, 1e-2);
      policy.stage_weight = Uniform(rng, -1e-3, 1e-3);
      ListSchedulerOptions options;
      options.split_backward = Chance(rng, 0.5);
      if (Chance(rng, 0.5)) {
        options.inflight_cap.assign(P, UniformInt(rng, 1, 4));
        options.inflight_until_b = Chance(rng, 0.5);
      }
      absl::StatusOr<ListScheduleResult> ls = ListSchedule(pb, policy, options);
      ASSERT_TRUE(ls.ok()) << ls.status();
      CheckAgainstReference(ev, pb, ls->schedule, &counts);
      CheckAgainstStraight(pb, ls->schedule);
    } else {
      // A classic order (every kind that applies) on random costs.
      const std::vector<ScheduleKind> kinds = AllScheduleKinds();
      const ScheduleKind kind = kinds[UniformInt(rng, 0, static_cast<int>(kinds.size()) - 1)];
      absl::StatusOr<GeneratedSchedule> g = GenerateSchedule(kind, P, 0, M);
      if (!g.ok()) continue;
      PipelineProblem pb = RandomProblem(rng, g->stage_device, P, M);
      pb.recompute.assign(pb.num_stages, 0);  // classic orders carry no R
      pb.vocab_parallel = false;              // nor vocabulary passes
      CheckAgainstReference(ev, pb, g->schedule, &counts);
      CheckAgainstStraight(pb, g->schedule);
    }
    if (HasFailure()) break;
  }
  EXPECT_GT(counts.ok, 100);
}

TEST(EvaluatorEquivalenceTest, LargerPipelinesMatchTheReference) {
  // Enough ops (13 k to 25 k) that the device worklist compacts and, with a stop check that
  // never fires, the pass is cut into chunks of kStopPollOps between polls.
  Rng rng(11);
  Evaluator ev;
  Counts counts;
  int polls = 0;
  const std::function<bool()> never = [&polls] {
    ++polls;
    return false;
  };
  for (const auto& [kind, P, M] :
       std::vector<std::tuple<ScheduleKind, int, int>>{{ScheduleKind::kInterleaved, 32, 128},
                                                       {ScheduleKind::kZbV, 24, 96},
                                                       {ScheduleKind::k1F1B, 64, 192}}) {
    absl::StatusOr<GeneratedSchedule> g = GenerateSchedule(kind, P, 0, M);
    ASSERT_TRUE(g.ok()) << g.status();
    ASSERT_GT(g->schedule.total_ops(), 3u * kStopPollOps);
    for (int rep = 0; rep < 3; ++rep) {
      PipelineProblem pb = RandomProblem(rng, g->stage_device, P, M);
      pb.recompute.assign(pb.num_stages, 0);
      pb.vocab_parallel = false;
      pb.link_contention = rep == 1;
      CheckAgainstReference(ev, pb, g->schedule, &counts, rep == 2 ? &never : nullptr);
    }
  }
  EXPECT_EQ(counts.ok, 9);
  EXPECT_GT(polls, 3 * 5 * 3);  // every mode of every rep == 2 polled at least 3 times
}

}  // namespace
}  // namespace octopipe
