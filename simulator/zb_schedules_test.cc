// Pins the cost-aware ZeroBubble builders: hand-traced small cases with unequal F, B, W and a
// transfer delay, the papers' closed forms at unit cost, their memory limits, agreement of the
// builders' own timing with the Evaluator, and (seeded) that building the order for the real
// costs is never slower than the unit-cost order it replaces.
#include "simulator/zb_schedules.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "simulator/evaluator.h"
#include "simulator/list_scheduler.h"
#include "simulator/problem.h"
#include "simulator/schedules.h"

namespace octopipe {
namespace {

std::string Order(const std::vector<Op>& ops) {
  std::string out;
  for (const Op& op : ops) out += (out.empty() ? "" : " ") + OpToString(op);
  return out;
}

void SetLatency(PipelineProblem* pb, double latency) {
  const int P = pb->num_devices;
  for (int a = 0; a < P; ++a) {
    for (int b = 0; b < P; ++b) pb->link_latency_s[a * P + b] = a == b ? 0.0 : latency;
  }
}

// P = 2, M = 3. Stage 0: F 1, B 2, W 1; stage 1: F 2, B 1, W 1; every transfer 0.5 s.
PipelineProblem TwoStages() {
  PipelineProblem pb = UniformProblem(LoopPlacement(2, 1), 2, 3, 1, 1, 1);
  pb.forward_s = {1, 2};
  pb.backward_input_s = {2, 1};
  pb.weight_grad_s = {1, 1};
  SetLatency(&pb, 0.5);
  return pb;
}

SimResult Eval(const PipelineProblem& pb, const Schedule& s) {
  absl::StatusOr<SimResult> r = Simulate(pb, s);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : SimResult{};
}

// Traced by hand (end times in brackets), the first variant (bubble allowed before the first B,
// B prioritised, greedy fill); no other variant is faster. Memory limit P x 1 = 2 in flight.
// Upstream's own Python (zb.initial_solution, per-stage costs, one transfer cost) run on the
// same inputs gives the same order and time (15), and 14 with the ZB-H2 limit below.
// Warm-up: F0.0 [1], F1.0 [max(2, 1 + .5 + 2) = 3.5]; B1.0 could start at 3.5 + 1 = 4.5 and
// its gradient reach stage 0 at 5, so stage 0 fits one more F (the limit allows one): F0.1 [2];
// B1.0 [4.5], B0.0 [4.5 + .5 + 2 = 7]. Micro-batch 1: F0.2 [8]; stage 1 has no W worth
// filling before F0.1's output (ready at 2.5): F1.1 [6.5], B1.1 [7.5]; stage 0 has issued all
// its forwards, so it flushes W0.0 [9] and B0.1 [11]. Micro-batch 2: stage 1 fits W1.0 [8.5]
// exactly before F0.2's output arrives at 8.5: F1.2 [10.5], B1.2 [11.5]; stage 0 fits W0.1
// [12] before B1.2's gradient (12): B0.2 [14]; then W0.2 [15], W1.1 [12.5], W1.2 [13.5].
TEST(ZbSchedulesTest, ZbH1HandTracedWithUnequalCostsAndTransferDelay) {
  const PipelineProblem pb = TwoStages();
  absl::StatusOr<ZbScheduleResult> r = ZeroBubbleH(pb, 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Order(r->schedule.ops[0]), "F0.0 F0.1 B0.0 F0.2 W0.0 B0.1 W0.1 B0.2 W0.2");
  EXPECT_EQ(Order(r->schedule.ops[1]), "F1.0 B1.0 F1.1 B1.1 W1.0 F1.2 B1.2 W1.1 W1.2");
  EXPECT_DOUBLE_EQ(r->makespan_s, 15.0);
  EXPECT_DOUBLE_EQ(r->longest_span_s, 15.0);
  const SimResult sim = Eval(pb, r->schedule);
  EXPECT_DOUBLE_EQ(sim.iteration_time_s, 15.0);
}

// Same problem, twice the memory: warm-up takes both extra forwards on stage 0 (F0.1 [2],
// F0.2 [3]) and B0.0 still waits for the gradient [7]; W0.0 [8] fills the wait for B1.1's
// gradient (8), B0.1 [10], W0.1 [11], B0.2 [13], W0.2 [14]. Stage 1 runs F B F B F B W W W.
TEST(ZbSchedulesTest, ZbH2HandTracedWithUnequalCostsAndTransferDelay) {
  const PipelineProblem pb = TwoStages();
  absl::StatusOr<ZbScheduleResult> r = ZeroBubbleH(pb, 2);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Order(r->schedule.ops[0]), "F0.0 F0.1 F0.2 B0.0 W0.0 B0.1 W0.1 B0.2 W0.2");
  EXPECT_EQ(Order(r->schedule.ops[1]), "F1.0 B1.0 F1.1 B1.1 F1.2 B1.2 W1.0 W1.1 W1.2");
  EXPECT_DOUBLE_EQ(r->makespan_s, 14.0);
  const SimResult sim = Eval(pb, r->schedule);
  EXPECT_DOUBLE_EQ(sim.iteration_time_s, 14.0);
}

// P = 2, M = 3, V shape: device 0 holds stages 0 and 3, device 1 stages 1 and 2, unequal
// costs, 0.5 s transfers. Pinned from the builder, not traced by hand: upstream's V builder
// takes one F, B, W for all stages, so there is no upstream run to compare this one with (see
// ZbVMatchesUpstreamOnUniformStages for that).
TEST(ZbSchedulesTest, ZbVWithUnequalCostsAndTransferDelay) {
  PipelineProblem pb = UniformProblem(VShapePlacement(2), 2, 3, 1, 1, 1);
  pb.forward_s = {1, 2, 1, 1};
  pb.backward_input_s = {2, 1, 1, 2};
  pb.weight_grad_s = {1, 1, 0.5, 1};
  SetLatency(&pb, 0.5);
  absl::StatusOr<ZbScheduleResult> r = ZeroBubbleV(pb);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Order(r->schedule.ops[0]),
            "F0.0 F0.1 F0.2 F3.0 B3.0 F3.1 B3.1 W3.0 W3.1 B0.0 F3.2 B3.2 B0.1 W0.0 B0.2 W3.2 "
            "W0.1 W0.2");
  EXPECT_EQ(Order(r->schedule.ops[1]),
            "F1.0 F2.0 F1.1 F2.1 B2.0 F1.2 B1.0 F2.2 B2.1 B1.1 W2.0 W1.0 W2.1 W1.1 B2.2 B1.2 "
            "W2.2 W1.2");
  EXPECT_DOUBLE_EQ(r->makespan_s, 26.0);
  EXPECT_DOUBLE_EQ(Eval(pb, r->schedule).iteration_time_s, 26.0);
}

