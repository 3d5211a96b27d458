// The --planner value: replica lists, dns:/// names expanded to every address they resolve to,
// and bad values named; a lone planner that is down fails at once.
#include "planner_client/planner_client.h"

#include <chrono>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace octopipe::client {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(PlannerClientTest, AListNamesEachReplicaOnce) {
  absl::StatusOr<std::vector<std::string>> a =
      PlannerReplicaAddresses("10.0.0.1:50051,10.0.0.2:50051,unix:/tmp/p.sock");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(*a, ElementsAre("10.0.0.1:50051", "10.0.0.2:50051", "unix:/tmp/p.sock"));
}

TEST(PlannerClientTest, ADnsNameIsEveryAddressItResolvesTo) {
  absl::StatusOr<std::vector<std::string>> a =
      PlannerReplicaAddresses("dns:///localhost:50051,10.0.0.9:1");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(*a, Contains("127.0.0.1:50051"));
  EXPECT_EQ(a->back(), "10.0.0.9:1");
  for (const std::string& r : *a) EXPECT_THAT(r, ::testing::Not(HasSubstr("dns:")));
}

TEST(PlannerClientTest, BadAddressesAreNamed) {
  for (const char* bad : {"", "host", "host:0", "host:65536", "a:1,,b:2", "dns:///x"}) {
    const absl::Status s = PlannerReplicaAddresses(bad).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.message()), HasSubstr("--planner")) << bad;
  }
}

TEST(PlannerClientTest, TlsFilesThatCannotBeReadAreNamed) {
  PlannerClientOptions o;
  o.address = "127.0.0.1:1";
  o.tls_ca = "/nonexistent/ca.pem";
  const absl::Status s = ConnectPlannerClient(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("--tls_ca: cannot read '/nonexistent/ca.pem'"));
}

TEST(PlannerClientTest, ALonePlannerThatIsDownFailsAtOnce) {
  PlannerClientOptions o;
  o.address = "127.0.0.1:1";  // nothing listens on port 1
  o.timeout_s = 30;
  absl::StatusOr<std::unique_ptr<PlannerClient>> c = ConnectPlannerClient(o);
  ASSERT_TRUE(c.ok()) << c.status();
  const auto start = std::chrono::steady_clock::now();
  proto::ListJobsResponse out;
  const grpc::Status s = (*c)->Call(PlannerClient::Route::kAny, &proto::Planner::Stub::ListJobs,
                                    proto::ListJobsRequest(), &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10))
      << "not the 30 s call deadline";
}

}  // namespace
}  // namespace octopipe::client
