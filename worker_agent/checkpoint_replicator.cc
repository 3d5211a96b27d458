#include "worker_agent/checkpoint_replicator.h"

#include <algorithm>
#include <functional>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "executor/checkpoint.h"
#include "spdlog/spdlog.h"

namespace octopipe::agent {
namespace {

constexpr char kPrefix[] = "ckpt/";
constexpr char kHeld[] = "held";

// "ckpt/JOB/ITERATION/LAYER" -> (job, iteration, layer).
bool ParseKey(const std::string& key, std::string* job, int64_t* iteration, int* layer) {
  std::vector<std::string> parts = absl::StrSplit(key.substr(sizeof(kPrefix) - 1), '/');
  return parts.size() == 3 && !parts[0].empty() && parts[0] != "." && parts[0] != ".." &&
         (*job = parts[0], true) && absl::SimpleAtoi(parts[1], iteration) &&
         absl::SimpleAtoi(parts[2], layer) && *iteration >= 0 && *layer >= 0;
}

// The (iteration, layer) files of a held list ("ITERATION/LAYER" lines); malformed lines skipped.
std::vector<std::pair<int64_t, int>> ParseHeld(absl::string_view held) {
  std::vector<std::pair<int64_t, int>> out;
  for (absl::string_view line : absl::StrSplit(held, '\n', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> f = absl::StrSplit(line, '/');
    int64_t iteration = 0;
    int layer = 0;
    if (absl::SimpleAtoi(f.first, &iteration) && absl::SimpleAtoi(f.second, &layer)) {
      out.push_back({iteration, layer});
    }
  }
  return out;
}

// "ckpt/JOB/held" -> job.
bool ParseHeldKey(const std::string& key, std::string* job) {
  std::vector<std::string> parts = absl::StrSplit(key.substr(sizeof(kPrefix) - 1), '/');
  return parts.size() == 2 && !parts[0].empty() && parts[0] != "." && parts[0] != ".." &&
         parts[1] == kHeld && (*job = parts[0], true);
}

}  // namespace

std::string HeldCheckpointsKey(const std::string& job_id) {
  return absl::StrCat(kPrefix, job_id, "/", kHeld);
}

std::string CheckpointKey(const std::string& job_id, int64_t iteration, int layer) {
  return absl::StrCat(kPrefix, job_id, "/", iteration, "/", layer);
}

CheckpointReplicator::CheckpointReplicator(std::string root, std::chrono::milliseconds timeout)
    : root_(std::move(root)), timeout_(timeout), thread_([this] { PushLoop(); }) {}

CheckpointReplicator::~CheckpointReplicator() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void CheckpointReplicator::Serve(executor::TcpStoreServer* store) {
  executor::TcpStoreServer::KeyHandler h;
  h.prefix = kPrefix;
  h.put = [this](const std::string& key, const std::string& bytes) {
    std::string job;
    int64_t iteration = 0;
    int layer = 0;
    if (!ParseKey(key, &job, &iteration, &layer)) return false;
    // Already here (a shared directory, or pushed before): nothing to write.
    if (executor::ReadLayerCheckpoint(
            executor::LayerCheckpointPath(root_ + "/" + job, iteration, layer)).ok()) {
      std::lock_guard<std::mutex> l(mu_);
      received_.insert({job, iteration, layer});
      return true;
    }
    // Marked received before the file appears, so that a push pass listing the directory in
    // between never sends it back.
    const auto file = std::make_tuple(job, iteration, layer);
    {
      std::lock_guard<std::mutex> l(mu_);
      received_.insert(file);
    }
    absl::StatusOr<std::string> path =
        executor::StoreLayerCheckpointBytes(root_ + "/" + job, bytes);
    if (!path.ok()) {
      spdlog::warn("checkpoint replica {} refused: {}", key, std::string(path.status().message()));
      std::lock_guard<std::mutex> l(mu_);
      received_.erase(file);
      return false;
    }
    return true;
  };
  h.get = [this](const std::string& key) -> std::optional<std::string> {
    std::string job;
    int64_t iteration = 0;
    int layer = 0;
    if (ParseHeldKey(key, &job)) {
      std::string held;
      for (const auto& [it, l] : executor::ListLayerCheckpoints(root_ + "/" + job)) {
        absl::StrAppend(&held, it, "/", l, "\n");
      }
      return held;
    }
    if (!ParseKey(key, &job, &iteration, &layer)) return std::nullopt;
    absl::StatusOr<std::string> bytes = executor::ReadLayerCheckpointBytes(
        executor::LayerCheckpointPath(root_ + "/" + job, iteration, layer));
    if (!bytes.ok()) return std::nullopt;
    return *std::move(bytes);
  };
  store->SetKeyHandler(std::move(h));
}

void CheckpointReplicator::Replicate(const std::string& job_id, std::vector<std::string> peers) {
  {
    std::lock_guard<std::mutex> l(mu_);
    job_ = job_id;
    peers_ = std::move(peers);
  }
  wake_.notify_all();
}

int64_t CheckpointReplicator::pushed() const {
  std::lock_guard<std::mutex> l(mu_);
  return pushed_;
}

executor::TcpStore* CheckpointReplicator::Client(const std::string& address) {
  std::unique_ptr<executor::TcpStore>& c = clients_[address];
  if (!c) c = std::make_unique<executor::TcpStore>(address, timeout_);
  return c.get();
}

absl::Status CheckpointReplicator::FetchMissing(const std::string& job_id, int64_t iteration,
                                                int num_layers, const std::string& peer) {
  const std::string dir = root_ + "/" + job_id;
  executor::TcpStore client(peer, timeout_);
  for (int layer = 0; layer < num_layers; ++layer) {
    if (executor::ReadLayerCheckpoint(executor::LayerCheckpointPath(dir, iteration, layer)).ok()) {
      continue;
    }
    if (absl::Status s = FetchLayer(client, peer, job_id, iteration, layer); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CheckpointReplicator::FetchLayer(executor::TcpStore& client, const std::string& peer,
                                              const std::string& job_id, int64_t iteration,
                                              int layer) {
  absl::StatusOr<std::string> bytes =
      client.Fetch(CheckpointKey(job_id, iteration, layer), std::chrono::milliseconds(0));
  if (!bytes.ok()) {
    return absl::Status(bytes.status().code(),
                        absl::StrCat("checkpoint of iteration ", iteration, ", layer ", layer,
                                     " from ", peer, ": ", bytes.status().message()));
  }
  const auto file = std::make_tuple(job_id, iteration, layer);
  {
    std::lock_guard<std::mutex> l(mu_);
    received_.insert(file);  // before the file appears: see the put handler
  }
  absl::StatusOr<std::string> path =
      executor::StoreLayerCheckpointBytes(root_ + "/" + job_id, *bytes);
  if (!path.ok()) {
    std::lock_guard<std::mutex> l(mu_);
    received_.erase(file);
    return path.status();
  }
  return absl::OkStatus();
}

std::vector<std::string> ReplicaNodes(std::vector<std::string> nodes, const std::string& self,
                                      int replicas) {
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  const auto me = std::find(nodes.begin(), nodes.end(), self);
  if (me == nodes.end()) return {};
  // The others in ring order after self.
  std::vector<std::string> ring(me + 1, nodes.end());
  ring.insert(ring.end(), nodes.begin(), me);
  if (replicas >= 0 && replicas < static_cast<int>(ring.size())) ring.resize(replicas);
  return ring;
}

int64_t CheckpointReplicator::GatherNewest(const std::string& job_id, int num_layers,
                                           const std::vector<std::string>& peers,
                                           std::chrono::milliseconds connect_timeout) {
  const std::string dir = root_ + "/" + job_id;
  // (iteration, layer) -> the peers holding it; "" for this node.
  std::map<std::pair<int64_t, int>, std::vector<std::string>> holders;
  for (const auto& file : executor::ListLayerCheckpoints(dir)) holders[file].push_back("");
  for (const std::string& peer : peers) {
    executor::TcpStore client(peer, connect_timeout);
    absl::StatusOr<std::string> held =
        client.Fetch(HeldCheckpointsKey(job_id), std::chrono::milliseconds(0));
    if (!held.ok()) continue;
    for (const auto& file : ParseHeld(*held)) holders[file].push_back(peer);
  }
  std::set<int64_t, std::greater<int64_t>> iterations;
  for (const auto& [file, who] : holders) iterations.insert(file.first);
  for (int64_t iteration : iterations) {
    bool complete = true;
    for (int layer = 0; layer < num_layers && complete; ++layer) {
      complete =
          GatherLayer(job_id, iteration, layer, holders[{iteration, layer}], connect_timeout);
    }
    if (complete) return iteration;
  }
  return 0;
}

bool CheckpointReplicator::GatherLayer(const std::string& job_id, int64_t iteration, int layer,
                                       const std::vector<std::string>& holders,
                                       std::chrono::milliseconds connect_timeout) {
  const std::string dir = root_ + "/" + job_id;
  if (executor::ReadLayerCheckpoint(executor::LayerCheckpointPath(dir, iteration, layer)).ok()) {
    return true;
  }
  for (const std::string& peer : holders) {
    if (peer.empty()) continue;
    executor::TcpStore client(peer, connect_timeout);
    if (FetchLayer(client, peer, job_id, iteration, layer).ok()) return true;
  }
  return false;
}

bool CheckpointReplicator::LearnHeld(const std::string& job, const std::string& peer) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (asked_.count({peer, job})) return true;
  }
  absl::StatusOr<std::string> held =
      Client(peer)->Fetch(HeldCheckpointsKey(job), std::chrono::milliseconds(0));
  if (!held.ok() && held.status().code() == absl::StatusCode::kNotFound) {
    held = std::string();  // a peer that does not answer the question: push everything
  }
  if (!held.ok()) {
    clients_.erase(peer);
    spdlog::debug("checkpoint files held by {}: {}", peer, std::string(held.status().message()));
    return false;
  }
  std::lock_guard<std::mutex> l(mu_);
  std::set<std::tuple<std::string, int64_t, int>>& known = pushed_to_[peer];
  for (const auto& [iteration, layer] : ParseHeld(*held)) known.insert({job, iteration, layer});
  asked_.insert({peer, job});
  return true;
}

void CheckpointReplicator::PushOnce() {
  std::string job;
  std::vector<std::string> peers;
  {
    std::lock_guard<std::mutex> l(mu_);
    job = job_;
    peers = peers_;
  }
  if (job.empty() || peers.empty()) return;
  std::vector<std::string> known;  // the peers whose held files are known
  for (const std::string& p : peers) {
    if (LearnHeld(job, p)) known.push_back(p);
  }
  // A peer a push fails to is dropped from `peers` for the rest of the pass: a lost node costs
  // one connection timeout per pass, not one per file, and the live peers get every file.
  peers = std::move(known);
  const std::string dir = root_ + "/" + job;
  for (const auto& [iteration, layer] : executor::ListLayerCheckpoints(dir)) {
    const auto file = std::make_tuple(job, iteration, layer);
    std::vector<std::string> to;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stopping_) return;
      if (received_.count(file)) continue;
      for (const std::string& p : peers) {
        if (!pushed_to_[p].count(file)) to.push_back(p);
      }
    }
    if (to.empty()) continue;
    // Only verified files travel (a file being pruned or half-written is skipped for now).
    absl::StatusOr<std::string> bytes =
        executor::ReadLayerCheckpointBytes(executor::LayerCheckpointPath(dir, iteration, layer));
    if (!bytes.ok()) continue;
    for (const std::string& peer : to) {
      const absl::Status s = Client(peer)->Put(CheckpointKey(job, iteration, layer), *bytes);
      if (!s.ok()) {
        clients_.erase(peer);
        peers.erase(std::find(peers.begin(), peers.end(), peer));
      }
      std::lock_guard<std::mutex> l(mu_);
      if (s.ok()) {
        pushed_to_[peer].insert(file);
        ++pushed_;
      } else {
        ++failed_pushes_;
        spdlog::debug("checkpoint push to {}: {}", peer, std::string(s.message()));
      }
    }
  }
}

int64_t CheckpointReplicator::failed_pushes() const {
  std::lock_guard<std::mutex> l(mu_);
  return failed_pushes_;
}

int64_t CheckpointReplicator::scans() const {
  std::lock_guard<std::mutex> l(mu_);
  return scans_;
}

void CheckpointReplicator::PushLoop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stopping_) {
    l.unlock();
    PushOnce();
    l.lock();
    ++scans_;
    wake_.wait_for(l, std::chrono::milliseconds(50), [&] { return stopping_; });
  }
}

}  // namespace octopipe::agent