// At unit costs the builders reproduce the ZeroBubble paper's figures: ZB-H1 3(M + P - 1)
// (1F1B's bubble, a third of it), ZB-H2 and ZB-V no steady-state bubble once M >= 2P (with
// fewer micro-batches, e.g. P = 3, M = 4, ZB-H2's steady state is 13, not 12).
TEST(ZbSchedulesTest, UnitCostsGiveThePapersClosedForms) {
  for (auto [p, m] : {std::pair{2, 4}, std::pair{4, 8}, std::pair{8, 24}}) {
    const PipelineProblem h = UniformProblem(LoopPlacement(p, 1), p, m, 1, 1, 1);
    absl::StatusOr<ZbScheduleResult> h1 = ZeroBubbleH(h, 1);
    absl::StatusOr<ZbScheduleResult> h2 = ZeroBubbleH(h, 2);
    ASSERT_TRUE(h1.ok() && h2.ok());
    EXPECT_DOUBLE_EQ(Eval(h, h1->schedule).iteration_time_s, 3.0 * m + p - 1) << p << " " << m;
    EXPECT_DOUBLE_EQ(Eval(h, h2->schedule).steady_state_iteration_time_s, 3.0 * m);
    const PipelineProblem v = UniformProblem(VShapePlacement(p), p, m, 1, 1, 1);
    absl::StatusOr<ZbScheduleResult> zv = ZeroBubbleV(v);
    ASSERT_TRUE(zv.ok()) << zv.status();
    EXPECT_DOUBLE_EQ(Eval(v, zv->schedule).steady_state_iteration_time_s, 6.0 * m);
  }
}

