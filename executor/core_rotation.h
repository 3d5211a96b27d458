// Core rotation: the computing threads of the ranks on one machine take turns on its cores.
//
// On a shared virtual machine one virtual CPU can run 15-35% slower than the other for tens of
// seconds at a time (measured on the 2-core development VM: a GEMM probe pinned to CPU 0 took
// 5.7 ms and pinned to CPU 1 4.3 ms; a minute later the other way round; a scalar loop saw no
// difference, so the host's other tenants share the vector units or caches). A rank's
// computing thread stays on the core it started on, so a whole run has one slow rank, which one
// varies from launch to launch, and a plan balanced for the profile's mean core runs at the
// slow core's speed. With rotation, local rank `slot` runs on allowed CPU (slot + epoch) mod n,
// epoch = floor(steady clock / period): every rank spends equal time on every core, so each
// runs at the mean core's speed, which is what `octopipe profile` (its launches mirrored, and
// rotating too) measures. All ranks read the same machine-wide steady clock, so they change
// cores together and never share one (between boundaries).
//
// A CoreRotation moves one thread (the rank's computing thread, by its kernel thread id) from a
// small thread of its own that wakes at each boundary; the communication threads are left to
// the scheduler (CoreRotation::ReleaseCallingThread gives a thread created by a pinned thread
// the process's full CPU set back). Only on Linux; elsewhere, or with fewer CPUs than ranks, or
// when the process may not change affinity, it does nothing and says why (active() == false,
// reason()).
#ifndef OCTOPIPE_EXECUTOR_CORE_ROTATION_H_
#define OCTOPIPE_EXECUTOR_CORE_ROTATION_H_

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace octopipe::executor {

// The CPU local rank `slot` uses in `epoch`: cpus[(slot + epoch) mod cpus.size()]. -1 when
// there are no CPUs or slot < 0.
int RotationCpu(int slot, int64_t epoch, const std::vector<int>& cpus);

// The CPUs this process may run on (sched_getaffinity), ascending.
std::vector<int> AllowedCpus();

class CoreRotation {
 public:
  // Rotates thread `tid` (0: the calling thread) as local rank `slot` of `slots` over the
  // allowed CPUs every `period_s` seconds. Inactive when period_s <= 0, slots < 2, slots > the
  // number of allowed CPUs, or slot is not in [0, slots).
  CoreRotation(int slot, int slots, double period_s, pid_t tid = 0);
  ~CoreRotation();  // stops, and gives the thread its CPU set back
  CoreRotation(const CoreRotation&) = delete;
  CoreRotation& operator=(const CoreRotation&) = delete;

  bool active() const { return active_; }
  const std::string& reason() const { return reason_; }  // why inactive ("" when active)
  int64_t moves() const;  // affinity changes made so far

  // Gives the calling thread the CPU set the process had before any rotation started (threads
  // inherit their creator's affinity; a communication thread created by a rotated computing
  // thread would otherwise stay on one core). No-op when no rotation was ever started.
  static void ReleaseCallingThread();

 private:
  void Run();
  bool Pin(int64_t epoch);

  const int slot_;
  const double period_s_;
  pid_t tid_ = 0;
  std::vector<int> cpus_;
  std::vector<int> original_;  // the thread's CPU set before rotation
  bool active_ = false;
  std::string reason_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  int64_t moves_ = 0;
  std::thread mover_;
};

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_CORE_ROTATION_H_
