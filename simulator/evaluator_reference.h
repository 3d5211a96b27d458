// A frozen copy of the Evaluator as it was before its data layout was optimised (commit
// d45cb8b): pos_ lookups by op id, the rules called in the inner loop, one array per field.
// Tests only: evaluator_equivalence_test checks that the optimised Evaluator gives bit-identical
// results, errors and critical paths. Do not optimise this file; it is the yardstick.
// Same contract as simulator/evaluator.h (the result types are the Evaluator's).
#ifndef OCTOPIPE_SIMULATOR_EVALUATOR_REFERENCE_H_
#define OCTOPIPE_SIMULATOR_EVALUATOR_REFERENCE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/schedule.h"
#include "simulator/evaluator.h"
#include "simulator/pipeline_rules.h"
#include "simulator/problem.h"

namespace octopipe::evaluator_reference {

class ReferenceEvaluator {
 public:
  using Summary = Evaluator::Summary;

  ReferenceEvaluator() = default;
  ReferenceEvaluator(const ReferenceEvaluator&) = delete;
  ReferenceEvaluator& operator=(const ReferenceEvaluator&) = delete;

  // EvalOptions::timeline and critical_path only (no stop check).
  absl::StatusOr<SimResult> Evaluate(const PipelineProblem& problem, const Schedule& schedule,
                                     const EvalOptions& options = {});
  absl::StatusOr<Summary> EvaluateSummary(const PipelineProblem& problem,
                                          const Schedule& schedule);

 private:
  absl::Status Prepare(const PipelineProblem& problem, const Schedule& schedule);
  absl::Status CheckVocabPassesPresent(const PipelineProblem& problem) const;
  void ResetTiming(bool track_pred);
  absl::Status RunDag(const PipelineProblem& problem, bool track_pred);
  absl::Status RunEvents(const PipelineProblem& problem, bool track_pred, bool log_transfers);
  absl::Status CycleError(const PipelineProblem& problem, const Schedule& schedule) const;
  void ComputeMemory(const PipelineProblem& problem, const Schedule& schedule,
                     std::vector<double>* peak) const;
  Summary Summarize(const PipelineProblem& problem, const Schedule& schedule);
  // When its device may start the op after the one at q (on the same device): at q's compute
  // end, or at its tail's end when the two are of the same kind (TailOverlapsNext).
  double FreeAfter(const PipelineProblem& problem, int32_t q) const;
  // The tail the op at p computes beside: its device's previous op's, when of another kind.
  TailWindow WindowBefore(const PipelineProblem& problem, int32_t p) const;

  std::vector<int32_t> pos_;
  std::vector<Op> ops_;
  std::vector<int32_t> device_;
  std::vector<int32_t> pending_;
  std::vector<double> ready_;
  std::vector<double> start_;
  std::vector<double> end_;
  std::vector<double> compute_end_;  // end_ without the op's tail (OpTail)
  std::vector<double> comm_free_;    // per device: its communication stream's last tail end
  std::vector<int32_t> pred_;
  std::vector<uint8_t> pred_transfer_;
  std::vector<int32_t> cursor_;
  std::vector<int32_t> worklist_;
  std::vector<uint8_t> queued_;
  std::vector<int32_t> device_offset_;
  std::vector<TransferRecord> transfer_log_;
  std::vector<double> peak_;
  int S_ = 0, M_ = 0;
};

}  // namespace octopipe::evaluator_reference

#endif  // OCTOPIPE_SIMULATOR_EVALUATOR_REFERENCE_H_
