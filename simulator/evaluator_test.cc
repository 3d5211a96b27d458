// Pins the evaluator's semantics: timing with transfers and contention, memory accounting with
// B/W split and recompute, deadlock naming, validation, agreement with the list scheduler, and
// the stop check that ends a long evaluation.
#include "simulator/evaluator.h"

#include <algorithm>
#include <functional>
#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "simulator/list_scheduler.h"
#include "simulator/problem.h"
#include "simulator/schedules.h"

namespace octopipe {
namespace {

Op F(int s, int m) { return Op{OpKind::kF, s, m}; }
Op B(int s, int m) { return Op{OpKind::kB, s, m}; }
Op W(int s, int m) { return Op{OpKind::kW, s, m}; }
Op BW(int s, int m) { return Op{OpKind::kBW, s, m}; }
Op R(int s, int m) { return Op{OpKind::kR, s, m}; }

PipelineProblem WithActivations(PipelineProblem pb, double act, double act_w, double input) {
  for (int s = 0; s < pb.num_stages; ++s) {
    pb.activation_bytes[s] = act;
    pb.activation_bytes_w[s] = act_w;
    pb.input_bytes[s] = input;
  }
  return pb;
}

TEST(EvaluatorTest, FirstDeviceHoldsPActivationsUnder1F1BAndMUnderGpipe) {
  const int p = 4, m = 8;
  for (ScheduleKind kind : {ScheduleKind::k1F1B, ScheduleKind::kGpipe}) {
    auto g = GenerateSchedule(kind, p, 1, m);
    ASSERT_TRUE(g.ok());
    PipelineProblem pb = WithActivations(UniformProblem(g->stage_device, p, m, 1, 1, 1), 10, 4, 1);
    pb.static_bytes = {100, 100, 100, 100};
    auto r = Simulate(pb, g->schedule);
    ASSERT_TRUE(r.ok()) << r.status();
    const int held = kind == ScheduleKind::k1F1B ? p : m;
    EXPECT_DOUBLE_EQ(r->devices[0].peak_memory_bytes, 100 + held * 10.0);
    if (kind == ScheduleKind::k1F1B) {
      EXPECT_DOUBLE_EQ(r->devices[p - 1].peak_memory_bytes, 100 + 10.0);  // last: one at a time
    }
  }
}

TEST(EvaluatorTest, BSplitFreesAllButWeightInputsAndRecomputeKeepsOnlyTheInput) {
  // One device, one stage, two micro-batches; activation 10 of which W needs 4; input 2.
  PipelineProblem pb = WithActivations(UniformProblem({0}, 1, 2, 1, 1, 1), 10, 4, 2);
  auto peak = [&](const PipelineProblem& p, std::vector<Op> ops) {
    Schedule s;
    s.ops = {ops};
    auto r = Simulate(p, s);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->devices[0].peak_memory_bytes : -1;
  };
  EXPECT_DOUBLE_EQ(peak(pb, {F(0, 0), F(0, 1), BW(0, 0), BW(0, 1)}), 20);
  // B frees 6, W the remaining 4: F0 B0 F1 holds 4 + 10.
  EXPECT_DOUBLE_EQ(peak(pb, {F(0, 0), B(0, 0), F(0, 1), W(0, 0), B(0, 1), W(0, 1)}), 14);
  EXPECT_DOUBLE_EQ(peak(pb, {F(0, 0), BW(0, 0), F(0, 1), BW(0, 1)}), 10);
  // Recompute: F keeps 2; R re-materialises the other 8 just before B.
  pb.recompute = {1};
  EXPECT_DOUBLE_EQ(
      peak(pb, {F(0, 0), F(0, 1), R(0, 0), B(0, 0), W(0, 0), R(0, 1), BW(0, 1)}), 12);
}

// Overlapped all-to-alls (forward_tail_s / backward_tail_s, 0.5 s each): an op's tail runs on
// the device's communication stream after its compute; the op's outputs (and the micro-batch's
// next op) wait for the tail. The device's next op starts at once beside it when it is of the
// other kind (a forward beside a backward's all-to-all and the other way round), and waits for
// it when it is of the same kind (nothing to pair with). One device, F 1 s, BW 3 s, three
// micro-batches: F0 [0,1]+[1,1.5]; F1 waits: [1.5,2.5]+[2.5,3]; BW0 [2.5,5.5]+[5.5,6]; F2
// [5.5,6.5]+[6.5,7]; BW1 [6.5,9.5]+[9.5,10]; BW2 waits: [10,13]+[13,13.5]. With the
// all-to-alls inside the ops: 3 x 1.5 + 3 x 3.5 = 15.
TEST(EvaluatorTest, CommunicationTailsOverlapTheDevicesNextOpOfTheOtherKind) {
  PipelineProblem pb = UniformProblem({0}, 1, 3, 1, 2, 1);
  pb.forward_tail_s = {0.5};
  pb.backward_tail_s = {0.5};
  Schedule s;
  s.ops = {{F(0, 0), F(0, 1), BW(0, 0), F(0, 2), BW(0, 1), BW(0, 2)}};
  auto r = Simulate(pb, s, {.timeline = true});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->iteration_time_s, 13.5);
  EXPECT_DOUBLE_EQ(r->op_start_s[0][1], 1.5);  // F1 waits for F0's tail
  EXPECT_DOUBLE_EQ(r->op_end_s[0][1], 3.0);
  EXPECT_DOUBLE_EQ(r->op_start_s[0][2], 2.5);  // BW0 beside F1's tail
  EXPECT_DOUBLE_EQ(r->op_start_s[0][3], 5.5);  // F2 beside BW0's
  EXPECT_DOUBLE_EQ(r->op_end_s[0][3], 7.0);
  EXPECT_DOUBLE_EQ(r->op_start_s[0][4], 6.5);
  EXPECT_DOUBLE_EQ(r->op_start_s[0][5], 10.0);  // BW2 waits for BW1's
  EXPECT_DOUBLE_EQ(r->op_end_s[0][5], 13.5);
  EXPECT_DOUBLE_EQ(r->devices[0].busy_s, 12.0);  // compute only
  // The same numbers with the all-to-alls inside the ops.
  PipelineProblem inline_comm = UniformProblem({0}, 1, 3, 1.5, 2.5, 1);
  auto r2 = Simulate(inline_comm, s);
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_DOUBLE_EQ(r2->iteration_time_s, 15.0);
  // The all-to-all kernels hold a fifth of the SMs (tail_compute_share): the op beside a tail
  // computes at 0.8 while it runs. BW0 beside F1's tail [2.5,3]: 3 + 0.2 x 0.5 -> [2.5,5.6]
  // +[5.6,6.1]; F2 beside BW0's [5.6,6.1] (compute 1 at 0.8 takes 1.25 > 0.5): 1 + 0.1 ->
  // [5.6,6.7]+[6.7,7.2]; BW1 beside it: [6.7,9.8]+[9.8,10.3]; BW2 waits: [10.3,13.3]+0.5.
  pb.tail_compute_share = {0.2};
  auto slowed = Simulate(pb, s, {.timeline = true});
  ASSERT_TRUE(slowed.ok()) << slowed.status();
  EXPECT_DOUBLE_EQ(slowed->op_end_s[0][2], 6.1);
  EXPECT_DOUBLE_EQ(slowed->op_end_s[0][3], 7.2);
  EXPECT_NEAR(slowed->iteration_time_s, 13.8, 1e-12);
  EXPECT_NEAR(slowed->devices[0].busy_s, 12.3, 1e-12);  // the slowed compute counts as busy
  // A micro-batch's next op waits for its tail: F0 then BW0 at once leaves nothing to overlap.
  PipelineProblem two = UniformProblem({0}, 1, 2, 1, 2, 1);
  two.forward_tail_s = {0.5};
  two.backward_tail_s = {0.5};
  Schedule serial;
  serial.ops = {{F(0, 0), BW(0, 0), F(0, 1), BW(0, 1)}};
  auto r3 = Simulate(two, serial);
  ASSERT_TRUE(r3.ok()) << r3.status();
  // F0 1 + its tail 0.5, BW0 3 (F1 overlaps its tail), F1 1 + its tail, BW1 3 + its tail.
  EXPECT_DOUBLE_EQ(r3->iteration_time_s, 1.5 + 3 + 1.5 + 3.5);
}

TEST(EvaluatorTest, TransfersAddLatencyPlusBytesOverBandwidth) {
  // 1F1B on 2 devices, 1 micro-batch: F0 [0,1], send, F1, BW1, send back, BW0.
  PipelineProblem pb = UniformProblem({0, 1}, 2, 1, 1, 1, 1);
  pb.output_bytes = {100, 0};
  pb.link_latency_s = {0, 0.5, 0.5, 0};
  pb.link_inv_bandwidth = {0, 0.01, 0.01, 0};  // 100 bytes/s
  Schedule s;
  s.ops = {{F(0, 0), BW(0, 0)}, {F(1, 0), BW(1, 0)}};
  auto r = Simulate(pb, s, {.timeline = true});
  ASSERT_TRUE(r.ok()) << r.status();
  // 1 + 1.5 + 1 + 2 + 1.5 + 2
  EXPECT_DOUBLE_EQ(r->iteration_time_s, 9.0);
  ASSERT_EQ(r->transfers.size(), 2u);
  EXPECT_DOUBLE_EQ(r->transfers[0].start_s, 1.0);
  EXPECT_DOUBLE_EQ(r->transfers[0].end_s, 2.5);
  EXPECT_EQ(r->transfers[0].consumer, F(1, 0));
  EXPECT_DOUBLE_EQ(r->op_start_s[1][0], 2.5);
  EXPECT_DOUBLE_EQ(r->devices[0].busy_s, 3.0);
  EXPECT_NEAR(r->bubble_ratio, 1.0 - 6.0 / 18.0, 1e-12);
}

TEST(EvaluatorTest, ContentionServesOneTransferAtATimePerLink) {
  // Stage 0 is free, so F0.0 and F0.1 both finish at 0 and their transfers (1 s) collide.
  PipelineProblem pb = UniformProblem({0, 1}, 2, 2, 0, 1, 1);
  pb.forward_s = {0.0, 0.1};
  pb.output_bytes = {1, 0};
  pb.link_latency_s = {0, 0, 0, 0};
  pb.link_inv_bandwidth = {0, 1, 1, 0};
  Schedule s;
  s.ops = {{F(0, 0), F(0, 1), BW(0, 0), BW(0, 1)}, {F(1, 0), F(1, 1), BW(1, 0), BW(1, 1)}};
  auto free_links = Simulate(pb, s, {.timeline = true});
  ASSERT_TRUE(free_links.ok());
  EXPECT_DOUBLE_EQ(free_links->op_start_s[1][1], 1.1);  // waits only for F1.0
  pb.link_contention = true;
  auto busy_links = Simulate(pb, s, {.timeline = true});
  ASSERT_TRUE(busy_links.ok()) << busy_links.status();
  EXPECT_DOUBLE_EQ(busy_links->op_start_s[1][1], 2.0);  // second transfer served after first
  EXPECT_GT(busy_links->iteration_time_s, free_links->iteration_time_s);
}

TEST(EvaluatorTest, ContentionOffAndOnAgreeWhenTransfersNeverOverlap) {
  auto g = GenerateSchedule(ScheduleKind::k1F1B, 4, 1, 8);
  ASSERT_TRUE(g.ok());
  PipelineProblem pb = UniformProblem(g->stage_device, 4, 8, 1, 1, 1);
  pb.output_bytes.assign(4, 10);
  pb.link_inv_bandwidth.assign(16, 0.001);
  for (int d = 0; d < 4; ++d) pb.link_inv_bandwidth[d * 4 + d] = 0;
  auto a = Simulate(pb, g->schedule);
  pb.link_contention = true;
  auto b = Simulate(pb, g->schedule);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NEAR(a->iteration_time_s, b->iteration_time_s, 1e-12);
}

TEST(EvaluatorTest, DeadlockOnOneDeviceNamesTheCycle) {
  PipelineProblem pb = UniformProblem({0, 1}, 2, 1, 1, 1, 1);
  Schedule s;
  s.ops = {{F(0, 0), BW(0, 0)}, {BW(1, 0), F(1, 0)}};  // backward before its own forward
  auto r = Simulate(pb, s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("deadlock"), absl::string_view::npos);
  EXPECT_NE(r.status().message().find("BW1.0 (device 1)"), absl::string_view::npos);
  EXPECT_NE(r.status().message().find("F1.0 (device 1)"), absl::string_view::npos);
}

TEST(EvaluatorTest, DeadlockAcrossDevicesNamesEveryOpOnTheCycle) {
  PipelineProblem pb = UniformProblem({0, 1}, 2, 2, 1, 1, 1);
  Schedule s;
  s.ops = {{F(0, 0), BW(0, 0), F(0, 1), BW(0, 1)}, {F(1, 1), BW(1, 1), F(1, 0), BW(1, 0)}};
  auto r = Simulate(pb, s);
  ASSERT_FALSE(r.ok());
  const std::string msg(r.status().message());
  for (const char* op : {"F1.1 (device 1)", "F0.1 (device 0)", "BW0.0 (device 0)",
                         "BW1.0 (device 1)"}) {
    EXPECT_NE(msg.find(op), std::string::npos) << op << " not in: " << msg;
  }
}

TEST(EvaluatorTest, RejectsMissingDuplicateAndMisplacedOps) {
  PipelineProblem pb = UniformProblem({0, 1}, 2, 1, 1, 1, 1);
  Schedule missing;
  missing.ops = {{F(0, 0), BW(0, 0)}, {F(1, 0)}};
  auto r = Simulate(pb, missing);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("BW1.0"), absl::string_view::npos) << r.status();

