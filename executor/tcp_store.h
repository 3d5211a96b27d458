// Rendezvous over TCP, for ranks on hosts that share no file system: TcpStoreServer is a small
// key-value server (one per run, served by the agent of the node that holds rank 0); TcpStore
// is the gloo::rendezvous::Store every rank connects through (GlooOptions::store_address).
//
// Protocol (one TCP connection per client, requests answered in order): a request is an op byte
// ('S' set, 'G' get), a u32 key length and the key; 'S' adds a u32 value length and the value
// and is answered by one byte 0; 'G' adds a u32 timeout in milliseconds and is answered, once
// the key exists or the timeout passed, by one byte (0 found, 1 timed out) and, if found, a u32
// length and the value. Integers are little-endian host order (the store is for one cluster of
// like machines). Keys are never deleted: runs use fresh prefixes.
//
// A KeyHandler takes over the keys under one prefix: they are not kept in memory but handed to
// its put (the 'S' answer is 1 when put refuses) and answered by its get at once, found or
// not (no waiting). The agent serves its checkpoint files this way (worker_agent/
// checkpoint_replicator.h), so nodes copy checkpoints over the port they already share.
//
// Thread safety: the server serves every connection on its own thread; a TcpStore serializes
// its calls with a mutex. Gloo's Store interface reports failures by throwing
// gloo::IoException (unreachable server, timeout), which GlooTransport turns into a status.
#ifndef OCTOPIPE_EXECUTOR_TCP_STORE_H_
#define OCTOPIPE_EXECUTOR_TCP_STORE_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <optional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/clock.h"
#include "gloo/rendezvous/store.h"

namespace octopipe::executor {

// One TCP connect to `address` ("HOST:PORT"), closed at once: OK when something listens there;
// kUnavailable naming the address and the reason when the connection is refused, or does not
// complete within `timeout` (a host that is down), or the address does not resolve. For agents
// asking whether a peer's agent is up; never retries, blocks at most `timeout` (real time).
absl::Status ProbeTcp(const std::string& address, std::chrono::milliseconds timeout);

class TcpStoreServer {
 public:
  // Listens on host:port (port 0 picks a free one). kUnavailable naming the address when the
  // socket cannot be bound.
  static absl::StatusOr<std::unique_ptr<TcpStoreServer>> Start(const std::string& host, int port);
  ~TcpStoreServer();  // stops serving and joins every thread
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const { return port_; }

  // Sets a key in-process (as a client's set would).
  void Set(const std::string& key, const std::string& value);

  struct KeyHandler {
    std::string prefix;
    std::function<bool(const std::string& key, const std::string& value)> put;
    std::function<std::optional<std::string>(const std::string& key)> get;
  };
  // Installs (replaces) the handler of one prefix; called from any thread.
  void SetKeyHandler(KeyHandler handler);

 private:
  TcpStoreServer(int listen_fd, int port);
  // The handler of `key`'s prefix, if any.
  std::optional<KeyHandler> HandlerFor(const std::string& key);
  void AcceptLoop();
  void Serve(int fd);

  const int listen_fd_;
  const int port_;
  std::mutex mu_;
  std::condition_variable changed_;
  bool stopping_ = false;                          // guarded by mu_
  std::map<std::string, std::vector<char>> data_;  // guarded by mu_
  std::vector<int> connections_;                   // guarded by mu_
  std::vector<std::thread> threads_;               // guarded by mu_
  std::vector<KeyHandler> handlers_;               // guarded by mu_
  std::thread acceptor_;
};

class TcpStore final : public gloo::rendezvous::Store {
 public:
  // `address` is "HOST:PORT". Connects lazily (retrying until `timeout` has passed on `clock`,
  // so ranks may start before the server), and waits up to `timeout` in get/wait (there the
  // server waits, in real time). `clock` null: the real monotonic clock.
  TcpStore(std::string address, std::chrono::milliseconds timeout,
           std::shared_ptr<const Clock> clock = nullptr);
  ~TcpStore() override;

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  // The same without exceptions (for agents): kUnavailable naming the address when the server
  // cannot be reached or refused the value; Fetch: kNotFound when the key did not appear
  // within `timeout`.
  absl::Status Put(const std::string& key, const std::string& value);
  absl::StatusOr<std::string> Fetch(const std::string& key, std::chrono::milliseconds timeout);

 private:
  void Connect();  // under mu_
  std::vector<char> Get(const std::string& key, std::chrono::milliseconds timeout);
  // Under mu_: 0 found (value in *out), 1 not found; -1 I/O error (connection closed).
  int GetRaw(const std::string& key, std::chrono::milliseconds timeout, std::string* out);

  const std::string address_;
  const std::chrono::milliseconds timeout_;
  const std::shared_ptr<const Clock> clock_;
  std::mutex mu_;
  int fd_ = -1;
};

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_TCP_STORE_H_
