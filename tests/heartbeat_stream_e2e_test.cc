// HeartbeatStream (proto/planner.proto) end to end, with a real planner process and the
// agents' client (planner_client/heartbeat_stream.h): beats counted as Heartbeat calls, the
// planner's answers (drained, NOT_FOUND, PERMISSION_DENIED, UNAUTHENTICATED), an identities
// reload reaching an open stream, a planner that stops answering ending the stream, and a
// planner shut down with streams open exiting cleanly and ending them.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/test_dirs.h"
#include "gtest/gtest.h"
#include "planner_client/heartbeat_stream.h"
#include "planner_client/planner_client.h"
#include "proto/planner.grpc.pb.h"
#include "tests/planner_calls.h"
#include "tests/planner_process.h"

namespace octopipe {
namespace {

using testing::Beat;
using testing::Connect;
using testing::Ctx;
using testing::PlannerProcess;
using testing::Register;
using testing::TestPath;

constexpr char kPlanner[] = "planner_service/octopipe-planner";

// A stream opened with `token` (none: ""), for `node`.
std::unique_ptr<client::HeartbeatStream> OpenBeats(proto::Planner::Stub* stub,
                                                   const std::string& token,
                                                   const std::string& node) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
  return std::make_unique<client::HeartbeatStream>(stub, std::move(ctx), node);
}

// Beats (again once a beat still being written is done) and waits for the planner to end the
// stream (up to 20 s); its status.
grpc::Status BeatUntilEnded(client::HeartbeatStream* stream) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!stream->Beat() && !stream->AwaitEnd(absl::Milliseconds(5)) && absl::Now() < deadline) {
  }
  return stream->AwaitEnd(deadline - absl::Now())
             ? stream->status()
             : grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "still open");
}

// The value of the planner's octopipe_rpcs_total{method="Heartbeat",code="OK"} counter.
double HeartbeatsCounted(const PlannerProcess& planner) {
  std::istringstream page(testing::ScrapeMetrics(planner.metrics_port()));
  for (std::string line; std::getline(page, line);) {
    if (line.rfind("octopipe_rpcs_total{", 0) == 0 &&
        line.find(R"(method="Heartbeat")") != std::string::npos &&
        line.find(R"(code="OK")") != std::string::npos) {
      return std::stod(line.substr(line.rfind(' ') + 1));
    }
  }
  return 0;
}

// HeartbeatStream: every message is a heartbeat, counted as a Heartbeat call; the planner
// writes nothing back until the node is drained (then {drained} and the end, OK); an unknown
// node ends the stream NOT_FOUND, another node's credential PERMISSION_DENIED naming both.
// Both ways the planner serves the streams: each heartbeat as it arrives, and in batches.
class HeartbeatBatchTest : public ::testing::TestWithParam<const char*> {
 protected:
  std::string BatchFlag() const { return absl::StrCat("--heartbeat_batch_ms=", GetParam()); }
};

TEST_P(HeartbeatBatchTest, HeartbeatStreamBeatsAsUnaryCallsDoAndEndsWithTheirAnswers) {
  const std::string identities = TestPath("identities-stream.json");
  std::ofstream(identities) << R"({"principals": [
      {"name": "node-a", "role": "agent", "node": "node-a", "token": "a-token"},
      {"name": "node-b", "role": "agent", "node": "node-b", "token": "b-token"},
      {"name": "ops", "role": "admin", "token": "ops-token"}]})";
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(
      planner
          .Start({"--state_dir=" + TestPath(absl::StrCat("stream-", GetParam())),
                  "--identities=" + identities, BatchFlag()})
          .ok())
      << planner.log();
  auto stub = Connect(planner.address());
  ASSERT_EQ(Register(stub.get(), "a-token", "node-a"), grpc::StatusCode::OK);

  auto beats = OpenBeats(stub.get(), "a-token", "node-a");
  int sent = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (HeartbeatsCounted(planner) < 5 && std::chrono::steady_clock::now() < deadline) {
    if (beats->Beat()) ++sent;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_GE(HeartbeatsCounted(planner), 5) << planner.log();
  EXPECT_GE(sent, HeartbeatsCounted(planner));  // each counted heartbeat was one sent
  EXPECT_FALSE(beats->ended()) << beats->status().error_message();
  EXPECT_EQ(beats->failed_writes(), 0);

  // Drained: the next beat is answered {drained} and the stream ends OK.
  proto::NodeRequest drain;
  drain.set_node_id("node-a");
  proto::NodeResponse dr;
  auto cd = Ctx("ops-token", 20);
  ASSERT_TRUE(stub->DrainNode(cd.get(), drain, &dr).ok());
  EXPECT_TRUE(BeatUntilEnded(beats.get()).ok());
  EXPECT_TRUE(beats->drained());

  auto ghost = OpenBeats(stub.get(), "ops-token", "ghost");
  EXPECT_EQ(BeatUntilEnded(ghost.get()).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_FALSE(ghost->drained());

  auto hijack = OpenBeats(stub.get(), "b-token", "node-a");
  const grpc::Status refused = BeatUntilEnded(hijack.get());
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(refused.error_message().find("acts for node 'node-b' only, not for node 'node-a'"),
            std::string::npos)
      << refused.error_message();

  auto anonymous = OpenBeats(stub.get(), "", "node-b");
  EXPECT_EQ(BeatUntilEnded(anonymous.get()).error_code(), grpc::StatusCode::UNAUTHENTICATED);

  // Closing an open stream ends it on both sides (the planner keeps serving).
  ASSERT_EQ(Register(stub.get(), "b-token", "node-b"), grpc::StatusCode::OK);
  auto closing = OpenBeats(stub.get(), "b-token", "node-b");
  closing->Beat();
  EXPECT_EQ(closing->Close().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(Beat(stub.get(), "b-token", "node-b").ok());

  // An identities reload reaches an open stream: node-b's old token is refused on its next beat.
  auto open = OpenBeats(stub.get(), "b-token", "node-b");
  const double counted = HeartbeatsCounted(planner);
  const auto counting = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (HeartbeatsCounted(planner) <= counted && std::chrono::steady_clock::now() < counting) {
    open->Beat();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_FALSE(open->ended()) << open->status().error_message();
  std::ofstream(identities) << R"({"principals": [
      {"name": "node-b", "role": "agent", "node": "node-b", "token": "b-token-2"},
      {"name": "ops", "role": "admin", "token": "ops-token"}]})";
  planner.Signal(SIGHUP);
  const auto reloaded = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (planner.log().find("identities reloaded") == std::string::npos &&
         std::chrono::steady_clock::now() < reloaded) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(BeatUntilEnded(open.get()).error_code(), grpc::StatusCode::UNAUTHENTICATED)
      << planner.log();
}

