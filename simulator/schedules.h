// Generators of the classic pipeline schedules for any (devices P, chunks V, micro-batches M).
//
// Each generator returns the placement it assumes (stage -> device) together with the per-device
// op orders, so callers build a PipelineProblem with the same placement:
//   gpipe, 1f1b          V = 1, stage d on device d, unsplit backward (BW)
//   interleaved          V >= 1 chunks, stage c*P + d on device d (Megatron-LM order), BW
//   zb-h1, zb-h2         V = 1, split B/W (ZeroBubble, arXiv 2401.10241: H1 keeps 1F1B's
//                        memory, H2 allows about twice as much to remove the warm-up bubble)
//   zb-v                 V = 2, V-shaped placement (stage s on device s for s < P, else
//                        2P - 1 - s), split B/W, 1F1B's memory
//   dualpipev            V = 2, V-shaped placement, the DualPipeV step structure (DeepSeek
//                        DualPipe repository), mixing unsplit and split backwards; M >= 2P
// The orders do not depend on costs: the hand-written ones follow their papers; the ZB family
// is built by the list scheduler at unit F = B = W costs with the memory cap of its paper, as
// ZeroBubble's own heuristic does. Any of them evaluated with real costs stays deadlock-free.
#ifndef OCTOPIPE_SIMULATOR_SCHEDULES_H_
#define OCTOPIPE_SIMULATOR_SCHEDULES_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/schedule.h"

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

// Placements used above, exposed for the tuner and tests.
std::vector<int> LoopPlacement(int devices, int chunks);  // stage c*P + d -> d
std::vector<int> VShapePlacement(int devices);            // 2P stages, V-shaped

}  // namespace octopipe

#endif  // OCTOPIPE_SIMULATOR_SCHEDULES_H_
