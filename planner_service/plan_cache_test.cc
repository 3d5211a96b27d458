#include "planner_service/plan_cache.h"

#include <string>

#include "gtest/gtest.h"

namespace octopipe::planner {
namespace {

proto::PlanRequest Request(int microbatches, uint64_t seed = 1) {
  proto::PlanRequest r;
  r.mutable_model()->set_name("m");
  r.mutable_model()->add_layers()->set_name("l0");
  r.mutable_options()->set_num_microbatches(microbatches);
  r.mutable_options()->set_seed(seed);
  return r;
}

proto::PlanResult Result(double t, int padding = 0) {
  proto::PlanResult r;
  r.mutable_plan()->mutable_predicted()->set_iteration_time_s(t);
  r.set_infeasible_reason(std::string(padding, 'x'));
  return r;
}

TEST(PlanCacheTest, KeyFollowsEveryFieldOfTheRequest) {
  EXPECT_EQ(KeyOf(Request(8)), KeyOf(Request(8)));
  EXPECT_FALSE(KeyOf(Request(8)) == KeyOf(Request(9)));
  EXPECT_FALSE(KeyOf(Request(8, 1)) == KeyOf(Request(8, 2)));
}

TEST(PlanCacheTest, HitsMissesAndTheBudgetAnEntryWasFoundWith) {
  PlanCache cache(4, 1 << 20);
  const PlanCacheKey k = KeyOf(Request(8));
  EXPECT_FALSE(cache.Lookup(k, 0).has_value());
  cache.Put(k, Result(1.5), /*budget_s=*/0.5);
  ASSERT_TRUE(cache.Lookup(k, 0.5).has_value());
  EXPECT_EQ(cache.Lookup(k, 0.5)->plan().predicted().iteration_time_s(), 1.5);
  // Tuned with less than the caller would get now: a miss (the caller tunes again).
  EXPECT_FALSE(cache.Lookup(k, 1.0).has_value());
  EXPECT_EQ(cache.hits(), 2);
  EXPECT_EQ(cache.misses(), 2);
  cache.Put(k, Result(1.2), 1.0);  // replaces
  EXPECT_EQ(cache.Lookup(k, 1.0)->plan().predicted().iteration_time_s(), 1.2);
  EXPECT_EQ(cache.size(), 1);
}

TEST(PlanCacheTest, LeastRecentlyUsedGoesFirstByCountAndByBytes) {
  PlanCache cache(2, 10000);
  const PlanCacheKey a = KeyOf(Request(1)), b = KeyOf(Request(2)), c = KeyOf(Request(3));
  cache.Put(a, Result(1), 1);
  cache.Put(b, Result(2), 1);
  ASSERT_TRUE(cache.Lookup(a, 0).has_value());  // a is now the most recent
  cache.Put(c, Result(3), 1);                   // evicts b
  EXPECT_TRUE(cache.Lookup(a, 0).has_value());
  EXPECT_FALSE(cache.Lookup(b, 0).has_value());
  EXPECT_TRUE(cache.Lookup(c, 0).has_value());
  // Bytes: two 6000-byte results do not fit in 10000; a result over the bound is not kept.
  cache.Put(a, Result(1, 6000), 1);
  cache.Put(b, Result(2, 6000), 1);
  EXPECT_EQ(cache.size(), 1);
  EXPECT_TRUE(cache.Lookup(b, 0).has_value());
  cache.Put(c, Result(3, 20000), 1);
  EXPECT_FALSE(cache.Lookup(c, 0).has_value());
}

TEST(PlanCacheTest, ZeroEntriesKeepsNothing) {
  PlanCache cache(0, 1 << 20);
  const PlanCacheKey k = KeyOf(Request(8));
  cache.Put(k, Result(1), 1);
  EXPECT_FALSE(cache.Lookup(k, 0).has_value());
}

}  // namespace
}  // namespace octopipe::planner
