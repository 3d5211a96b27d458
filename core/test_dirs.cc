#include "core/test_dirs.h"

#include <cstdlib>
#include <filesystem>

namespace octopipe::testing {

std::string TestPath(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  if (root == nullptr || *root == '\0') root = std::getenv("TMPDIR");
  if (root == nullptr || *root == '\0') root = "/tmp";
  return std::string(root) + "/" + name;
}

std::string TestDir(const std::string& name) {
  const std::string dir = TestPath(name);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string FreshTestDir(const std::string& name) {
  const std::string dir = TestPath(name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace octopipe::testing