  Schedule duplicate;
  duplicate.ops = {{F(0, 0), F(0, 0), BW(0, 0)}, {F(1, 0), BW(1, 0)}};
  r = Simulate(pb, duplicate);
  EXPECT_NE(r.status().message().find("appears twice"), absl::string_view::npos) << r.status();

  Schedule misplaced;
  misplaced.ops = {{F(0, 0), BW(0, 0), F(1, 0)}, {BW(1, 0)}};
  r = Simulate(pb, misplaced);
  EXPECT_NE(r.status().message().find("placed on device 1"), absl::string_view::npos)
      << r.status();

  Schedule half_split;
  half_split.ops = {{F(0, 0), B(0, 0)}, {F(1, 0), BW(1, 0)}};
  r = Simulate(pb, half_split);
  EXPECT_NE(r.status().message().find("W0.0"), absl::string_view::npos) << r.status();

  Schedule out_of_range;
  out_of_range.ops = {{F(0, 3)}, {}};
  r = Simulate(pb, out_of_range);
  EXPECT_NE(r.status().message().find("micro-batch must be in [0, 0]"), absl::string_view::npos)
      << r.status();
}

// p devices, v stages each (V-shaped for v = 2 on every fourth trial, else looped), m
// micro-batches; F, B, W and output bytes drawn from [0.2, 2); every other stage recomputes when
// `recompute`; links cost 0.05 s + bytes x `inv_bandwidth`.
PipelineProblem RandomProblem(std::mt19937& rng, int trial, int p, int v, int m, bool recompute,
                              double inv_bandwidth) {
  std::uniform_real_distribution<double> cost(0.2, 2.0);
  std::vector<int> placement = v == 2 && trial % 4 == 1 ? VShapePlacement(p) : LoopPlacement(p, v);
  PipelineProblem pb = UniformProblem(placement, p, m, 1, 1, 1);
  for (int s = 0; s < pb.num_stages; ++s) {
    pb.forward_s[s] = cost(rng);
    pb.backward_input_s[s] = cost(rng);
    pb.weight_grad_s[s] = cost(rng);
    pb.recompute_s[s] = pb.forward_s[s];
    pb.output_bytes[s] = cost(rng);
    pb.recompute[s] = recompute && s % 2 == 0;
  }
  for (size_t i = 0; i < pb.link_latency_s.size(); ++i) {
    if (i % (p + 1) != 0) {
      pb.link_latency_s[i] = 0.05;
      pb.link_inv_bandwidth[i] = inv_bandwidth;
    }
  }
  return pb;
}

