#include "planner_service/store_test_util.h"

#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "planner_service/job_convert.h"

namespace octopipe::testing {

std::string TestDir() {
  const char* root = std::getenv("TEST_TMPDIR");
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = absl::StrCat(info->test_suite_name(), ".", info->name());
  for (char& c : name) {
    if (c == '/') c = '_';
  }
  const std::string dir = absl::StrCat(root != nullptr ? root : "/tmp", "/store_test/", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

planner::JobRecord MakeJob(const std::string& id, int64_t created_unix_ms) {
  planner::JobRecord job;
  job.id = id;
  job.name = "name-" + id;
  job.spec.model.set_name("gpt-" + id);
  job.spec.model.add_layers()->set_kind("attention");
  job.spec.model.mutable_training()->set_num_microbatches(8);
  job.spec.cluster.set_name("cluster");
  job.spec.options.set_num_devices(4);
  job.state = planner::JobState::kReady;
  job.current_version = 2;
  job.excluded_nodes = {"node-3"};
  job.created_unix_ms = created_unix_ms;
  job.pending_reason = ReplanReason::kDrain;
  job.events.push_back({5, "started", "node-3", 2, 0, ""});
  return job;
}

bool SameJob(const planner::JobRecord& a, const planner::JobRecord& b) {
  return google::protobuf::util::MessageDifferencer::Equals(planner::JobToProto(a),
                                                            planner::JobToProto(b));
}

proto::PlanVersion MakeVersion(const std::string& job_id, int64_t version) {
  proto::PlanVersion v;
  v.set_job_id(job_id);
  v.set_version(version);
  v.set_reason_kind(version == 1 ? proto::PLAN_REASON_INITIAL : proto::PLAN_REASON_MEASURED);
  v.set_created_unix_ms(1000 + version);
  v.mutable_result()->set_feasible(true);
  v.mutable_result()->mutable_plan()->set_version(version);
  v.mutable_result()->mutable_plan()->mutable_predicted()->set_iteration_time_s(0.5 / version);
  return v;
}

std::vector<std::string> Ids(const std::vector<planner::JobRecord>& jobs) {
  std::vector<std::string> ids;
  for (const planner::JobRecord& job : jobs) ids.push_back(job.id);
  return ids;
}

std::vector<int64_t> Versions(const std::vector<proto::PlanVersion>& versions) {
  std::vector<int64_t> out;
  for (const proto::PlanVersion& v : versions) out.push_back(v.version());
  return out;
}

}  // namespace octopipe::testing
