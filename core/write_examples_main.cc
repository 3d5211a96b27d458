// Writes examples/models/*.json and examples/clusters/*.json from the zoo, the measured
// profiles in data/measured_profiles and the cluster presets, and prints one line per file.
//
//   bazel run //core:write_examples            # writes into the workspace it is run from
//   bazel-bin/core/write_examples REPO_ROOT    # or into an explicit checkout
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/convert.h"
#include "core/cost_model.h"
#include "core/example_files.h"
#include "core/file_io.h"

int main(int argc, char** argv) {
  std::string root;
  if (argc == 2) {
    root = argv[1];
  } else if (const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY"); argc == 1 && ws) {
    root = ws;
  } else {
    std::fprintf(stderr, "usage: write_examples [REPO_ROOT] (default: the bazel run workspace)\n");
    return 2;
  }
  absl::StatusOr<std::vector<octopipe::ExampleFile>> files =
      octopipe::BuildExampleFiles(root + "/data/measured_profiles");
  if (!files.ok()) {
    std::fprintf(stderr, "write_examples: %s\n", files.status().ToString().c_str());
    return 1;
  }
  for (const octopipe::ExampleFile& f : *files) {
    const std::filesystem::path path = std::filesystem::path(root) / f.path;
    std::error_code ec;
    std::filesystem::create_directories(path.parent_path(), ec);
    absl::Status s = octopipe::WriteStringToFile(path.string(), f.contents);
    if (!s.ok()) {
      std::fprintf(stderr, "write_examples: %s\n", s.ToString().c_str());
      return 1;
    }
    // A one-line summary so a reviewer sees what changed in size.
    absl::StatusOr<octopipe::ModelGraph> m = octopipe::LoadModelFile(path.string());
    if (m.ok()) {
      // Parameters as the cost model sees them (measured param_bytes where present).
      const octopipe::CostModel cost_model;
      const octopipe::HardwareSpec any{"any", 1, 1, 1};
      double params = 0;
      for (const octopipe::Layer& l : m->layers) {
        params += cost_model.Cost(l, m->training, any).param_count;
      }
      std::printf("%-50s %4d layers  %9.3fe9 params\n", f.path.c_str(), m->num_layers(),
                  params / 1e9);
    } else {
      std::printf("%s\n", f.path.c_str());
    }
  }
  return 0;
}