// The weighted list scheduler's order for `pb`, the backward split on even trials.
absl::StatusOr<ListScheduleResult> ListScheduled(const PipelineProblem& pb, int trial) {
  WeightedPolicy policy;
  ListSchedulerOptions options;
  options.split_backward = trial % 2 == 0;
  return ListSchedule(pb, policy, options);
}

TEST(EvaluatorTest, ListScheduledOrderReEvaluatesToTheSameTime) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    const int p = 2 + trial % 5, v = 1 + trial % 2, m = 3 + trial % 7;
    const PipelineProblem pb = RandomProblem(rng, trial, p, v, m, trial % 3 == 0, 0.1);
    auto ls = ListScheduled(pb, trial);
    ASSERT_TRUE(ls.ok()) << ls.status();
    auto r = Simulate(pb, ls->schedule);
    ASSERT_TRUE(r.ok()) << "trial " << trial << ": " << r.status();
    EXPECT_NEAR(r->iteration_time_s, ls->iteration_time_s, 1e-9) << "trial " << trial;
  }
}

// The executor runs iterations back to back with no barrier: each device starts iteration k+1
// right after its own last op of k (and once its inputs are there). Simulating K iterations
// unrolled (micro-batches m + kM, each device's order repeated) gives the true period, which the
// steady-state figure (the longest per-device span) bounds from above — iteration k+1 shifted
// by the span is always feasible — and the busiest device from below. So planning for the
// steady-state objective never counts on more overlap than the executor gets.
TEST(EvaluatorTest, SteadyStateSpanBoundsThePeriodOfBackToBackIterations) {
  std::mt19937 rng(11);
  int overlapping = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int p = 2 + trial % 4, v = 1 + trial % 2, m = 2 + trial % 6;
    const PipelineProblem pb = RandomProblem(rng, trial, p, v, m, false, 0);
    auto ls = ListScheduled(pb, trial);
    ASSERT_TRUE(ls.ok()) << ls.status();
    auto one = Simulate(pb, ls->schedule);
    ASSERT_TRUE(one.ok()) << one.status();
    std::vector<double> ends;  // end of iteration k = makespan of k unrolled iterations
    for (int k = 1; k <= 3; ++k) {
      PipelineProblem unrolled = pb;
      unrolled.num_microbatches = k * m;
      Schedule sched;
      sched.ops.resize(p);
      for (int d = 0; d < p; ++d) {
        for (int i = 0; i < k; ++i) {
          for (Op op : ls->schedule.ops[d]) {
            op.microbatch += i * m;
            sched.ops[d].push_back(op);
          }
        }
      }
      auto r = Simulate(unrolled, sched);
      ASSERT_TRUE(r.ok()) << r.status();
      ends.push_back(r->iteration_time_s);
    }
    double busiest = 0;
    for (const DeviceResult& dr : one->devices) busiest = std::max(busiest, dr.busy_s);
    for (int k = 1; k < 3; ++k) {
      const double period = ends[k] - ends[k - 1];
      EXPECT_LE(period, one->steady_state_iteration_time_s + 1e-9) << "trial " << trial;
      EXPECT_GE(period, busiest - 1e-9) << "trial " << trial;
    }
    if (ends[2] - ends[1] < one->iteration_time_s - 1e-6) ++overlapping;
  }
  // Iterations do overlap in many of these schedules: the isolated iteration over-predicts.
  EXPECT_GE(overlapping, 5);  // 9 of 40 with this seed
}

