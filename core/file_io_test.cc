// Pins the status codes callers branch on: kNotFound for a missing file, kFailedPrecondition
// for a path that cannot be read or written.
#include "core/file_io.h"

#include <cstdlib>

#include "core/test_dirs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace octopipe {
namespace {

using ::octopipe::testing::TestDir;
using ::octopipe::testing::TestPath;
using ::testing::HasSubstr;

TEST(FileIoTest, WriteThenReadRoundTrips) {
  const std::string path = TestPath("file_io_test.txt");
  ASSERT_TRUE(WriteStringToFile(path, std::string("a\0b\n", 4)).ok());
  absl::StatusOr<std::string> s = ReadFileToString(path);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(std::string("a\0b\n", 4), *s);
  ASSERT_TRUE(WriteStringToFile(path, "shorter").ok());
  EXPECT_EQ("shorter", *ReadFileToString(path));
}

TEST(FileIoTest, MissingFileIsNotFoundAndNamesThePath) {
  const std::string path = TestPath("no/such/file.json");
  absl::StatusOr<std::string> s = ReadFileToString(path);
  EXPECT_EQ(absl::StatusCode::kNotFound, s.status().code());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr(path));
}

TEST(FileIoTest, DirectoryOrMissingParentIsFailedPrecondition) {
  EXPECT_EQ(absl::StatusCode::kFailedPrecondition,
            ReadFileToString(TestDir("a-directory")).status().code());
  absl::Status w = WriteStringToFile(TestPath("missing-dir/x.json"), "x");
  EXPECT_EQ(absl::StatusCode::kFailedPrecondition, w.code());
  EXPECT_THAT(std::string(w.message()), HasSubstr("missing-dir/x.json"));
}

}  // namespace
}  // namespace octopipe
