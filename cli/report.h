// Rendering of simulation results for the CLI: the per-run JSON object and readable tables.
// One implementation, used by `simulate` and (later) `plan`.
#ifndef OCTOPIPE_CLI_REPORT_H_
#define OCTOPIPE_CLI_REPORT_H_

#include <string>

#include "core/json_text.h"
#include "core/model_graph.h"
#include "core/plan.h"
#include "simulator/evaluator.h"
#include "simulator/problem.h"

namespace octopipe::cli {

// One object: schedule, devices/stages/microbatches, iteration_time_s, bubble_ratio,
// steady_state_iteration_time_s, steady_state_bubble_ratio, tokens_per_s, fits_memory,
// devices[] (device, stages, busy_s, bubble_ratio, steady_state_bubble_ratio,
// peak_memory_bytes, memory_capacity_bytes, fits_memory), vocab_parallel and the critical path
// when present.
Json RunJson(const Plan& plan, const PipelineProblem& problem, const SimResult& result);

// Where the output layer runs, in one line: "output layer: split over P devices by vocabulary
// (vocabulary parallelism)" — "output layer and input embedding: ..." when `with_embedding`
// (the split also takes the embedding: SplitsEmbedding, simulator/vocab_parallel.h) — or on
// its last stage, adding whether splitting it was tried and lost ("tried: slower") when `tried`.
std::string VocabParallelLine(bool used, bool tried, int devices, bool with_embedding = false);

// Summary lines plus the per-device table.
std::string RenderRun(const Plan& plan, const PipelineProblem& problem,
                      const SimResult& result);

}  // namespace octopipe::cli

#endif  // OCTOPIPE_CLI_REPORT_H_