PipelineProblem RandomProblem(std::mt19937* rng, const std::vector<int>& placement, int P,
                              int M) {
  std::uniform_real_distribution<double> cost(0.5, 2.0), lat(0.0, 0.4);
  PipelineProblem pb = UniformProblem(placement, P, M, 1, 1, 1);
  for (int s = 0; s < pb.num_stages; ++s) {
    pb.forward_s[s] = cost(*rng);
    pb.backward_input_s[s] = cost(*rng);
    pb.weight_grad_s[s] = cost(*rng);
  }
  for (int a = 0; a < P; ++a) {
    for (int b = 0; b < P; ++b) pb.link_latency_s[a * P + b] = a == b ? 0.0 : lat(*rng);
  }
  return pb;
}

// The order the ZB generators built before: the list scheduler at unit cost, B before F
// before W, 1F1B's in-flight caps (H1: P - d, H2: 2(P - d) - 1) counted until B.
Schedule UnitCostListOrder(int P, int M, int pending) {
  const PipelineProblem unit = UniformProblem(LoopPlacement(P, 1), P, M, 1, 1, 1);
  ListSchedulerOptions options;
  options.split_backward = true;
  options.inflight_until_b = true;
  for (int d = 0; d < P; ++d) {
    options.inflight_cap.push_back(pending == 1 ? P - d : 2 * (P - d) - 1);
  }
  absl::StatusOr<ListScheduleResult> r = ListSchedule(unit, WeightedPolicy(), options);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->schedule : Schedule{};
}

// Property (seeded): on random per-stage costs and transfer delays, ZB-H1 / ZB-H2 built for
// those costs are faster, by upstream's objective (the longest per-device span), than the
// unit-cost orders they replace in more than half the cases (69 of 120; equal in 50), and
// never slower by more than 2%. Not "never
// slower" outright: ZeroBubble's builder is a greedy heuristic, and in 1 of these 120 cases
// (trial 35: P = 5, M = 5, ZB-H1) the old unit-cost list order is 1.9% faster.
TEST(ZbSchedulesTest, BuiltForTheCostsIsFasterThanTheUnitCostOrder) {
  std::mt19937 rng(20260101);
  int faster = 0, slower = 0, cases = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int P = 2 + trial % 4;
    const int M = P + (trial / 4) % (P + 3);
    const PipelineProblem pb = RandomProblem(&rng, LoopPlacement(P, 1), P, M);
    for (int pending : {1, 2}) {
      absl::StatusOr<ZbScheduleResult> r = ZeroBubbleH(pb, pending);
      ASSERT_TRUE(r.ok()) << r.status();
      const SimResult built = Eval(pb, r->schedule);
      EXPECT_DOUBLE_EQ(built.steady_state_iteration_time_s, r->longest_span_s);
      EXPECT_DOUBLE_EQ(built.iteration_time_s, r->makespan_s);
      const double unit = Eval(pb, UnitCostListOrder(P, M, pending)).steady_state_iteration_time_s;
      const double mine = built.steady_state_iteration_time_s;
      EXPECT_LE(mine, unit * 1.02) << "trial " << trial << " P=" << P << " M=" << M
                                   << " pending=" << pending;
      ++cases;
      faster += mine < unit - 1e-9;
      slower += mine > unit + 1e-9;
    }
  }
  EXPECT_GT(faster, cases / 2) << faster << " of " << cases;
  EXPECT_LE(slower, 1) << slower << " of " << cases;
}

