// Schedule IR: per device, the ordered list of compute ops.
//
// An op is (kind, stage, micro-batch). `kBW` is an unsplit backward (B and W together); `kR`
// re-materialises a stage's activations before its B under full recompute. Communication is
// derived from the stage placement, never stored. Text form: "F3.7" is the forward of stage 3
// for micro-batch 7; kinds F, B, W, BW, R.
//
// Under vocabulary parallelism (simulator/vocab_parallel.h) the output layer is split over the
// devices by vocabulary, and two more kinds run on every device: `kS` (shard logits, local
// softmax max and sum, partial input gradient) and `kT` (the shard's weight gradient). Their
// `stage` field is the vocabulary shard, which is the device's own index: "S5.7" is shard 5's
// S pass for micro-batch 7, run by device 5.
#ifndef OCTOPIPE_CORE_SCHEDULE_H_
#define OCTOPIPE_CORE_SCHEDULE_H_

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"

namespace octopipe {

enum class OpKind : uint8_t { kF = 0, kB = 1, kW = 2, kBW = 3, kR = 4, kS = 5, kT = 6 };
inline constexpr int kNumOpKinds = 7;

// True for the vocabulary-parallel passes, whose `stage` is a vocabulary shard (= device).
inline constexpr bool IsVocabPass(OpKind kind) { return kind == OpKind::kS || kind == OpKind::kT; }

absl::string_view OpKindName(OpKind kind);
// The inverse of OpKindName: "F", "B", "W", "BW", "R", "S", "T" (exactly) -> OpKind. kInvalidArgument
// otherwise, naming the field `op_kind` and the value.
absl::StatusOr<OpKind> ParseOpKind(absl::string_view text);

struct Op {
  OpKind kind = OpKind::kF;
  int32_t stage = 0;
  int32_t microbatch = 0;

  friend bool operator==(const Op& a, const Op& b) {
    return a.kind == b.kind && a.stage == b.stage && a.microbatch == b.microbatch;
  }
  friend bool operator!=(const Op& a, const Op& b) { return !(a == b); }
};

std::string OpToString(const Op& op);
absl::StatusOr<Op> ParseOp(absl::string_view text);

// ops[d] is device d's order.
struct Schedule {
  std::vector<std::vector<Op>> ops;

  int num_devices() const { return static_cast<int>(ops.size()); }
  size_t total_ops() const;
};

}  // namespace octopipe

#endif  // OCTOPIPE_CORE_SCHEDULE_H_
