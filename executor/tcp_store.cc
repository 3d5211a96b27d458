#include "executor/tcp_store.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gloo/common/error.h"

namespace octopipe::executor {
namespace {

bool WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool ReadString(int fd, std::string* out) {
  uint32_t n = 0;
  if (!ReadAll(fd, &n, sizeof(n)) || n > (64u << 20)) return false;
  out->resize(n);
  return ReadAll(fd, out->data(), n);
}

bool SplitAddress(const std::string& address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return false;
  *host = address.substr(0, colon);
  return absl::SimpleAtoi(address.substr(colon + 1), port) && *port > 0 && *port < 65536;
}

}  // namespace

// --- server ---

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(const std::string& host,
                                                                      int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string port_text = std::to_string(port);
  if (getaddrinfo(host.c_str(), port_text.c_str(), &hints, &res) != 0 || res == nullptr) {
    return absl::UnavailableError(absl::StrCat("tcp store: cannot resolve host '", host, "'"));
  }
  const int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (fd < 0 || ::bind(fd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(fd, 128) != 0) {
    const std::string why = std::strerror(errno);
    freeaddrinfo(res);
    if (fd >= 0) ::close(fd);
    return absl::UnavailableError(
        absl::StrCat("tcp store: cannot listen on ", host, ":", port, ": ", why));
  }
  freeaddrinfo(res);
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  const int bound_port = bound.ss_family == AF_INET6
                             ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                             : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  std::unique_ptr<TcpStoreServer> server(new TcpStoreServer(fd, bound_port));
  server->acceptor_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

TcpStoreServer::TcpStoreServer(int listen_fd, int port) : listen_fd_(listen_fd), port_(port) {}

TcpStoreServer::~TcpStoreServer() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (int fd : connections_) ::shutdown(fd, SHUT_RDWR);
  }
  changed_.notify_all();
  ::shutdown(listen_fd_, SHUT_RDWR);
  acceptor_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    threads.swap(threads_);
  }
  for (std::thread& t : threads) t.join();
  ::close(listen_fd_);
}

void TcpStoreServer::AcceptLoop() {
  while (true) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    std::lock_guard<std::mutex> lock(mu_);
    if (fd < 0) {
      if (stopping_ || (errno != EINTR && errno != ECONNABORTED)) return;
      continue;
    }
    if (stopping_) {
      ::close(fd);
      return;
    }
    connections_.push_back(fd);
    threads_.emplace_back([this, fd] { Serve(fd); });
  }
}

void TcpStoreServer::Set(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = std::vector<char>(value.begin(), value.end());
  }
  changed_.notify_all();
}

void TcpStoreServer::SetKeyHandler(KeyHandler handler) {
  std::lock_guard<std::mutex> lock(mu_);
  for (KeyHandler& h : handlers_) {
    if (h.prefix == handler.prefix) {
      h = std::move(handler);
      return;
    }
  }
  handlers_.push_back(std::move(handler));
}

std::optional<TcpStoreServer::KeyHandler> TcpStoreServer::HandlerFor(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const KeyHandler& h : handlers_) {
    if (key.compare(0, h.prefix.size(), h.prefix) == 0) return h;
  }
  return std::nullopt;
}

void TcpStoreServer::Serve(int fd) {
  while (true) {
    char op = 0;
    std::string key;
    if (!ReadAll(fd, &op, 1) || !ReadString(fd, &key)) break;
    const std::optional<KeyHandler> handler = HandlerFor(key);
    if (op == 'S') {
      std::string value;
      if (!ReadString(fd, &value)) break;
      char ok = 0;
      if (handler) {
        ok = handler->put(key, value) ? 0 : 1;
      } else {
        Set(key, value);
      }
      if (!WriteAll(fd, &ok, 1)) break;
    } else if (op == 'G') {
      uint32_t timeout_ms = 0;
      if (!ReadAll(fd, &timeout_ms, sizeof(timeout_ms))) break;
      std::vector<char> value;
      bool found = false;
      if (handler) {
        std::optional<std::string> v = handler->get(key);
        found = v.has_value();
        if (found) value.assign(v->begin(), v->end());
      } else {
        std::unique_lock<std::mutex> lock(mu_);
        found = changed_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] {
          return stopping_ || data_.count(key) > 0;
        });
        found = found && data_.count(key) > 0;
        if (found) value = data_[key];
      }
      const char status = found ? 0 : 1;
      const uint32_t n = static_cast<uint32_t>(value.size());
      if (!WriteAll(fd, &status, 1) || (found && (!WriteAll(fd, &n, sizeof(n)) ||
                                                  !WriteAll(fd, value.data(), n)))) {
        break;
      }
    } else {
      break;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < connections_.size(); ++i) {
    if (connections_[i] == fd) {
      connections_.erase(connections_.begin() + static_cast<long>(i));
      break;
    }
  }
  ::close(fd);
}

// --- client ---

