// Throughput of evaluating a fixed schedule: interleaved 1F1B with 2 chunks and 4 x devices
// micro-batches at 8, 64 and 512 devices, with transfers (latency + bytes/bandwidth). Reports
// ops/s (items_per_second) and seconds per op, so linearity in the op count is visible.
//
//   bazel run -c opt //bench:evaluator_bench -- --benchmark_format=json
//
// Target (issue 2): >= 20 million ops/s on one core.
#include <benchmark/benchmark.h>

#include <cstdlib>

#include "simulator/evaluator.h"
#include "simulator/problem.h"
#include "simulator/schedules.h"

namespace octopipe {
namespace {

void BM_EvaluateInterleaved(benchmark::State& state) {
  const int P = static_cast<int>(state.range(0));
  const int V = 2, M = 4 * P;
  auto gen = GenerateSchedule(ScheduleKind::kInterleaved, P, V, M);
  if (!gen.ok()) {
    state.SkipWithError(std::string(gen.status().message()).c_str());
    return;
  }
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
  Evaluator evaluator;
  const size_t ops = gen->schedule.total_ops();
  // Warm-up: the first call sizes the evaluator's scratch arrays (a search loop pays it once).
  auto warm = evaluator.EvaluateSummary(pb, gen->schedule);
  if (!warm.ok()) {
    state.SkipWithError(std::string(warm.status().message()).c_str());
    return;
  }
  for (auto _ : state) {
    auto r = evaluator.EvaluateSummary(pb, gen->schedule);
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * ops);
  state.counters["ops"] = static_cast<double>(ops);
  state.counters["seconds_per_op"] = benchmark::Counter(
      static_cast<double>(ops), benchmark::Counter::kIsIterationInvariantRate |
                                    benchmark::Counter::kInvert);
}
BENCHMARK(BM_EvaluateInterleaved)->Arg(8)->Arg(64)->Arg(512)->Unit(benchmark::kMillisecond)->MinTime(1.0);

}  // namespace
}  // namespace octopipe

BENCHMARK_MAIN();
