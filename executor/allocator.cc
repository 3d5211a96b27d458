#include "executor/allocator.h"

#include <malloc.h>

#include <mutex>

namespace octopipe::executor {

void RetainFreedMemory() {
  static std::once_flag once;
  std::call_once(once, [] {
    mallopt(M_MMAP_THRESHOLD, 1 << 30);     // blocks below 1 GiB come from the heap
    mallopt(M_TRIM_THRESHOLD, 0x7fffffff);  // never give the heap's top back
    mallopt(M_TOP_PAD, 64 << 20);           // grow the heap in 64 MiB steps
  });
}

}  // namespace octopipe::executor
