// Two nodes' replicators over real TCP stores and separate directories: files written on one
// node reach the other (once, not echoed back), a missing layer is fetched on demand, corrupted
// bytes are refused, a restarted node does not push again what its peers hold.
#include "worker_agent/checkpoint_replicator.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "executor/checkpoint.h"
#include "gtest/gtest.h"
#include "core/test_dirs.h"

namespace octopipe::agent {
namespace {

using ::octopipe::testing::FreshTestDir;

namespace fs = std::filesystem;


executor::LayerCheckpoint Layer(int layer, int64_t iteration) {
  executor::LayerCheckpoint c;
  c.layer = layer;
  c.iteration = iteration;
  c.kind = "M";
  c.params.push_back(executor::Tensor::Zero(2, 3));
  c.params[0].data()[0] = static_cast<float>(layer + iteration);
  return c;
}

struct Side {
  // `fresh`: an empty directory; otherwise the directory as a previous Side of the same name
  // left it (an agent restarted on the same node).
  explicit Side(const std::string& name, bool fresh = true)
      : root(fresh ? FreshTestDir(name) : std::string(std::getenv("TEST_TMPDIR")) + "/" + name),
        replicator(root, std::chrono::milliseconds(2000)),
        store(*executor::TcpStoreServer::Start("127.0.0.1", 0)) {
    replicator.Serve(store.get());
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(store->port()); }
  std::string root;
  CheckpointReplicator replicator;  // outlives the store, whose threads call into it
  std::unique_ptr<executor::TcpStoreServer> store;
};

bool WaitFor(const std::function<bool()>& done, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

TEST(CheckpointReplicatorTest, WrittenLayersReachThePeerAndMissingOnesAreFetched) {
  Side a("replica-a"), b("replica-b");
  a.replicator.Replicate("job", {b.address()});
  b.replicator.Replicate("job", {a.address()});
  ASSERT_TRUE(executor::WriteLayerCheckpoint(a.root + "/job", Layer(0, 10)).ok());
  ASSERT_TRUE(executor::WriteLayerCheckpoint(b.root + "/job", Layer(1, 10)).ok());
  const std::string on_b = executor::LayerCheckpointPath(b.root + "/job", 10, 0);
  const std::string on_a = executor::LayerCheckpointPath(a.root + "/job", 10, 1);
  ASSERT_TRUE(WaitFor([&] { return executor::ReadLayerCheckpoint(on_b).ok() &&
                                   executor::ReadLayerCheckpoint(on_a).ok(); }, 30));
  EXPECT_EQ(executor::ReadLayerCheckpoint(on_b)->params[0].data()[0], 10.0f);
  // Received files are not pushed back: once each side has made two more full passes over its
  // directory (the received file present throughout), each side pushed exactly its own file.
  const int64_t a_scans = a.replicator.scans(), b_scans = b.replicator.scans();
  ASSERT_TRUE(WaitFor([&] { return a.replicator.scans() >= a_scans + 2 &&
                                   b.replicator.scans() >= b_scans + 2; }, 30));
  EXPECT_EQ(a.replicator.pushed(), 1);
  EXPECT_EQ(b.replicator.pushed(), 1);

  // A layer b never received (not replicated: no peers for that job) is fetched from a.
  a.replicator.Replicate("other", {});
  ASSERT_TRUE(executor::WriteLayerCheckpoint(a.root + "/other", Layer(0, 20)).ok());
  ASSERT_TRUE(executor::WriteLayerCheckpoint(a.root + "/other", Layer(1, 20)).ok());
  EXPECT_TRUE(b.replicator.FetchMissing("other", 20, 2, a.address()).ok());
  EXPECT_TRUE(executor::ReadLayerCheckpoint(
                  executor::LayerCheckpointPath(b.root + "/other", 20, 1)).ok());
  absl::Status missing = b.replicator.FetchMissing("other", 20, 3, a.address());
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound) << missing;
  EXPECT_NE(missing.message().find("layer 2"), std::string::npos) << missing;

  // Bytes that do not verify are refused by the receiving store.
  executor::TcpStore client(b.address(), std::chrono::seconds(5));
  EXPECT_FALSE(client.Put(CheckpointKey("job", 30, 0), "not a checkpoint").ok());
  EXPECT_FALSE(fs::exists(executor::LayerCheckpointPath(b.root + "/job", 30, 0)));
  EXPECT_FALSE(client.Put("ckpt/../escape/1/0", "x").ok());
}

// An agent restarted on the same node forgets what it pushed and what it received; its peers
// still hold those files, and it asks them before pushing ("ckpt/JOB/held").
TEST(CheckpointReplicatorTest, RestartedNodeDoesNotPushAgainWhatItsPeerHolds) {
  auto a = std::make_unique<Side>("restart-a");
  auto b = std::make_unique<Side>("restart-b");
  a->replicator.Replicate("job", {b->address()});
  b->replicator.Replicate("job", {a->address()});
  for (int layer = 0; layer < 3; ++layer) {
    ASSERT_TRUE(executor::WriteLayerCheckpoint(a->root + "/job", Layer(layer, 10)).ok());
  }
  // b has a file of its own that a receives.
  ASSERT_TRUE(executor::WriteLayerCheckpoint(b->root + "/job", Layer(3, 10)).ok());
  ASSERT_TRUE(WaitFor([&] { return a->replicator.pushed() == 3 && b->replicator.pushed() == 1; },
                      30));
  const std::string received = executor::LayerCheckpointPath(a->root + "/job", 10, 3);
  ASSERT_TRUE(WaitFor([&] { return executor::ReadLayerCheckpoint(received).ok(); }, 30));

  // Restart a: the same directory, a fresh replicator and store.
  a.reset();
  a = std::make_unique<Side>("restart-a", /*fresh=*/false);
  b->replicator.Replicate("job", {a->address()});
  a->replicator.Replicate("job", {b->address()});
  int64_t scans = a->replicator.scans();
  ASSERT_TRUE(WaitFor([&] { return a->replicator.scans() >= scans + 2; }, 30));
  EXPECT_EQ(a->replicator.pushed(), 0) << "neither its own old files nor the one from b";
  // A file written after the restart is pushed.
  ASSERT_TRUE(executor::WriteLayerCheckpoint(a->root + "/job", Layer(0, 20)).ok());
  ASSERT_TRUE(WaitFor([&] { return a->replicator.pushed() == 1; }, 30));
  ASSERT_TRUE(WaitFor([&] { return executor::ReadLayerCheckpoint(executor::LayerCheckpointPath(
                                       b->root + "/job", 20, 0)).ok(); }, 30));

  // Restart b: a holds every file b has (its own and those received), so b pushes nothing.
  b.reset();
  b = std::make_unique<Side>("restart-b", /*fresh=*/false);
  b->replicator.Replicate("job", {a->address()});
  scans = b->replicator.scans();
  ASSERT_TRUE(WaitFor([&] { return b->replicator.scans() >= scans + 2; }, 30));
  EXPECT_EQ(b->replicator.pushed(), 0);
}

// A peer lost after it was asked what it holds (a node killed mid-run) costs one failed push
// per pass, not one per file: the live peer gets every new file in the pass the loss is met.
TEST(CheckpointReplicatorTest, ALostPeerIsLeftForThePassAndDoesNotHoldUpTheOthers) {
  Side a("lost-a"), live("lost-live");
  auto lost = std::make_unique<Side>("lost-lost");
  a.replicator.Replicate("job", {lost->address(), live.address()});
  ASSERT_TRUE(executor::WriteLayerCheckpoint(a.root + "/job", Layer(0, 10)).ok());
  ASSERT_TRUE(WaitFor([&] { return a.replicator.pushed() == 2; }, 30));
  lost.reset();
  const int64_t scans = a.replicator.scans();
  for (int layer = 0; layer < 3; ++layer) {
    ASSERT_TRUE(executor::WriteLayerCheckpoint(a.root + "/job", Layer(layer, 20)).ok());
  }
  ASSERT_TRUE(WaitFor([&] { return a.replicator.pushed() == 5; }, 30));
  for (int layer = 0; layer < 3; ++layer) {
    EXPECT_TRUE(executor::ReadLayerCheckpoint(
                    executor::LayerCheckpointPath(live.root + "/job", 20, layer)).ok());
  }
  // Each pass since the loss (the one running now included) tried the lost peer once at most.
  EXPECT_GE(a.replicator.failed_pushes(), 1);
  EXPECT_LE(a.replicator.failed_pushes(), a.replicator.scans() - scans + 1);
}

constexpr std::chrono::milliseconds kConnect(200);

TEST(ReplicaNodesTest, TheNextKNodesInTheSortedRing) {
  const std::vector<std::string> nodes = {"c", "a", "d", "b"};
  EXPECT_EQ(ReplicaNodes(nodes, "a", 1), (std::vector<std::string>{"b"}));
  EXPECT_EQ(ReplicaNodes(nodes, "c", 2), (std::vector<std::string>{"d", "a"}));
  EXPECT_EQ(ReplicaNodes(nodes, "d", 1), (std::vector<std::string>{"a"}));
  EXPECT_EQ(ReplicaNodes(nodes, "b", -1), (std::vector<std::string>{"c", "d", "a"}));
  EXPECT_EQ(ReplicaNodes(nodes, "b", 7), (std::vector<std::string>{"c", "d", "a"}));
  EXPECT_TRUE(ReplicaNodes(nodes, "b", 0).empty());
  EXPECT_TRUE(ReplicaNodes({"a"}, "a", -1).empty());
}

// Three nodes, each layer file kept on one peer (the next node in the ring): no node holds
// every layer; after the loss of one node, the survivor gathers the newest checkpoint from
// what it holds and what the other survivor holds.
TEST(CheckpointReplicatorTest, OneReplicaPerFileAndTheNewestCheckpointGatheredAfterALoss) {
  Side a("ring-a"), b("ring-b");
  auto c = std::make_unique<Side>("ring-c");
  const std::map<std::string, std::string> address = {
      {"a", a.address()}, {"b", b.address()}, {"c", c->address()}};
  Side* side[] = {&a, &b, c.get()};
  const std::string names[] = {"a", "b", "c"};
  for (int i = 0; i < 3; ++i) {
    std::vector<std::string> peers;
    for (const std::string& n : ReplicaNodes({"a", "b", "c"}, names[i], 1)) {
      peers.push_back(address.at(n));
    }
    side[i]->replicator.Replicate("job", peers);
  }
  // Node i writes layer i of iterations 10 and 20, except that a never writes its layer of 20:
  // 20 is complete nowhere.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(executor::WriteLayerCheckpoint(side[i]->root + "/job", Layer(i, 10)).ok());
    if (i > 0) {
      ASSERT_TRUE(executor::WriteLayerCheckpoint(side[i]->root + "/job", Layer(i, 20)).ok());
    }
  }
  ASSERT_TRUE(WaitFor([&] { return a.replicator.pushed() == 1 && b.replicator.pushed() == 2 &&
                                   c->replicator.pushed() == 2; }, 30));
  auto holds = [](const Side& s, int64_t iteration, int layer) {
    return fs::exists(executor::LayerCheckpointPath(s.root + "/job", iteration, layer));
  };
  // One replica per file: c never got a's layer, a never got b's.
  EXPECT_TRUE(holds(b, 10, 0));
  EXPECT_FALSE(holds(*c, 10, 0));
  EXPECT_FALSE(holds(a, 10, 1));
  EXPECT_TRUE(holds(a, 10, 2));

  // c is lost; a gathers iteration 10 (layer 1 from b) and skips the incomplete 20.
  c.reset();
  EXPECT_EQ(a.replicator.GatherNewest("job", 3, {b.address(), "127.0.0.1:1"}, kConnect), 10);
  for (int layer = 0; layer < 3; ++layer) {
    EXPECT_TRUE(executor::ReadLayerCheckpoint(
                    executor::LayerCheckpointPath(a.root + "/job", 10, layer)).ok())
        << "layer " << layer;
  }
  EXPECT_EQ(a.replicator.GatherNewest("job", 4, {b.address()}, kConnect), 0)
      << "no 4-layer checkpoint";
}

}  // namespace
}  // namespace octopipe::agent