TEST(EvaluatorTest, CriticalPathRunsFromTheFirstToTheLastOp) {
  auto g = GenerateSchedule(ScheduleKind::k1F1B, 4, 1, 8);
  ASSERT_TRUE(g.ok());
  PipelineProblem pb = UniformProblem(g->stage_device, 4, 8, 1, 1, 1);
  auto r = Simulate(pb, g->schedule, {.timeline = false, .critical_path = true});
  ASSERT_TRUE(r.ok());
  ASSERT_FALSE(r->critical_path.empty());
  EXPECT_DOUBLE_EQ(r->critical_path.front().start_s, 0.0);
  EXPECT_DOUBLE_EQ(r->critical_path.back().end_s, r->iteration_time_s);
  for (size_t i = 1; i < r->critical_path.size(); ++i) {
    EXPECT_DOUBLE_EQ(r->critical_path[i].start_s, r->critical_path[i - 1].end_s);
  }
}

TEST(EvaluatorTest, SummaryAgreesWithFullEvaluation) {
  auto g = GenerateSchedule(ScheduleKind::kZbV, 4, 2, 8);
  ASSERT_TRUE(g.ok());
  PipelineProblem pb = UniformProblem(g->stage_device, 4, 8, 1, 1.5, 0.7);
  Evaluator ev;
  auto full = ev.Evaluate(pb, g->schedule);
  auto summary = ev.EvaluateSummary(pb, g->schedule);
  ASSERT_TRUE(full.ok() && summary.ok());
  EXPECT_DOUBLE_EQ(full->iteration_time_s, summary->iteration_time_s);
  EXPECT_DOUBLE_EQ(full->steady_state_iteration_time_s, summary->steady_state_iteration_time_s);
}

