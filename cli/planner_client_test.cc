// Pins --planner's address check (CheckPlannerAddress): HOST:PORT with a port in [1, 65535],
// dns:///HOST:PORT or unix:PATH; anything else is refused naming the flag and the address.
#include "cli/planner_client.h"

#include "gtest/gtest.h"

namespace octopipe::cli {
namespace {

TEST(PlannerClientTest, AddressesNeedAPortInRange) {
  for (const char* ok : {"127.0.0.1:50051", "planner.example:1", "[::1]:65535",
                         "dns:///planner.example:443", "unix:/run/octopipe.sock"}) {
    EXPECT_TRUE(CheckPlannerAddress(ok).ok()) << ok << ": " << CheckPlannerAddress(ok);
  }
  for (const char* bad : {"127.0.0.1:99999", "127.0.0.1:0", "127.0.0.1", "127.0.0.1:", ":50051",
                          "127.0.0.1:port", "127.0.0.1:-1"}) {
    const absl::Status s = CheckPlannerAddress(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(std::string(s.message()).find(std::string("--planner: '") + bad + "'"),
              std::string::npos)
        << s.message();
  }
  EXPECT_NE(std::string(CheckPlannerAddress("").message()).find("--planner: HOST:PORT is required"),
            std::string::npos);
}

}  // namespace
}  // namespace octopipe::cli
