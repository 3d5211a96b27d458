// Scratch paths for tests, under Bazel's per-test TEST_TMPDIR (TMPDIR, else /tmp, when a test
// binary runs outside Bazel). One definition for every test that writes files.
#ifndef OCTOPIPE_CORE_TEST_DIRS_H_
#define OCTOPIPE_CORE_TEST_DIRS_H_

#include <string>

namespace octopipe::testing {

// The scratch root joined with `name`; nothing is created (a file's path, or a directory the
// code under test makes).
std::string TestPath(const std::string& name);

// TestPath(name) as a directory, created if missing; what it holds is kept (a node's directory
// across an agent's restart).
std::string TestDir(const std::string& name);

// TestPath(name) as an empty directory: whatever was there is removed, then it is created.
std::string FreshTestDir(const std::string& name);

}  // namespace octopipe::testing

#endif  // OCTOPIPE_CORE_TEST_DIRS_H_
