#include "worker_agent/checkpoint_replicator.h"

#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "executor/checkpoint.h"
#include "spdlog/spdlog.h"

namespace octopipe::agent {
namespace {

constexpr char kPrefix[] = "ckpt/";

// "ckpt/JOB/ITERATION/LAYER" -> (job, iteration, layer).
bool ParseKey(const std::string& key, std::string* job, int64_t* iteration, int* layer) {
  std::vector<std::string> parts = absl::StrSplit(key.substr(sizeof(kPrefix) - 1), '/');
  return parts.size() == 3 && !parts[0].empty() && parts[0] != "." && parts[0] != ".." &&
         (*job = parts[0], true) && absl::SimpleAtoi(parts[1], iteration) &&
         absl::SimpleAtoi(parts[2], layer) && *iteration >= 0 && *layer >= 0;
}

}  // namespace

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
    absl::StatusOr<std::string> path = executor::StoreLayerCheckpointBytes(dir, *bytes);
    if (!path.ok()) {
      std::lock_guard<std::mutex> l(mu_);
      received_.erase(file);
      return path.status();
    }
  }
  return absl::OkStatus();
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
      if (!s.ok()) clients_.erase(peer);
      std::lock_guard<std::mutex> l(mu_);
      if (s.ok()) {
        pushed_to_[peer].insert(file);
        ++pushed_;
      } else {
        spdlog::debug("checkpoint push to {}: {}", peer, std::string(s.message()));
      }
    }
  }
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
