// VocabParallelMode: whether the tuner splits the output layer over the devices (vocabulary
// parallelism, simulator/vocab_parallel.h). One enum for the tuner, the CLI and the service;
// its text form is the `--vocab_parallel` flag's value. Conversion to the wire enum
// (PlanOptions.vocab_parallel) is in core/convert.h.
#ifndef OCTOPIPE_CORE_VOCAB_PARALLEL_MODE_H_
#define OCTOPIPE_CORE_VOCAB_PARALLEL_MODE_H_

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace octopipe {

enum class VocabParallelMode {
  kAuto,  // tried when the head is heavy enough to matter; the faster plan kept (the default)
  kOff,
  kOn,
};

// "auto", "off", "on".
inline absl::string_view VocabParallelModeName(VocabParallelMode mode) {
  switch (mode) {
    case VocabParallelMode::kOff: return "off";
    case VocabParallelMode::kOn: return "on";
    default: return "auto";
  }
}

// The inverse of VocabParallelModeName (empty: auto); kInvalidArgument "vocab_parallel must be
// auto, on or off, got '...'" otherwise (callers prefix the flag or field name's path).
inline absl::StatusOr<VocabParallelMode> ParseVocabParallelMode(absl::string_view text) {
  if (text.empty()) return VocabParallelMode::kAuto;
  for (VocabParallelMode m :
       {VocabParallelMode::kAuto, VocabParallelMode::kOff, VocabParallelMode::kOn}) {
    if (text == VocabParallelModeName(m)) return m;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("vocab_parallel must be auto, on or off, got '", text, "'"));
}

}  // namespace octopipe

#endif  // OCTOPIPE_CORE_VOCAB_PARALLEL_MODE_H_
