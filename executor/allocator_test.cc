#include "executor/allocator.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>

#include "gtest/gtest.h"

namespace octopipe::executor {
namespace {

// A 16 MiB block (an activation of a large micro-batch) comes from the heap, not from a fresh
// mmap, and freeing it keeps the heap: the next op that allocates it touches no new page.
// Without RetainFreedMemory glibc maps such a block on its own (hblks + 1) and unmaps it on free.
TEST(AllocatorTest, LargeBlocksAreReusedNotMappedAndUnmapped) {
  RetainFreedMemory();
  RetainFreedMemory();  // idempotent
  const size_t kBytes = size_t{16} << 20;
  const struct mallinfo2 before = mallinfo2();
  char* block = static_cast<char*>(std::malloc(kBytes));
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, kBytes);
  const struct mallinfo2 during = mallinfo2();
  EXPECT_EQ(during.hblks, before.hblks) << "the block was mmapped on its own";
  EXPECT_GE(during.arena, before.arena + kBytes);
  std::free(block);
  const struct mallinfo2 after = mallinfo2();
  EXPECT_EQ(after.arena, during.arena) << "the heap was trimmed after the free";
  EXPECT_GE(after.fordblks, kBytes) << "the freed block is kept for reuse";
}

}  // namespace
}  // namespace octopipe::executor
