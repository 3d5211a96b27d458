#include "planner_service/plan_cache.h"

#include <string>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

namespace octopipe::planner {
namespace {

// FNV-1a, 64 bits: a second hash independent of absl::Hash for the key's other half.
uint64_t Fnv1a(const std::string& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

PlanCacheKey KeyOf(const proto::PlanRequest& request) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream out(&bytes);
    google::protobuf::io::CodedOutputStream coded(&out);
    coded.SetSerializationDeterministic(true);
    request.SerializeToCodedStream(&coded);
  }
  PlanCacheKey key;
  key.hi = absl::Hash<std::string>()(bytes);
  key.lo = Fnv1a(bytes);
  return key;
}

PlanCache::PlanCache(int max_entries, int64_t max_bytes)
    : max_entries_(max_entries), max_bytes_(max_bytes) {}

std::optional<proto::PlanResult> PlanCache::Lookup(const PlanCacheKey& key,
                                                   double min_budget_s) {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(key);
  if (it == index_.end() || it->second->second.budget_s < min_budget_s) {
    ++misses_;
    return std::nullopt;
  }
  ++hits_;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second.result;
}

void PlanCache::Put(const PlanCacheKey& key, proto::PlanResult result, double budget_s) {
  const int64_t size = static_cast<int64_t>(result.ByteSizeLong());
  if (max_entries_ <= 0 || size > max_bytes_) return;
  absl::MutexLock lock(&mu_);
  auto it = index_.find(key);
  if (it != index_.end()) {
    bytes_ -= static_cast<int64_t>(it->second->second.result.ByteSizeLong());
    lru_.erase(it->second);
    index_.erase(it);
  }
  lru_.emplace_front(key, Entry{std::move(result), budget_s});
  index_[key] = lru_.begin();
  bytes_ += size;
  EvictLocked();
}

void PlanCache::EvictLocked() {
  while (!lru_.empty() &&
         (static_cast<int>(lru_.size()) > max_entries_ || bytes_ > max_bytes_)) {
    bytes_ -= static_cast<int64_t>(lru_.back().second.result.ByteSizeLong());
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

int64_t PlanCache::hits() const {
  absl::MutexLock lock(&mu_);
  return hits_;
}

int64_t PlanCache::misses() const {
  absl::MutexLock lock(&mu_);
  return misses_;
}

int PlanCache::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(lru_.size());
}

}  // namespace octopipe::planner
