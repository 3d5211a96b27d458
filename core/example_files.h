// The example files under examples/: every zoo model, every measured profile and every cluster
// preset as the JSON that LoadModelFile / LoadClusterFile read. One function builds the whole
// set, so the generator (//core:write_examples) and the test that checks the committed files
// are current (//core:example_files_test) cannot disagree.
//
// Models use the example training options: seq_len 4096, micro_batch_size 1,
// num_microbatches 32, bf16, no TP, no recompute (profiles keep their file's seq_len).
// Stateless apart from reading the profiles directory; thread-safe.
#ifndef OCTOPIPE_CORE_EXAMPLE_FILES_H_
#define OCTOPIPE_CORE_EXAMPLE_FILES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model_graph.h"

namespace octopipe {

struct ExampleFile {
  std::string path;      // relative to the repository root, e.g. "examples/models/llama3-8b.json"
  std::string contents;  // the file's exact bytes
};

TrainingOptions ExampleTrainingOptions();

// Builds all example files, sorted by path. `profiles_dir` holds the measured profiles
// (data/measured_profiles); each "<model>.json" there becomes
// "examples/models/profile-<model>.json".
absl::StatusOr<std::vector<ExampleFile>> BuildExampleFiles(const std::string& profiles_dir);

}  // namespace octopipe

#endif  // OCTOPIPE_CORE_EXAMPLE_FILES_H_