absl::Status ProbeTcp(const std::string& address, std::chrono::milliseconds timeout) {
  std::string host;
  int port = 0;
  if (!SplitAddress(address, &host, &port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("probe: bad address '", address, "' (HOST:PORT)"));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res) {
    return absl::UnavailableError(absl::StrCat(address, ": cannot resolve host"));
  }
  const int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    freeaddrinfo(res);
    return absl::UnavailableError(absl::StrCat(address, ": socket: ", std::strerror(errno)));
  }
  int rc = ::connect(fd, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  std::string why;
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
    if (rc == 0) {
      why = absl::StrCat("no answer within ", timeout.count(), " ms");
    } else if (rc > 0) {
      int error = 0;
      socklen_t len = sizeof(error);
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
      if (error != 0) why = std::strerror(error);
    } else {
      why = std::strerror(errno);
    }
  } else if (rc != 0) {
    why = std::strerror(errno);
  }
  ::close(fd);
  if (!why.empty()) return absl::UnavailableError(absl::StrCat(address, ": ", why));
  return absl::OkStatus();
}

TcpStore::TcpStore(std::string address, std::chrono::milliseconds timeout,
                   std::shared_ptr<const Clock> clock)
    : address_(std::move(address)), timeout_(timeout), clock_(std::move(clock)) {}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
}

void TcpStore::Connect() {
  if (fd_ >= 0) return;
  std::string host;
  int port = 0;
  if (!SplitAddress(address_, &host, &port)) {
    throw gloo::IoException(absl::StrCat("tcp store: bad address '", address_, "' (HOST:PORT)"));
  }
  const Clock& clock = ClockOrReal(clock_.get());
  const double deadline_s = clock.NowSeconds() + std::chrono::duration<double>(timeout_).count();
  std::string last_error;
  while (clock.NowSeconds() < deadline_s) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) == 0 && res) {
      const int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
        freeaddrinfo(res);
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        fd_ = fd;
        return;
      }
      last_error = std::strerror(errno);
      if (fd >= 0) ::close(fd);
      freeaddrinfo(res);
    } else {
      last_error = "cannot resolve host";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw gloo::IoException(absl::StrCat("tcp store ", address_, ": cannot connect within ",
                                       timeout_.count(), " ms: ", last_error));
}

void TcpStore::set(const std::string& key, const std::vector<char>& data) {
  std::lock_guard<std::mutex> lock(mu_);
  Connect();
  const char op = 'S';
  const uint32_t kn = static_cast<uint32_t>(key.size());
  const uint32_t vn = static_cast<uint32_t>(data.size());
  char ack = 1;
  if (!WriteAll(fd_, &op, 1) || !WriteAll(fd_, &kn, 4) || !WriteAll(fd_, key.data(), kn) ||
      !WriteAll(fd_, &vn, 4) || !WriteAll(fd_, data.data(), vn) || !ReadAll(fd_, &ack, 1) ||
      ack != 0) {
    ::close(fd_);
    fd_ = -1;
    throw gloo::IoException(absl::StrCat("tcp store ", address_, ": set '", key, "' failed"));
  }
}

int TcpStore::GetRaw(const std::string& key, std::chrono::milliseconds timeout,
                     std::string* out) {
  const char op = 'G';
  const uint32_t kn = static_cast<uint32_t>(key.size());
  const uint32_t ms = static_cast<uint32_t>(timeout.count());
  char status = 1;
  if (!WriteAll(fd_, &op, 1) || !WriteAll(fd_, &kn, 4) || !WriteAll(fd_, key.data(), kn) ||
      !WriteAll(fd_, &ms, 4) || !ReadAll(fd_, &status, 1) ||
      (status == 0 && !ReadString(fd_, out))) {
    ::close(fd_);
    fd_ = -1;
    return -1;
  }
  return status == 0 ? 0 : 1;
}

std::vector<char> TcpStore::Get(const std::string& key, std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  Connect();
  std::string value;
  const int r = GetRaw(key, timeout, &value);
  if (r < 0) {
    throw gloo::IoException(absl::StrCat("tcp store ", address_, ": get '", key,
                                         "' failed: the server closed the connection"));
  }
  if (r == 1) {
    throw gloo::IoException(absl::StrCat("tcp store ", address_, ": Wait timeout for key '", key,
                                         "' after ", timeout.count(), " ms"));
  }
  return std::vector<char>(value.begin(), value.end());
}

absl::Status TcpStore::Put(const std::string& key, const std::string& value) {
  try {
    set(key, std::vector<char>(value.begin(), value.end()));
  } catch (const gloo::IoException& e) {
    return absl::UnavailableError(e.what());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> TcpStore::Fetch(const std::string& key,
                                            std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  try {
    Connect();
  } catch (const gloo::IoException& e) {
    return absl::UnavailableError(e.what());
  }
  std::string value;
  const int r = GetRaw(key, timeout, &value);
  if (r < 0) {
    return absl::UnavailableError(
        absl::StrCat("tcp store ", address_, ": get '", key, "': connection closed"));
  }
  if (r == 1) {
    return absl::NotFoundError(absl::StrCat("tcp store ", address_, ": no key '", key, "'"));
  }
  return value;
}

std::vector<char> TcpStore::get(const std::string& key) { return Get(key, timeout_); }

void TcpStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void TcpStore::wait(const std::vector<std::string>& keys,
                    const std::chrono::milliseconds& timeout) {
  for (const std::string& key : keys) Get(key, timeout);
}

}  // namespace octopipe::executor