// In-flight (F done, B not done) micro-batches per stage never exceed the limit: P for ZB-H1
// (1F1B's memory), 2P for ZB-H2, and, with real activation sizes, the Evaluator's peak stays
// within pending x P x the activation.
TEST(ZbSchedulesTest, MemoryLimitsAreRespected) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 24; ++trial) {
    const int P = 2 + trial % 4;
    const int M = 2 * P + trial % 5;
    PipelineProblem pb = RandomProblem(&rng, LoopPlacement(P, 1), P, M);
    for (int pending : {1, 2}) {
      absl::StatusOr<ZbScheduleResult> r = ZeroBubbleH(pb, pending);
      ASSERT_TRUE(r.ok()) << r.status();
      for (int d = 0; d < P; ++d) {
        int inflight = 0, peak = 0;
        for (const Op& op : r->schedule.ops[d]) {
          inflight += op.kind == OpKind::kF ? 1 : op.kind == OpKind::kB ? -1 : 0;
          peak = std::max(peak, inflight);
        }
        EXPECT_LE(peak, pending * P) << "trial " << trial << " device " << d;
      }
    }
    // Bytes: F holds 10, B frees 6, W the last 4.
    pb.activation_bytes.assign(P, 10.0);
    pb.activation_bytes_w.assign(P, 4.0);
    for (int pending : {1, 2}) {
      absl::StatusOr<ZbScheduleResult> r = ZeroBubbleH(pb, pending);
      ASSERT_TRUE(r.ok()) << r.status();
      const SimResult sim = Eval(pb, r->schedule);
      for (int d = 0; d < P; ++d) {
        EXPECT_LE(sim.devices[d].peak_memory_bytes, pending * P * 10.0 + 1e-9)
            << "trial " << trial << " device " << d;
      }
    }
    // ZB-V: 2P half-size activations, 1F1B's memory.
    PipelineProblem v = RandomProblem(&rng, VShapePlacement(P), P, M);
    v.activation_bytes.assign(2 * P, 5.0);
    v.activation_bytes_w.assign(2 * P, 2.0);
    absl::StatusOr<ZbScheduleResult> zv = ZeroBubbleV(v);
    ASSERT_TRUE(zv.ok()) << zv.status();
    const SimResult sim = Eval(v, zv->schedule);
    for (int d = 0; d < P; ++d) {
      EXPECT_LE(sim.devices[d].peak_memory_bytes, 2 * P * 5.0 + 1e-9) << "trial " << trial;
    }
  }
}

// Chunks as `octopipe profile` measured the MoE-heavy bench model (bench/measured_win.sh; ms
// and KiB per micro-batch): unequal activations, and a backward that holds MORE until its W
// than the forward did (W keeps the input and the output gradient). Upstream's rules assume a
// B frees memory; at its limit of 2P chunk activations every variant runs out of W to free.
// ZB-V used to fail ("no variant fits"); it now raises the limit in steps and stays a baseline.
TEST(ZbSchedulesTest, ZbVWithMeasuredMoeChunksStaysABaseline) {
  PipelineProblem pb = UniformProblem(VShapePlacement(2), 2, 8, 1, 1, 1);
  pb.forward_s = {1.505, 2.679, 2.482, 2.561};
  pb.backward_input_s = {1.748, 3.169, 2.950, 2.779};
  pb.weight_grad_s = {1.279, 1.998, 2.118, 2.071};
  pb.activation_bytes = {1156.0, 2087.5, 1927.5, 1895.5};
  pb.activation_bytes_w = {1348.0, 2024.0, 2120.0, 2040.0};
  SetLatency(&pb, 0.2);
  absl::StatusOr<ZbScheduleResult> r = ZeroBubbleV(pb);
  ASSERT_TRUE(r.ok()) << r.status();
  const SimResult sim = Eval(pb, r->schedule);
  for (int d = 0; d < 2; ++d) {  // within the highest raised limit, 2 x 2P x the largest chunk
    EXPECT_LE(sim.devices[d].peak_memory_bytes, 2 * 2 * 2 * 2087.5 + 1e-9) << "device " << d;
  }
  // Still a pipeline: well below running the stages one after another.
  double serial = 0;
  for (int s = 0; s < 4; ++s) {
    serial += 8 * (pb.forward_s[s] + pb.backward_input_s[s] + pb.weight_grad_s[s]);
  }
  EXPECT_LT(sim.iteration_time_s, 0.65 * serial);
}

