// RetainFreedMemory: the allocator policy of a process that runs pipeline ops.
//
// An op allocates its activations and gradients (up to tens of MiB per micro-batch) and a later
// op frees them. With glibc's defaults a block over the mmap threshold (128 KiB, adapted
// upwards at run time) is a fresh mmap, and free space at the top of the heap is returned to the
// kernel: either way the next op that allocates it page-faults every page again (the kernel
// zeroes each one). Measured on the 2-rank Gloo runs of bench/measured_win.sh, ops ran 1.1x-2.5x
// slower than `octopipe profile` had timed them, differently per schedule (GPipe's forwards, which
// allocate the most, 2.5x), and repeats of one schedule differed by up to 53%; with freed memory
// kept for reuse, the runs' ops match the profile and repeats agree within a few percent.
//
// So a process that runs ops keeps what it frees: no mmap per block below 1 GiB, no trimming of
// the heap's top. The memory a rank holds is then its peak, which is what the planner budgets
// for anyway (peak activations + static). Idempotent and cheap; process-wide (mallopt), so
// PipelineEngine calls it for every process that runs ops, and ranks forked after it inherit it.
#ifndef OCTOPIPE_EXECUTOR_ALLOCATOR_H_
#define OCTOPIPE_EXECUTOR_ALLOCATOR_H_

namespace octopipe::executor {

void RetainFreedMemory();

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_ALLOCATOR_H_
