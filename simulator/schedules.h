// Generators of the classic pipeline schedules for any (devices P, chunks V, micro-batches M).
//
// Each generator returns the placement it assumes (stage -> device) together with the per-device
// op orders, so callers build a PipelineProblem with the same placement:
//   gpipe, 1f1b          V = 1, stage d on device d, unsplit backward (BW)
//   interleaved          V >= 1 chunks, stage c*P + d on device d (Megatron-LM order), BW;
//                        any M >= P (micro-batch groups of InterleavedGroupSize)
//   zb-h1, zb-h2         V = 1, split B/W (ZeroBubble, arXiv 2401.10241: H1 keeps 1F1B's
//                        memory, H2 allows about twice as much to remove the warm-up bubble)
//   zb-v                 V = 2, V-shaped placement (stage s on device s for s < P, else
//                        2P - 1 - s), split B/W, 1F1B's memory
//   dualpipev            V = 2, V-shaped placement, the DualPipeV step structure (DeepSeek
//                        DualPipe repository), mixing unsplit and split backwards; M >= 2P
// GenerateSchedule's orders do not depend on costs: the hand-written ones follow their papers;
// the ZB family is built by ZeroBubble's own builders (simulator/zb_schedules.h) at unit
// F = B = W costs. ScheduleForProblem builds the ZB family FOR a problem's real costs, as
// ZeroBubble does; that is what baselines must use. Any order evaluated with real costs stays
// deadlock-free.
#ifndef OCTOPIPE_SIMULATOR_SCHEDULES_H_
#define OCTOPIPE_SIMULATOR_SCHEDULES_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/schedule.h"
#include "simulator/problem.h"

namespace octopipe {

enum class ScheduleKind { kGpipe, k1F1B, kInterleaved, kZbH1, kZbH2, kZbV, kDualPipeV };

absl::string_view ScheduleKindName(ScheduleKind kind);
// "gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "dualpipev".
absl::StatusOr<ScheduleKind> ParseScheduleKind(absl::string_view name);
std::vector<ScheduleKind> AllScheduleKinds();

// Chunks per device the schedule uses when the caller does not choose (interleaved: 2).
int DefaultChunks(ScheduleKind kind);
// Whether the schedule separates B from W.
bool SplitsBackward(ScheduleKind kind);
// Whether ScheduleForProblem builds the order for the problem's costs (ZB-H1, ZB-H2, ZB-V);
// such an order already has R right before each recomputed stage's B. The other kinds' orders
// are GenerateSchedule's, without R ops.
bool BuiltForCosts(ScheduleKind kind);

struct GeneratedSchedule {
  ScheduleKind kind;
  int num_devices = 0;
  int num_chunks = 0;
  int num_stages = 0;
  std::vector<int> stage_device;
  Schedule schedule;
};

// Errors are kInvalidArgument naming the parameter ("chunks", "microbatches", "devices") and
// the rule it breaks.
absl::StatusOr<GeneratedSchedule> GenerateSchedule(ScheduleKind kind, int devices, int chunks,
                                                   int microbatches);

// The order of `kind` for this problem, whose placement must be the generator's (stage_device
// as GenerateSchedule returns it for problem.num_devices and `chunks`): ZB-H1, ZB-H2 and ZB-V
// built for the problem's per-stage costs, transfer times and their memory limits
// (ZeroBubbleH with 1 or 2 x P pending activations, ZeroBubbleV); the other kinds' orders do
// not depend on costs and are GenerateSchedule's. GenerateSchedule's errors, kInvalidArgument
// for another placement, the ZB builders' errors.
absl::StatusOr<Schedule> ScheduleForProblem(ScheduleKind kind, int chunks,
                                            const PipelineProblem& problem);

// Megatron-LM's micro-batch group size for interleaving (microbatch_group_size_per_vp_stage):
// it must lie in [P, M] and leave a last group of 0 or >= P micro-batches; this is the smallest
// such size (P when M is a multiple of P, as Megatron's default). Requires M >= P.
int InterleavedGroupSize(int devices, int microbatches);

// Placements used above, exposed for the tuner and tests.
std::vector<int> LoopPlacement(int devices, int chunks);  // stage c*P + d -> d
std::vector<int> VShapePlacement(int devices);            // 2P stages, V-shaped

}  // namespace octopipe

#endif  // OCTOPIPE_SIMULATOR_SCHEDULES_H_
