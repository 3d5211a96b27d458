// EtcdCluster: a real etcd cluster of N members on 127.0.0.1 (Debian's /usr/bin/etcd), started
// as child processes for tests, each with its own data directory under TEST_TMPDIR (or /tmp).
// Start() returns once every member answers a read; members can be killed, stopped and
// restarted on the same data directory. The destructor kills and reaps every member.
#ifndef OCTOPIPE_ETCD_ETCD_CLUSTER_H_
#define OCTOPIPE_ETCD_ETCD_CLUSTER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace octopipe::etcd {

class EtcdCluster {
 public:
  // Starts `members` (>= 1) members and waits up to `timeout` for each to serve. Fails with the
  // members' logs when etcd is not installed or a member exits or does not become ready.
  static absl::StatusOr<std::unique_ptr<EtcdCluster>> Start(
      int members, absl::Duration timeout = absl::Seconds(60));
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  int size() const { return static_cast<int>(members_.size()); }
  // "127.0.0.1:PORT" of member i, and every member's, comma-separated.
  std::string endpoint(int i) const;
  std::string endpoints() const;

  // SIGKILL and reap member i (no-op when it is not running).
  void Kill(int i);
  // Starts member i again on its data directory and waits until it serves.
  absl::Status Restart(int i, absl::Duration timeout = absl::Seconds(60));
  // Sends `sig` (e.g. SIGSTOP, SIGCONT) to member i.
  void Signal(int i, int sig);
  bool running(int i) const { return members_[i].pid > 0; }
  // What member i wrote to stdout/stderr so far.
  std::string log(int i) const;

 private:
  struct Member {
    std::string name;
    int client_port = 0;
    int peer_port = 0;
    std::string data_dir;
    std::string log_path;
    pid_t pid = -1;
  };
  EtcdCluster() = default;
  absl::Status Spawn(int i, bool existing);
  absl::Status WaitReady(int i, absl::Duration timeout);

  std::string initial_cluster_;
  std::vector<Member> members_;
};

}  // namespace octopipe::etcd

#endif  // OCTOPIPE_ETCD_ETCD_CLUSTER_H_
