#include "etcd/etcd_cluster.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "etcd/client.h"

namespace octopipe::etcd {
namespace {

constexpr char kEtcdBinary[] = "/usr/bin/etcd";

// A port that was free a moment ago (the kernel's pick for port 0).
absl::StatusOr<int> FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return absl::InternalError("cannot bind a loopback port");
  }
  close(fd);
  return ntohs(addr.sin_port);
}

std::string BaseDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  static int counter = 0;
  return absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/etcd-", getpid(), "-", counter++);
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdCluster>> EtcdCluster::Start(int members,
                                                               absl::Duration timeout) {
  if (members < 1) return absl::InvalidArgumentError("an etcd cluster needs >= 1 member");
  if (access(kEtcdBinary, X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(kEtcdBinary, " is missing: install Debian's etcd-server (tools/setup.sh)"));
  }
  auto cluster = absl::WrapUnique(new EtcdCluster());
  const std::string base = BaseDir();
  std::vector<std::string> peers;
  for (int i = 0; i < members; ++i) {
    Member m;
    m.name = absl::StrCat("e", i);
    absl::StatusOr<int> client = FreePort();
    absl::StatusOr<int> peer = FreePort();
    if (!client.ok()) return client.status();
    if (!peer.ok()) return peer.status();
    m.client_port = *client;
    m.peer_port = *peer;
    m.data_dir = absl::StrCat(base, "/", m.name);
    m.log_path = m.data_dir + ".log";
    std::filesystem::create_directories(base);
    peers.push_back(absl::StrCat(m.name, "=http://127.0.0.1:", m.peer_port));
    cluster->members_.push_back(m);
  }
  cluster->initial_cluster_ = absl::StrJoin(peers, ",");
  for (int i = 0; i < members; ++i) {
    if (absl::Status s = cluster->Spawn(i, /*existing=*/false); !s.ok()) return s;
  }
  for (int i = 0; i < members; ++i) {
    if (absl::Status s = cluster->WaitReady(i, timeout); !s.ok()) return s;
  }
  return cluster;
}

EtcdCluster::~EtcdCluster() {
  for (int i = 0; i < size(); ++i) {
    Signal(i, SIGCONT);
    Kill(i);
  }
}

std::string EtcdCluster::endpoint(int i) const {
  return absl::StrCat("127.0.0.1:", members_[i].client_port);
}

std::string EtcdCluster::endpoints() const {
  std::vector<std::string> all;
  for (int i = 0; i < size(); ++i) all.push_back(endpoint(i));
  return absl::StrJoin(all, ",");
}

absl::Status EtcdCluster::Spawn(int i, bool existing) {
  Member& m = members_[i];
  const std::string client_url = absl::StrCat("http://127.0.0.1:", m.client_port);
  const std::string peer_url = absl::StrCat("http://127.0.0.1:", m.peer_port);
  std::vector<std::string> args = {
      kEtcdBinary,
      "--name=" + m.name,
      "--data-dir=" + m.data_dir,
      "--listen-client-urls=" + client_url,
      "--advertise-client-urls=" + client_url,
      "--listen-peer-urls=" + peer_url,
      "--initial-advertise-peer-urls=" + peer_url,
      "--initial-cluster=" + initial_cluster_,
      std::string("--initial-cluster-state=") + (existing ? "existing" : "new"),
      "--initial-cluster-token=octopipe-test",
      "--log-level=warn",
      "--logger=zap",
  };
  const int log_fd = open(m.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (log_fd < 0) return absl::InternalError(absl::StrCat("cannot open ", m.log_path));
  const pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    return absl::InternalError("fork failed");
  }
  if (pid == 0) {
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(log_fd);
  m.pid = pid;
  return absl::OkStatus();
}

absl::Status EtcdCluster::WaitReady(int i, absl::Duration timeout) {
  ClientOptions o;
  o.call_timeout = absl::Seconds(5);
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect({endpoint(i)}, o);
  if (!client.ok()) return client.status();
  const absl::Time deadline = absl::Now() + timeout;
  etcdserverpb::RangeRequest probe;
  probe.set_key("/octopipe-test-ready");
  absl::Status last;
  while (absl::Now() < deadline) {
    int status = 0;
    if (waitpid(members_[i].pid, &status, WNOHANG) == members_[i].pid) {
      members_[i].pid = -1;
      return absl::InternalError(
          absl::StrCat("etcd member ", members_[i].name, " exited; its log:\n", log(i)));
    }
    absl::StatusOr<etcdserverpb::RangeResponse> r = (*client)->Range(probe);
    if (r.ok()) return absl::OkStatus();
    last = r.status();
    // Not serving yet: the member is still joining or electing. A bounded poll; the call's
    // own deadline paces it when the member accepts connections but cannot answer yet.
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::DeadlineExceededError(absl::StrCat("etcd member ", members_[i].name,
                                                  " not serving after ",
                                                  absl::FormatDuration(timeout), ": ",
                                                  last.message(), "; its log:\n", log(i)));
}

void EtcdCluster::Kill(int i) {
  Member& m = members_[i];
  if (m.pid <= 0) return;
  kill(m.pid, SIGKILL);
  int status = 0;
  waitpid(m.pid, &status, 0);
  m.pid = -1;
}

absl::Status EtcdCluster::Restart(int i, absl::Duration timeout) {
  Kill(i);
  if (absl::Status s = Spawn(i, /*existing=*/true); !s.ok()) return s;
  return WaitReady(i, timeout);
}

void EtcdCluster::Signal(int i, int sig) {
  if (members_[i].pid > 0) kill(members_[i].pid, sig);
}

std::string EtcdCluster::log(int i) const {
  std::ifstream in(members_[i].log_path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace octopipe::etcd
