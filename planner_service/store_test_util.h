// Records and helpers shared by the Store tests (store_contract_test.cc, sqlite_store_test.cc).
#ifndef OCTOPIPE_PLANNER_SERVICE_STORE_TEST_UTIL_H_
#define OCTOPIPE_PLANNER_SERVICE_STORE_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "planner_service/job_state.h"
#include "proto/planner.pb.h"

namespace octopipe::testing {

// A fresh directory named after the running test under TEST_TMPDIR (or /tmp).
std::string TestDir();
// A job with most fields set, created at `created_unix_ms`.
planner::JobRecord MakeJob(const std::string& id, int64_t created_unix_ms);
// A feasible plan version `version` of `job_id`.
proto::PlanVersion MakeVersion(const std::string& job_id, int64_t version);
// Records compare by their stored form.
bool SameJob(const planner::JobRecord& a, const planner::JobRecord& b);
std::vector<std::string> Ids(const std::vector<planner::JobRecord>& jobs);
std::vector<int64_t> Versions(const std::vector<proto::PlanVersion>& versions);

}  // namespace octopipe::testing

#endif  // OCTOPIPE_PLANNER_SERVICE_STORE_TEST_UTIL_H_
