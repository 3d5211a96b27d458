// Throughput of evaluating a fixed schedule: interleaved 1F1B with 2 chunks and 4 x devices
// micro-batches at 8, 64 and 512 devices, with transfers (latency + bytes/bandwidth). Reports
// ops/s (items_per_second) and seconds per op, so linearity in the op count is visible.
//   BM_EvaluateInterleaved             the same schedule every call (Prepare's structure reused)
//   BM_EvaluateInterleavedNewSchedule  a different schedule every call, as the tuner's candidates
//   BM_EvaluateInterleavedContention   with link contention (the event-driven pass; 8, 64)
//
//   bazel run -c opt //bench:evaluator_bench -- --benchmark_format=json
//
// Targets: >= 20 M ops/s on one core, >= 60 M at 64 devices and >= 30 M at 512. Current
// figures: docs/benchmarks.md.
#include <benchmark/benchmark.h>

#include <cstdlib>

#include "simulator/evaluator.h"
#include "simulator/problem.h"
#include "simulator/schedules.h"

namespace octopipe {
namespace {

struct Case {
  GeneratedSchedule g;
  PipelineProblem pb;
};

// Interleaved 1F1B, 2 chunks, M micro-batches on P devices; transfers of 64 MB over 450 GB/s
// links within a node of 8 and 50 GB/s between nodes.
absl::StatusOr<Case> MakeCase(int P, int M) {
  absl::StatusOr<GeneratedSchedule> gen = GenerateSchedule(ScheduleKind::kInterleaved, P, 2, M);
  if (!gen.ok()) return gen.status();
  PipelineProblem pb = UniformProblem(gen->stage_device, P, M, 1.0e-3, 1.1e-3, 0.9e-3);
  for (int s = 0; s < pb.num_stages; ++s) pb.output_bytes[s] = 64e6;
  for (int a = 0; a < P; ++a) {
    for (int b = 0; b < P; ++b) {
      if (a == b) continue;
      const bool same_node = a / 8 == b / 8;
      pb.link_latency_s[a * P + b] = same_node ? 3e-6 : 5e-6;
      pb.link_inv_bandwidth[a * P + b] = 1.0 / (same_node ? 450e9 : 50e9);
    }
  }
  return Case{std::move(*gen), std::move(pb)};
}

void SetCounters(benchmark::State& state, size_t ops_per_iteration) {
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * ops_per_iteration));
  state.counters["ops"] = static_cast<double>(ops_per_iteration);
  state.counters["seconds_per_op"] = benchmark::Counter(
      static_cast<double>(ops_per_iteration),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// The same schedule and problem every call (a search re-scoring one order, or a cost sweep):
// the evaluator keeps Prepare's structural work and re-reads only the numbers.
void EvaluateSameSchedule(benchmark::State& state, bool link_contention) {
  const int P = static_cast<int>(state.range(0));
  absl::StatusOr<Case> c = MakeCase(P, 4 * P);
  if (!c.ok()) {
    state.SkipWithError(std::string(c.status().message()).c_str());
    return;
  }
  c->pb.link_contention = link_contention;
  Evaluator evaluator;
  // Warm-up: the first call sizes the evaluator's scratch arrays (a search loop pays it once).
  auto warm = evaluator.EvaluateSummary(c->pb, c->g.schedule);
  if (!warm.ok()) {
    state.SkipWithError(std::string(warm.status().message()).c_str());
    return;
  }
  for (auto _ : state) {
    auto r = evaluator.EvaluateSummary(c->pb, c->g.schedule);
    benchmark::DoNotOptimize(r);
  }
  SetCounters(state, c->g.schedule.total_ops());
}

void BM_EvaluateInterleaved(benchmark::State& state) { EvaluateSameSchedule(state, false); }
BENCHMARK(BM_EvaluateInterleaved)->Arg(8)->Arg(64)->Arg(512)->Unit(benchmark::kMillisecond)->MinTime(1.0);

// A different schedule every call, as the tuner's candidates are: alternates 4P and 4P - 1
// micro-batches, so every call validates and prepares its schedule from scratch.
void BM_EvaluateInterleavedNewSchedule(benchmark::State& state) {
  const int P = static_cast<int>(state.range(0));
  absl::StatusOr<Case> a = MakeCase(P, 4 * P);
  absl::StatusOr<Case> b = MakeCase(P, 4 * P - 1);
  if (!a.ok() || !b.ok()) {
    state.SkipWithError(std::string((a.ok() ? b : a).status().message()).c_str());
    return;
  }
  Evaluator evaluator;
  auto warm = evaluator.EvaluateSummary(a->pb, a->g.schedule);
  if (!warm.ok()) {
    state.SkipWithError(std::string(warm.status().message()).c_str());
    return;
  }
  for (auto _ : state) {
    auto ra = evaluator.EvaluateSummary(b->pb, b->g.schedule);
    auto rb = evaluator.EvaluateSummary(a->pb, a->g.schedule);
    benchmark::DoNotOptimize(ra);
    benchmark::DoNotOptimize(rb);
  }
  SetCounters(state, a->g.schedule.total_ops() + b->g.schedule.total_ops());
}
BENCHMARK(BM_EvaluateInterleavedNewSchedule)
    ->Arg(8)
    ->Arg(64)
    ->Arg(512)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(1.0);

// With link contention: the event-driven pass (transfers served one at a time per link).
void BM_EvaluateInterleavedContention(benchmark::State& state) {
  EvaluateSameSchedule(state, true);
}
BENCHMARK(BM_EvaluateInterleavedContention)
    ->Arg(8)
    ->Arg(64)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(1.0);

}  // namespace
}  // namespace octopipe

BENCHMARK_MAIN();
