#include "executor/thread_priority.h"

#include <pthread.h>

#include <cstdlib>
#include <cstring>

namespace octopipe::executor {

bool CommunicationPriorityEnabled() {
  const char* v = std::getenv("OCTOPIPE_COMM_PRIORITY");
  return v == nullptr || std::strcmp(v, "normal") != 0;
}

bool RaiseCommunicationThread() {
  if (!CommunicationPriorityEnabled()) return false;
  sched_param p{};
  p.sched_priority = sched_get_priority_min(SCHED_FIFO);
  return pthread_setschedparam(pthread_self(), SCHED_FIFO, &p) == 0;
}

ScopedCommunicationPriority::ScopedCommunicationPriority() {
  if (pthread_getschedparam(pthread_self(), &old_policy_, &old_param_) != 0) return;
  raised_ = RaiseCommunicationThread();
}

ScopedCommunicationPriority::~ScopedCommunicationPriority() {
  if (raised_) pthread_setschedparam(pthread_self(), old_policy_, &old_param_);
}

}  // namespace octopipe::executor
