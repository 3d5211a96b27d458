#include "executor/core_rotation.h"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "executor/thread_priority.h"

namespace octopipe::executor {
namespace {

std::mutex process_mu;
std::vector<int>* process_cpus = nullptr;  // the process's CPU set before the first rotation

std::vector<int> CpusOf(pid_t tid) {
  std::vector<int> out;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(tid, sizeof(set), &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) out.push_back(c);
  }
  return out;
}

bool SetCpus(pid_t tid, const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  return sched_setaffinity(tid, sizeof(set), &set) == 0;
}

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int RotationCpu(int slot, int64_t epoch, const std::vector<int>& cpus) {
  if (cpus.empty() || slot < 0) return -1;
  const int64_t n = static_cast<int64_t>(cpus.size());
  return cpus[static_cast<size_t>(((slot + epoch) % n + n) % n)];
}

std::vector<int> AllowedCpus() { return CpusOf(0); }

CoreRotation::CoreRotation(int slot, int slots, double period_s, pid_t tid)
    : slot_(slot), period_s_(period_s) {
  tid_ = tid != 0 ? tid : static_cast<pid_t>(syscall(SYS_gettid));
  cpus_ = AllowedCpus();
  if (!(period_s > 0)) {
    reason_ = "off";
  } else if (slots < 2) {
    reason_ = "one rank on this machine";
  } else if (slot < 0 || slot >= slots) {
    reason_ = absl::StrCat("local rank ", slot, " not in [0, ", slots, ")");
  } else if (static_cast<int>(cpus_.size()) < slots) {
    reason_ = absl::StrCat(slots, " ranks on ", cpus_.size(), " allowed CPUs");
  }
  if (!reason_.empty()) return;
  original_ = CpusOf(tid_);
  if (original_.empty()) {
    reason_ = "cannot read the thread's CPU set";
    return;
  }
  {
    std::lock_guard<std::mutex> lock(process_mu);
    if (process_cpus == nullptr) process_cpus = new std::vector<int>(cpus_);
  }
  const int64_t epoch = static_cast<int64_t>(std::floor(SteadySeconds() / period_s_));
  if (!Pin(epoch)) {
    reason_ = "sched_setaffinity refused";
    return;
  }
  active_ = true;
  mover_ = std::thread([this] { Run(); });
}

CoreRotation::~CoreRotation() {
  if (!active_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  mover_.join();
  SetCpus(tid_, original_);
}

int64_t CoreRotation::moves() const {
  std::lock_guard<std::mutex> lock(mu_);
  return moves_;
}

void CoreRotation::ReleaseCallingThread() {
  std::vector<int> cpus;
  {
    std::lock_guard<std::mutex> lock(process_mu);
    if (process_cpus == nullptr) return;
    cpus = *process_cpus;
  }
  SetCpus(0, cpus);
}

bool CoreRotation::Pin(int64_t epoch) {
  if (!SetCpus(tid_, {RotationCpu(slot_, epoch, cpus_)})) return false;
  std::lock_guard<std::mutex> lock(mu_);
  ++moves_;
  return true;
}

void CoreRotation::Run() {
  // Wake at the boundary itself, ahead of the computing threads (a real-time thread preempts
  // them at once where the process may raise it).
  RaiseCommunicationThread();
  ReleaseCallingThread();
  std::unique_lock<std::mutex> lock(mu_);
  int64_t epoch = static_cast<int64_t>(std::floor(SteadySeconds() / period_s_));
  while (!stop_) {
    const auto next = std::chrono::steady_clock::time_point(
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::duration<double>((epoch + 1) * period_s_)));
    if (cv_.wait_until(lock, next, [this] { return stop_; })) break;
    epoch = static_cast<int64_t>(std::floor(SteadySeconds() / period_s_));
    lock.unlock();
    // A thread that ended (the rank finished) cannot be moved: nothing left to do.
    const bool ok = Pin(epoch);
    lock.lock();
    if (!ok) break;
  }
}

}  // namespace octopipe::executor