// A planner that stops answering (SIGSTOP: its connections stay open, nothing is reset) ends
// an agent's HeartbeatStream UNAVAILABLE within keepalive_s + 5 s of pings going unanswered,
// instead of the beats being written into TCP's buffers until TCP gives up.
TEST(HeartbeatStreamE2ETest, AHeartbeatStreamToAPlannerThatStoppedAnsweringEnds) {
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner.Start({"--state_dir=" + TestPath("stream-stopped")}).ok()) << planner.log();
  client::PlannerClientOptions o;
  o.address = planner.address();
  o.keepalive_s = 1;
  absl::StatusOr<std::unique_ptr<client::PlannerClient>> c = client::ConnectPlannerClient(o);
  ASSERT_TRUE(c.ok()) << c.status();
  auto stub = Connect(planner.address());
  ASSERT_EQ(Register(stub.get(), "", "node-a"), grpc::StatusCode::OK);
  client::HeartbeatStream beats(&(*c)->stub(0), (*c)->StreamContext(), "node-a");
  const auto counting = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (HeartbeatsCounted(planner) < 1 && std::chrono::steady_clock::now() < counting) {
    beats.Beat();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GE(HeartbeatsCounted(planner), 1) << planner.log();
  planner.Signal(SIGSTOP);
  const auto stopped = std::chrono::steady_clock::now();
  const grpc::Status ended = BeatUntilEnded(&beats);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();
  planner.Signal(SIGCONT);
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::UNAVAILABLE) << ended.error_message();
  EXPECT_LT(took, 15.0);
}

// The planner serves HeartbeatStream from a completion queue of its own: shut down (SIGTERM)
// while many streams are open and beating, it ends them and exits 0 (no hang waiting for the
// queue, no operation started on it once shut down).
TEST_P(HeartbeatBatchTest, APlannerShutDownWithOpenStreamsEndsThemAndExitsCleanly) {
  PlannerProcess planner(kPlanner);
  ASSERT_TRUE(planner
                  .Start({"--state_dir=" + TestPath(absl::StrCat("stream-shutdown-", GetParam())),
                          BatchFlag()})
                  .ok())
      << planner.log();
  auto stub = Connect(planner.address());
  constexpr int kNodes = 32;
  std::vector<std::unique_ptr<client::HeartbeatStream>> streams;
  for (int i = 0; i < kNodes; ++i) {
    const std::string node = "node-" + std::to_string(i);
    ASSERT_EQ(Register(stub.get(), "", node), grpc::StatusCode::OK);
    streams.push_back(OpenBeats(stub.get(), "", node));
  }
  // Every stream is open once its first heartbeat is counted (each scrape is a round trip to
  // the planner's metrics endpoint).
  for (auto& s : streams) ASSERT_TRUE(s->Beat());
  const auto counting = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (HeartbeatsCounted(planner) < kNodes && std::chrono::steady_clock::now() < counting) {
  }
  ASSERT_GE(HeartbeatsCounted(planner), kNodes) << planner.log();
  // A beat on every stream still on its way while the planner shuts down.
  for (auto& s : streams) s->Beat();
  const int status = planner.Kill(SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "wait status " << status << "\n" << planner.log();
  for (auto& s : streams) {
    EXPECT_TRUE(s->AwaitEnd(absl::Seconds(20)));
    EXPECT_NE(s->status().error_code(), grpc::StatusCode::OK);
  }
}

INSTANTIATE_TEST_SUITE_P(EachAsItArrivesAndBatched, HeartbeatBatchTest,
                         ::testing::Values("0", "2"));

}  // namespace
}  // namespace octopipe
