// The tuner's choice about vocabulary parallelism (simulator/vocab_parallel.h) under
// VocabParallelMode::kAuto: tune once with the output layer on its stage and, when the head is
// heavy enough to matter, once with it split over the devices; answer with the faster plan.
//
// The head matters when its F+B+W per micro-batch is at least kMinHeadShare of one device's
// fair share of the whole model's work (total / P): below that, the partition already balances
// it away and the split only adds a broadcast and an all-reduce per micro-batch. The budget is
// split evenly between the two searches (the second gets what the first left). Both searches
// see the same baselines (never split), so the speed-up compares like with like; the lower
// bound reported is the one that allows the split (the smaller). Thread-safe, like Tune.
#ifndef OCTOPIPE_TUNER_VOCAB_CHOICE_H_
#define OCTOPIPE_TUNER_VOCAB_CHOICE_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/cluster.h"
#include "core/cost_model.h"
#include "core/model_graph.h"
#include "simulator/problem_builder.h"
#include "tuner/tuner.h"

namespace octopipe {

inline constexpr double kMinHeadShare = 0.25;

// "auto" (or empty), "on", "off" -> the mode; kInvalidArgument "vocab_parallel must be auto, on
// or off, got '...'" otherwise (callers prefix the flag or field name's path).
absl::StatusOr<VocabParallelMode> ParseVocabParallelMode(absl::string_view text);

// The head's F+B+W per micro-batch over (the whole model's / P), on the fastest device; 0 when
// the model does not end with a head.
double HeadShareOfDevice(const ProblemBuilder& plain);

// Tune with options.vocab_parallel kOff and, when worth it, kOn; the faster fitting answer,
// with TuneResult::vocab_parallel saying which and a "vocab" log entry saying why.
absl::StatusOr<TuneResult> TuneWithAndWithoutVocabParallel(const ModelGraph& model,
                                                           const Cluster& cluster,
                                                           const CostModel& cost_model,
                                                           const TunerOptions& options);

}  // namespace octopipe

#endif  // OCTOPIPE_TUNER_VOCAB_CHOICE_H_
