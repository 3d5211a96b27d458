// PlanCache: answers to identical Plan requests, keyed by the request's content (a 128-bit
// hash of its deterministic serialisation, so a key is 16 bytes whatever the model's size).
// Bounded: at most `max_entries` results and `max_bytes` of serialised results; the least
// recently used entry goes first. Each entry remembers the tuning budget it was found with, so
// a caller can tell a plan tuned under load (degraded budget) from a full one.
//
// Thread-safe. Counts hits and misses (Lookup) for metrics.
#ifndef OCTOPIPE_PLANNER_SERVICE_PLAN_CACHE_H_
#define OCTOPIPE_PLANNER_SERVICE_PLAN_CACHE_H_

#include <cstdint>
#include <list>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/synchronization/mutex.h"
#include "proto/planner.pb.h"

namespace octopipe::planner {

struct PlanCacheKey {
  uint64_t hi = 0, lo = 0;
  bool operator==(const PlanCacheKey& o) const { return hi == o.hi && lo == o.lo; }
  template <typename H>
  friend H AbslHashValue(H h, const PlanCacheKey& k) {
    return H::combine(std::move(h), k.hi, k.lo);
  }
};

// The key of a request: every field counts (model, cluster, options, budget and seed).
PlanCacheKey KeyOf(const proto::PlanRequest& request);

class PlanCache {
 public:
  struct Entry {
    proto::PlanResult result;
    double budget_s = 0;  // the tuning budget the result was found with
  };

  PlanCache(int max_entries, int64_t max_bytes);

  // The entry when its budget is at least `min_budget_s` (it becomes the most recently used);
  // counts a hit, else a miss.
  std::optional<proto::PlanResult> Lookup(const PlanCacheKey& key, double min_budget_s);
  // Stores (or replaces) the result; a result larger than max_bytes is not kept.
  void Put(const PlanCacheKey& key, proto::PlanResult result, double budget_s);

  int64_t hits() const;
  int64_t misses() const;
  int size() const;

 private:
  using Lru = std::list<std::pair<PlanCacheKey, Entry>>;
  void EvictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int max_entries_;
  const int64_t max_bytes_;
  mutable absl::Mutex mu_;
  Lru lru_ ABSL_GUARDED_BY(mu_);  // front: most recently used
  absl::flat_hash_map<PlanCacheKey, Lru::iterator> index_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace octopipe::planner

#endif  // OCTOPIPE_PLANNER_SERVICE_PLAN_CACHE_H_
