#include "worker_agent/rank_launcher.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace octopipe::agent {

RankLauncher::~RankLauncher() {
  KillAll();
  for (Proc& p : procs_) {
    if (!p.exited) {
      while (waitpid(p.pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
  }
}

absl::Status RankLauncher::Start(const std::string& run_dir, const std::vector<LocalRank>& ranks) {
  if (active()) return absl::FailedPreconditionError("a run is already active on this node");
  run_dir_ = run_dir;
  const pid_t parent = getpid();
  for (const LocalRank& r : ranks) {
    std::vector<std::string> args = {binary_, "--rank_run_dir=" + run_dir,
                                     absl::StrCat("--rank=", r.rank),
                                     absl::StrCat("--rank_device=", r.local_device)};
    const pid_t pid = fork();
    if (pid < 0) {
      const std::string why = std::strerror(errno);
      KillAll();
      Poll();
      return absl::InternalError(absl::StrCat("cannot start rank ", r.rank, ": fork: ", why));
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);  // the agent died before prctl took effect
      signal(SIGUSR1, SIG_IGN);  // until the rank installs its handler (the agent repeats)
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(binary_.c_str(), argv.data());
      _exit(127);
    }
    procs_.push_back(Proc{r, pid});
  }
  return absl::OkStatus();
}

bool RankLauncher::HoldsRank(int rank) const {
  for (const Proc& p : procs_) {
    if (p.rank.rank == rank && !p.exited) return true;
  }
  return false;
}

std::vector<pid_t> RankLauncher::pids() const {
  std::vector<pid_t> out;
  for (const Proc& p : procs_) {
    if (!p.exited) out.push_back(p.pid);
  }
  return out;
}

void RankLauncher::RequestStop() {
  for (const Proc& p : procs_) {
    if (p.rank.rank == 0 && !p.exited) kill(p.pid, SIGUSR1);
  }
}

void RankLauncher::KillAll() {
  for (const Proc& p : procs_) {
    if (!p.exited) kill(p.pid, SIGKILL);
  }
}

absl::optional<std::vector<RankOutcome>> RankLauncher::Poll() {
  if (procs_.empty()) return absl::nullopt;
  bool all = true;
  for (Proc& p : procs_) {
    if (p.exited) continue;
    int status = 0;
    const pid_t w = waitpid(p.pid, &status, WNOHANG);
    if (w == p.pid || (w < 0 && errno == ECHILD)) {
      p.exited = true;
      p.status = status;
    } else {
      all = false;
    }
  }
  if (!all) return absl::nullopt;
  std::vector<RankOutcome> outcomes;
  for (const Proc& p : procs_) {
    absl::StatusOr<std::string> text =
        ReadWholeFile(absl::StrCat(run_dir_, "/rank-", p.rank.rank, ".result.json"));
    absl::StatusOr<RankOutcome> o =
        text.ok() ? ParseRankOutcome(*text) : absl::StatusOr<RankOutcome>(text.status());
    if (o.ok()) {
      outcomes.push_back(std::move(*o));
      continue;
    }
    RankOutcome dead;
    dead.rank = p.rank.rank;
    dead.error = WIFSIGNALED(p.status)
                     ? absl::StrCat("rank ", p.rank.rank, " killed by signal ", WTERMSIG(p.status))
                     : absl::StrCat("rank ", p.rank.rank, " exited with status ",
                                    WEXITSTATUS(p.status), " without a result");
    outcomes.push_back(std::move(dead));
  }
  procs_.clear();
  return outcomes;
}

}  // namespace octopipe::agent
