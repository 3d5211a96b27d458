// Profile importer: turns a measured per-layer profile (data/measured_profiles/*.json, the
// numbers published with the OctoPipe/AdaPtis PipelineSimulator; format in that folder's
// README) into a ModelGraph whose layers carry those times as measured costs.
//
// Contract:
//  - One ModelGraph layer per profile layer, in order (so partitions of the source's layer
//    list carry over). Times: forward_s = forward_ms / 1000; the source publishes only the
//    whole backward, so backward_input_s = weight_grad_s = backward_ms / 2000 — the split the
//    source's own zero-bubble baseline uses (B = W = 0.5 × backward). A plan that does not
//    split the backward sees BW = B + W = the measured backward.
//  - Kinds: each profile letter maps to one LayerKind (see profile_importer.cc): nemotron
//    M -> mamba2, - -> mlp, * -> attention; deepseek D -> mlp, M -> moe; gpt T and gpt-oss
//    F/S -> attention. A deepseek / gpt / gpt-oss layer is a whole transformer block (mixer +
//    FFN); the kind names its distinguishing part and the name lists all parts
//    ("L3.attention+moe (S)").
//  - Memory: the profiles carry none. Every layer gets the dims of its kind from the model's
//    published configuration (sources and assumptions in profile_importer.cc), so the cost
//    model computes its memory. Where a profile layer holds more than its kind — a whole block,
//    or an entry timed together with the embedding (+E) or the head (+H) — the importer also
//    sets measured activation_bytes / param_bytes / output_bytes to the cost model's sum over
//    the parts at the import's training options. Those three values are analytic, not measured,
//    and do not follow later changes of precision, TP degree or recompute policy.
//  - Training options: `options.training`, except seq_len (from the file) and
//    micro_batch_size (1, as profiled).
// Pure functions of their inputs (plus the file read); thread-safe.
#ifndef OCTOPIPE_CORE_PROFILE_IMPORTER_H_
#define OCTOPIPE_CORE_PROFILE_IMPORTER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/model_graph.h"

namespace octopipe {

struct ProfileImportOptions {
  // Precision, num_microbatches, tp_degree, recompute and zero_degree of the imported model;
  // seq_len and micro_batch_size are overridden (see above).
  TrainingOptions training;
  // Replace every plain layer's forward and backward time with the mean over the plain layers
  // of the same letter, as the source simulator does before use (preprocess_head_times);
  // +E / +H layers keep their own times. Off: the raw per-layer measurements.
  bool average_plain_layers = false;
};

// Profile models whose architecture the importer knows ("nemotron-nano-v2-9B", ...).
std::vector<std::string> KnownProfileModels();

// Parses a profile document (JSON via nlohmann-json). kInvalidArgument naming the JSON path
// ("layers[3].forward_ms") and the value for malformed JSON (including a key repeated in one
// object, or a number that overflows a double) or inconsistent input, an unknown model or an
// unknown letter.
absl::StatusOr<ModelGraph> ImportProfile(absl::string_view json_text,
                                         const ProfileImportOptions& options = {});

// Reads and parses a profile file; errors are prefixed with the path (kNotFound if missing).
absl::StatusOr<ModelGraph> ImportProfileFile(const std::string& path,
                                             const ProfileImportOptions& options = {});

}  // namespace octopipe

#endif  // OCTOPIPE_CORE_PROFILE_IMPORTER_H_
