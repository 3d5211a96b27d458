// Pins MakeTransport's choice: names map to transports, "auto" follows GpuAvailable(), an
// unknown name is kInvalidArgument naming it, and "nccl" without a GPU fails up front.
// (This binary initializes CUDA in-process and therefore never forks.)
#include "executor/transport_factory.h"

#include <string>

#include "absl/status/status.h"
#include "executor/nccl_transport.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace octopipe::executor {
namespace {

using ::testing::HasSubstr;

TEST(TransportFactoryTest, UnknownKindIsInvalidArgumentNamingIt) {
  absl::StatusOr<std::unique_ptr<Transport>> t = MakeTransport("mpi", TransportConfig{});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("'mpi'"));
}

TEST(TransportFactoryTest, KindNamesRoundTripAndMatchTheTransportsOwnNames) {
  for (TransportKind k :
       {TransportKind::kGloo, TransportKind::kNccl, TransportKind::kAuto, TransportKind::kInProc}) {
    absl::StatusOr<TransportKind> parsed = ParseTransportKind(TransportKindName(k));
    ASSERT_TRUE(parsed.ok()) << TransportKindName(k) << ": " << parsed.status();
    EXPECT_EQ(*parsed, k);
  }
  for (const char* bad : {"", "Gloo", "mpi", "gloo "}) {
    absl::StatusOr<TransportKind> parsed = ParseTransportKind(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(parsed.status().message()),
                HasSubstr(std::string("got '") + bad + "'"));
  }
  absl::StatusOr<std::unique_ptr<Transport>> gloo =
      MakeTransport(TransportKind::kGloo, TransportConfig{});
  ASSERT_TRUE(gloo.ok()) << gloo.status();
  EXPECT_EQ((*gloo)->name(), TransportKindName(TransportKind::kGloo));
}

TEST(TransportFactoryTest, InProcIsNotMadeByTheFactory) {
  absl::StatusOr<std::unique_ptr<Transport>> t =
      MakeTransport(TransportKind::kInProc, TransportConfig{});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("InProcHub"));
}

TEST(TransportFactoryTest, GlooByName) {
  absl::StatusOr<std::unique_ptr<Transport>> t = MakeTransport("gloo", TransportConfig{});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->name(), "gloo");
  EXPECT_EQ((*t)->size(), 1);
}

TEST(TransportFactoryTest, AutoPicksNcclExactlyWhenAGpuIsAvailable) {
  absl::StatusOr<std::unique_ptr<Transport>> t = MakeTransport("auto", TransportConfig{});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->name(), GpuAvailable() ? "nccl" : "gloo");
}

TEST(TransportFactoryTest, NcclWithoutGpuIsFailedPrecondition) {
  if (GpuAvailable()) GTEST_SKIP() << "this host has a GPU";
  absl::StatusOr<std::unique_ptr<Transport>> t = MakeTransport("nccl", TransportConfig{});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("GPU"));
}

TEST(TransportFactoryTest, ConfigErrorsPassThrough) {
  TransportConfig config;
  config.size = 2;
  config.rank = 3;
  EXPECT_EQ(MakeTransport("gloo", config).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace octopipe::executor