TEST(ZbSchedulesTest, RejectsOtherPlacements) {
  const PipelineProblem loop2 = UniformProblem(LoopPlacement(2, 2), 2, 4, 1, 1, 1);
  absl::StatusOr<ZbScheduleResult> h = ZeroBubbleH(loop2, 1);
  EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(h.status().message().find("num_stages"), absl::string_view::npos);
  absl::StatusOr<ZbScheduleResult> v = ZeroBubbleV(loop2);
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(v.status().message().find("stage_device[2]"), absl::string_view::npos);
  EXPECT_EQ(ZeroBubbleH(TwoStages(), 0).status().code(), absl::StatusCode::kInvalidArgument);
}

// Uniform stages with unequal F, B, W and a transfer delay, the inputs upstream's V builder
// takes (scalars): the orders and makespans below are what upstream's own Python
// (zbv.PipelineGraph.try_v_schedule, its four fill variants with the approved-bubble re-runs,
// the one with the smallest worst bubble) produces for the same inputs, run side by side.
TEST(ZbSchedulesTest, ZbVMatchesUpstreamOnUniformStages) {
  {
    PipelineProblem pb = UniformProblem(VShapePlacement(2), 2, 3, 1.0, 2.0, 1.0);
    SetLatency(&pb, 0.5);
    absl::StatusOr<ZbScheduleResult> r = ZeroBubbleV(pb);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(Order(r->schedule.ops[0]),
              "F0.0 F0.1 F0.2 F3.0 B3.0 F3.1 B3.1 W3.0 W3.1 B0.0 F3.2 B3.2 B0.1 W0.0 W3.2 W0.1 "
              "B0.2 W0.2");
    EXPECT_EQ(Order(r->schedule.ops[1]),
              "F1.0 F2.0 F1.1 F2.1 B2.0 F1.2 B1.0 F2.2 B2.1 B1.1 W2.0 B2.2 B1.2 W1.0 W2.1 W1.1 "
              "W2.2 W1.2");
    EXPECT_DOUBLE_EQ(r->makespan_s, 27.5);
  }
  {
    PipelineProblem pb = UniformProblem(VShapePlacement(3), 3, 6, 1.0, 1.5, 0.75);
    SetLatency(&pb, 0.25);
    absl::StatusOr<ZbScheduleResult> r = ZeroBubbleV(pb);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(Order(r->schedule.ops[0]),
              "F0.0 F0.1 F0.2 F0.3 F0.4 F5.0 B5.0 F5.1 B5.1 F5.2 B5.2 F0.5 W5.0 W5.1 B0.0 F5.3 "
              "B5.3 W5.2 B0.1 F5.4 B5.4 W0.0 B0.2 F5.5 B5.5 B0.3 W5.3 W0.1 W5.4 B0.4 W0.2 W5.5 "
              "W0.3 B0.5 W0.4 W0.5");
    EXPECT_EQ(Order(r->schedule.ops[1]),
              "F1.0 F1.1 F1.2 F4.0 F1.3 F4.1 B4.0 F4.2 B4.1 F1.4 W4.0 B1.0 F4.3 B4.2 F1.5 B1.1 "
              "F4.4 B4.3 W4.1 B1.2 F4.5 B4.4 B1.3 W1.0 B4.5 B1.4 W4.2 W1.1 W4.3 B1.5 W1.2 W4.4 "
              "W1.3 W4.5 W1.4 W1.5");
    EXPECT_EQ(Order(r->schedule.ops[2]),
              "F2.0 F3.0 F2.1 F3.1 F2.2 F3.2 B3.0 F2.3 B2.0 F3.3 B3.1 F2.4 B2.1 F3.4 B3.2 F2.5 "
              "B2.2 F3.5 B3.3 B2.3 W3.0 B3.4 B2.4 W2.0 B3.5 B2.5 W3.1 W2.1 W3.2 W2.2 W3.3 W2.3 "
              "W3.4 W2.4 W3.5 W2.5");
    EXPECT_DOUBLE_EQ(r->makespan_s, 43.5);
  }
}

}  // namespace
}  // namespace octopipe
