// Pins the op text form: ParseOpKind is the inverse of OpKindName (exact, case-sensitive), and
// ParseOp round-trips with OpToString and rejects malformed text naming it.
#include "core/schedule.h"

#include <string>

#include "gtest/gtest.h"

namespace octopipe {
namespace {

TEST(ScheduleTest, ParseOpKindInvertsOpKindName) {
  for (OpKind k : {OpKind::kF, OpKind::kB, OpKind::kW, OpKind::kBW, OpKind::kR, OpKind::kS,
                   OpKind::kT}) {
    absl::StatusOr<OpKind> parsed = ParseOpKind(OpKindName(k));
    ASSERT_TRUE(parsed.ok()) << OpKindName(k) << ": " << parsed.status();
    EXPECT_EQ(*parsed, k);
  }
  for (const std::string bad : {"", "f", "bw", "FB", "WB", "X", " F", "F "}) {
    absl::StatusOr<OpKind> parsed = ParseOpKind(bad);
    ASSERT_FALSE(parsed.ok()) << "'" << bad << "'";
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find("op_kind"), absl::string_view::npos);
    EXPECT_NE(parsed.status().message().find("'" + bad + "'"), absl::string_view::npos)
        << parsed.status();
  }
}

TEST(ScheduleTest, ParseOpRoundTripsAndRejectsMalformedText) {
  for (const Op& op : {Op{OpKind::kF, 3, 7}, Op{OpKind::kBW, 0, 12}, Op{OpKind::kB, 1, 0},
                       Op{OpKind::kW, 10, 4}, Op{OpKind::kR, 2, 2},
                       Op{OpKind::kS, 5, 7}, Op{OpKind::kT, 0, 3}}) {
    absl::StatusOr<Op> parsed = ParseOp(OpToString(op));
    ASSERT_TRUE(parsed.ok()) << OpToString(op) << ": " << parsed.status();
    EXPECT_EQ(*parsed, op) << OpToString(op);
  }
  for (const std::string bad : {"", "X3.1", "f3.1", "F3", "F-1.2", "F3.x", "FB3.1", "BW.1"}) {
    absl::StatusOr<Op> parsed = ParseOp(bad);
    ASSERT_FALSE(parsed.ok()) << "'" << bad << "'";
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find("'" + bad + "'"), absl::string_view::npos)
        << parsed.status();
  }
}

}  // namespace
}  // namespace octopipe