// The benchmark's largest case: interleaved 1F1B on 512 devices, 2 chunks, 2048 micro-batches
// (4.2 M ops), with transfers.
struct Large {
  GeneratedSchedule g;
  PipelineProblem pb;
};
const Large& LargeInterleaved() {
  static const Large* large = [] {
    const int p = 512, m = 4 * p;
    auto g = GenerateSchedule(ScheduleKind::kInterleaved, p, 2, m);
    auto* l = new Large{*g, UniformProblem(g->stage_device, p, m, 1.0e-3, 1.1e-3, 0.9e-3)};
    for (int s = 0; s < l->pb.num_stages; ++s) l->pb.output_bytes[s] = 64e6;
    for (size_t i = 0; i < l->pb.link_latency_s.size(); ++i) {
      if (i % (p + 1) != 0) {
        l->pb.link_latency_s[i] = 3e-6;
        l->pb.link_inv_bandwidth[i] = 1.0 / 450e9;
      }
    }
    return l;
  }();
  return *large;
}

TEST(EvaluatorTest, StopCheckEndsAFourMillionOpEvaluationEarly) {
  const Large& l = LargeInterleaved();
  const size_t n = l.g.schedule.total_ops();
  ASSERT_GT(n, 4000000u);
  Evaluator ev;
  // While preparing a new schedule: stopped at the third poll (3 x 4096 ops in).
  int polls = 0;
  const std::function<bool()> third = [&polls] { return ++polls == 3; };
  auto r = ev.EvaluateSummary(l.pb, l.g.schedule, {.should_stop = &third});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_EQ(polls, 3);
  EXPECT_NE(r.status().message().find("preparing"), absl::string_view::npos) << r.status();

  // Prepared (a full run), then the run itself stopped: after exactly 3 x 4096 ops.
  auto full = ev.EvaluateSummary(l.pb, l.g.schedule);
  ASSERT_TRUE(full.ok()) << full.status();
  polls = 0;
  r = ev.EvaluateSummary(l.pb, l.g.schedule, {.should_stop = &third});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_EQ(polls, 3);
  EXPECT_NE(r.status().message().find(absl::StrCat("after 12288 of ", n, " ops")),
            absl::string_view::npos)
      << r.status();

  // A deadline on a clock that moves 1 ms per reading (as FakeClock with a step does): a
  // 5 ms budget lasts 5 polls, 20480 ops.
  double now_s = 0;
  auto read_clock = [&now_s] { return (now_s += 1e-3) - 1e-3; };
  const double deadline = read_clock() + 5e-3;
  const std::function<bool()> budget = [&] { return read_clock() >= deadline; };
  r = ev.EvaluateSummary(l.pb, l.g.schedule, {.should_stop = &budget});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_NE(r.status().message().find(absl::StrCat("after 20480 of ", n, " ops")),
            absl::string_view::npos)
      << r.status();

  // A stopped run leaves nothing behind: the next one gives the full result again.
  const std::function<bool()> never = [] { return false; };
  auto again = ev.EvaluateSummary(l.pb, l.g.schedule, {.should_stop = &never});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->iteration_time_s, full->iteration_time_s);
  EXPECT_EQ(again->steady_state_iteration_time_s, full->steady_state_iteration_time_s);
}

TEST(EvaluatorTest, StopCheckEndsAnEventDrivenEvaluationEarly) {
  const Large& l = LargeInterleaved();
  Evaluator ev;
  EXPECT_TRUE(ev.EvaluateSummary(l.pb, l.g.schedule).ok());  // prepared (contention is not shape)
  PipelineProblem pb = l.pb;
  pb.link_contention = true;
  int polls = 0;
  const std::function<bool()> stop = [&polls] { return ++polls == 2; };
  auto r = ev.Evaluate(pb, l.g.schedule, {.timeline = true, .should_stop = &stop});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_EQ(polls, 2);
}

}  // namespace
}  // namespace octopipe
