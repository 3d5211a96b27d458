// Scheduling priority of the executor's communication threads.
//
// A rank runs one compute thread and Gloo's event-loop thread that reads the sockets (and, on
// transports without started messages, a sending and a receiving thread per peer:
// executor/async_messages.h). On a host where every core runs a compute thread (the 2-rank
// Gloo runs on a 2-core machine), a message's wake-ups may each wait for a running compute
// thread's time slice to end with the fair scheduler: measured (`train --trace`, when each
// message passed three threads), 3 of 14 waited-for messages took 6-7 ms where the rest took
// 0.2-0.6 ms. The communication threads do little work (they block on sockets and condition
// variables and copy the message), so they run under SCHED_FIFO at the lowest real-time
// priority: a wake-up then preempts a compute thread at once, and the kernel's real-time
// throttling still bounds them. A compute thread that starts a Gloo message holds the link's
// lock for that call at the same priority (ScopedCommunicationPriority in GlooTransport), so the
// event loop never preempts a lock holder and spins.
//
// Where the process may not use real-time scheduling (no CAP_SYS_NICE, RLIMIT_RTPRIO 0) the
// threads keep their normal priority: runs are then correct but message latency has the tail
// above. OCTOPIPE_COMM_PRIORITY=normal in the environment turns it off (to measure the effect).
#ifndef OCTOPIPE_EXECUTOR_THREAD_PRIORITY_H_
#define OCTOPIPE_EXECUTOR_THREAD_PRIORITY_H_

#include <sched.h>

namespace octopipe::executor {

// Whether communication threads are to be raised (false when OCTOPIPE_COMM_PRIORITY=normal).
bool CommunicationPriorityEnabled();

// Moves the calling thread to SCHED_FIFO priority 1 when enabled and permitted. Returns whether
// it did; never fails otherwise (the thread keeps its policy).
bool RaiseCommunicationThread();

// Raises the calling thread for its scope and restores its policy after, so that threads it
// creates meanwhile (Gloo's event loop, created with its device) inherit the raised policy.
class ScopedCommunicationPriority {
 public:
  ScopedCommunicationPriority();
  ~ScopedCommunicationPriority();
  ScopedCommunicationPriority(const ScopedCommunicationPriority&) = delete;
  ScopedCommunicationPriority& operator=(const ScopedCommunicationPriority&) = delete;

  bool raised() const { return raised_; }

 private:
  bool raised_ = false;
  int old_policy_ = SCHED_OTHER;
  sched_param old_param_{};
};

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_THREAD_PRIORITY_H_
