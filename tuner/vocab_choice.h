// The tuner's choice about vocabulary parallelism (simulator/vocab_parallel.h) under
// VocabParallelMode::kAuto: tune once with the vocabulary layers on their stages and, when they
// are heavy enough to matter, once with them split over the devices (the output layer, and the
// input embedding when it is over the same vocabulary: one choice, since both shards are cut
// by the same columns and the split's reason — a lump one stage cannot balance — is the same);
// answer with the faster plan (a fitting plan is faster than one that does not fit).
//
// The head matters when its F+B+W per micro-batch is at least kMinHeadShare of one device's
// fair share of the whole model's work (total / P): below that, the partition already balances
// it away and the split only adds a broadcast and an all-reduce per micro-batch. The vocabulary
// layers matter for memory when their static bytes (weights, gradients, optimizer state of the
// head and of the embedding the split would spread) are at least kMinVocabMemoryShare of a
// device's usable memory: whole, each is a lump on one device that no partition spreads. When
// neither holds the split is not tried, unless the plan without it does not fit (then the split
// gets what is left of the budget). The budget is
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
inline constexpr double kMinVocabMemoryShare = 0.1;

// The head's F+B+W per micro-batch over (the whole model's / P), on the fastest device; 0 when
// the model does not end with a head.
double HeadShareOfDevice(const ProblemBuilder& plain);

// The static bytes of the layers a split would spread (the head; the embedding too when
// `with_embedding`) over a device's usable memory, the largest over the devices; 0 when the
// model does not end with a head or memory is unlimited.
double VocabMemoryShareOfDevice(const ProblemBuilder& plain, bool with_embedding);

// Tune with options.vocab_parallel kOff and, when worth it, kOn; the faster fitting answer,
// with TuneResult::vocab_parallel saying which and a "vocab" log entry saying why.
absl::StatusOr<TuneResult> TuneWithAndWithoutVocabParallel(const ModelGraph& model,
                                                           const Cluster& cluster,
                                                           const CostModel& cost_model,
                                                           const TunerOptions& options);

}  // namespace octopipe

#endif  // OCTOPIPE_TUNER_VOCAB_CHOICE_H_
