#include "core/example_files.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/cluster_presets.h"
#include "core/convert.h"
#include "core/model_zoo.h"
#include "core/profile_importer.h"
#include "core/status_macros.h"

namespace octopipe {

TrainingOptions ExampleTrainingOptions() {
  TrainingOptions t;
  t.seq_len = 4096;
  t.micro_batch_size = 1;
  t.num_microbatches = 32;
  t.precision = Precision::kBf16;
  return t;
}

absl::StatusOr<std::vector<ExampleFile>> BuildExampleFiles(const std::string& profiles_dir) {
  std::vector<ExampleFile> files;
  for (const std::string& name : ZooModelNames()) {
    ASSIGN_OR_RETURN(const ModelGraph m, ZooModel(name, ExampleTrainingOptions()));
    files.push_back({absl::StrCat("examples/models/", name, ".json"),
                     ProtoToJson(ModelToProto(m)) + "\n"});
  }

  std::error_code ec;
  std::vector<std::string> profiles;
  for (const auto& entry : std::filesystem::directory_iterator(profiles_dir, ec)) {
    const std::string file = entry.path().filename().string();
    if (absl::EndsWith(file, ".json")) profiles.push_back(file);
  }
  if (ec) {
    return absl::NotFoundError(
        absl::StrCat("profiles directory '", profiles_dir, "': ", ec.message()));
  }
  std::sort(profiles.begin(), profiles.end());
  ProfileImportOptions options;
  options.training = ExampleTrainingOptions();
  for (const std::string& file : profiles) {
    ASSIGN_OR_RETURN(const ModelGraph m,
                     ImportProfileFile(absl::StrCat(profiles_dir, "/", file), options));
    files.push_back({absl::StrCat("examples/models/", m.name, ".json"),
                     ProtoToJson(ModelToProto(m)) + "\n"});
  }

  for (const std::string& name : ClusterPresetNames()) {
    ASSIGN_OR_RETURN(const Cluster c, ClusterPreset(name));
    files.push_back({absl::StrCat("examples/clusters/", name, ".json"),
                     ProtoToJson(ClusterToProto(c)) + "\n"});
  }
  std::sort(files.begin(), files.end(),
            [](const ExampleFile& a, const ExampleFile& b) { return a.path < b.path; });
  return files;
}

}  // namespace octopipe
