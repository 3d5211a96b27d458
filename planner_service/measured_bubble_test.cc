#include "planner_service/measured_bubble.h"

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace octopipe::planner {
namespace {

using ::testing::HasSubstr;

TEST(PipelineBubbleTest, MeasuredOnceEveryDeviceOfTheVersionReported) {
  PipelineBubble b;
  // Node a holds devices 0 and 1, node b devices 2 and 3.
  EXPECT_FALSE(b.Record("j", 1, 4, {{0, 0.6, 1.0, 5}, {1, 0.5, 0.9, 5}}).has_value());
  std::optional<PipelineMeasure> m = b.Record("j", 1, 4, {{2, 0.7, 1.2, 5}, {3, 0.4, 1.1, 5}});
  ASSERT_TRUE(m.has_value());
  EXPECT_DOUBLE_EQ(m->iteration_s, 1.2);  // the slowest device
  EXPECT_DOUBLE_EQ(m->bubble_ratio, 1 - (0.6 + 0.5 + 0.7 + 0.4) / (4 * 1.2));
  // A newer report of one device replaces that device's.
  m = b.Record("j", 1, 4, {{0, 1.0, 1.0, 5}});
  ASSERT_TRUE(m.has_value());
  EXPECT_DOUBLE_EQ(m->bubble_ratio, 1 - (1.0 + 0.5 + 0.7 + 0.4) / (4 * 1.2));
}

TEST(PipelineBubbleTest, NewVersionStartsOverAndOlderVersionsAreIgnored) {
  PipelineBubble b;
  ASSERT_TRUE(b.Record("j", 1, 1, {{0, 0.5, 1.0, 1}}).has_value());
  EXPECT_FALSE(b.Record("j", 2, 2, {{0, 0.5, 1.0, 1}}).has_value());
  EXPECT_FALSE(b.Record("j", 1, 1, {{0, 0.5, 1.0, 1}}).has_value());  // stale
  std::optional<PipelineMeasure> m = b.Record("j", 2, 2, {{1, 1.0, 1.0, 1}});
  ASSERT_TRUE(m.has_value());
  EXPECT_DOUBLE_EQ(m->bubble_ratio, 0.25);
  // Jobs are independent; a removed job starts over.
  EXPECT_FALSE(b.Record("k", 1, 2, {{0, 0.5, 1.0, 1}}).has_value());
  b.Remove("j");
  EXPECT_FALSE(b.Record("j", 2, 2, {{1, 1.0, 1.0, 1}}).has_value());
}

TEST(PipelineBubbleTest, ClampedToZeroWhenBusyExceedsTheIteration) {
  PipelineBubble b;
  std::optional<PipelineMeasure> m = b.Record("j", 1, 1, {{0, 1.1, 1.0, 1}});
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->bubble_ratio, 0);
}

proto::ReportStageTimesRequest WithDevice(int device, double busy, double iteration,
                                          int64_t iterations) {
  proto::ReportStageTimesRequest r;
  proto::DeviceBusyTime* t = r.add_device_times();
  t->set_device(device);
  t->set_busy_seconds(busy);
  t->set_iteration_seconds(iteration);
  t->set_iterations(iterations);
  return r;
}

TEST(DeviceBusyFromProtoTest, AcceptsValidAndNamesTheBadField) {
  absl::StatusOr<std::vector<DeviceBusy>> ok = DeviceBusyFromProto(WithDevice(3, 0.5, 1, 5), 4);
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_EQ(ok->size(), 1u);
  EXPECT_EQ((*ok)[0].device, 3);
  EXPECT_EQ((*ok)[0].iterations, 5);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct Case {
    proto::ReportStageTimesRequest request;
    const char* field;
  } cases[] = {
      {WithDevice(4, 0.5, 1, 5), "device_times[0].device must be in [0, 3]"},
      {WithDevice(-1, 0.5, 1, 5), "device_times[0].device"},
      {WithDevice(0, -0.5, 1, 5), "device_times[0].busy_seconds"},
      {WithDevice(0, nan, 1, 5), "device_times[0].busy_seconds"},
      {WithDevice(0, 0.5, 0, 5), "device_times[0].iteration_seconds"},
      {WithDevice(0, 0.5, INFINITY, 5), "device_times[0].iteration_seconds"},
      {WithDevice(0, 0.5, 1, 0), "device_times[0].iterations"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::vector<DeviceBusy>> r = DeviceBusyFromProto(c.request, 4);
    ASSERT_FALSE(r.ok()) << c.field;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.field));
  }
}

}  // namespace
}  // namespace octopipe::planner
