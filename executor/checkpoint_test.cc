// Checkpoints: atomic per-layer files with a checksum; a corrupted, truncated or partial
// checkpoint is skipped for the previous one; resuming from iteration k (onto the same or a
// different partition and number of ranks) and training to n gives bit-identical weights to an
// uninterrupted run to n; a coordinated stop checkpoints at the iteration boundary.
#include "executor/checkpoint.h"

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "executor/inproc_transport.h"
#include "executor/model_spec.h"
#include "executor/trainer.h"
#include "gtest/gtest.h"
#include "simulator/classic_pipeline.h"
#include "core/test_dirs.h"

namespace octopipe::executor {
namespace {

using ::octopipe::testing::FreshTestDir;

namespace fs = std::filesystem;

ModelSpec Spec() {
  return *ParseModelSpec(
      "ref:pattern=M*-EM-,hidden=16,heads=2,ffn=24,experts=4,top_k=2,moe_ffn=12,state=4,"
      "seq=8,vocab=32,seed=5,microbatches=4");
}


Plan MakePlan(ScheduleKind kind, int ranks) {
  absl::StatusOr<Plan> plan = ClassicPlan(kind, ranks, 0, Spec().microbatches, ToModelGraph(Spec()));
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *plan;
}

// Runs every rank of `plan` as a thread; returns each rank's result (failing the test on error).
std::vector<RankResult> TrainAll(const Plan& plan, const TrainOptions& options) {
  const ModelSpec spec = Spec();
  InProcHub hub(plan.num_devices, InProcOptions{.timeout_s = 60});
  std::vector<absl::StatusOr<RankResult>> results;
  for (int r = 0; r < plan.num_devices; ++r) results.emplace_back(absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < plan.num_devices; ++r) {
    threads.emplace_back([&, r] {
      auto t = hub.Endpoint(r);
      results[r] = TrainRank(spec, plan, r, t.get(), options);
      if (!results[r].ok()) hub.Abort(r);
    });
  }
  for (auto& t : threads) t.join();
  std::vector<RankResult> out;
  for (auto& r : results) {
    EXPECT_TRUE(r.ok()) << r.status();
    if (r.ok()) out.push_back(std::move(*r));
  }
  return out;
}

// Parameters by model layer index, gathered from the ranks that own them.
std::vector<std::vector<Tensor>> Weights(std::vector<RankResult>& results) {
  std::vector<std::vector<Tensor>> w(Spec().kinds.size());
  for (RankResult& r : results) {
    for (size_t l = 0; l < r.layers.size(); ++l) {
      if (r.layers[l] == nullptr) continue;
      w[l].clear();
      for (Tensor* p : r.layers[l]->params()) w[l].push_back(*p);
    }
  }
  return w;
}

void ExpectBitIdentical(const std::vector<std::vector<Tensor>>& a,
                        const std::vector<std::vector<Tensor>>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t l = 0; l < a.size(); ++l) {
    ASSERT_EQ(a[l].size(), b[l].size()) << what << " layer " << l;
    ASSERT_FALSE(a[l].empty()) << what << " layer " << l << " missing";
    for (size_t i = 0; i < a[l].size(); ++i) {
      ASSERT_EQ(a[l][i].size(), b[l][i].size());
      EXPECT_EQ(std::memcmp(a[l][i].data(), b[l][i].data(), a[l][i].size() * sizeof(float)), 0)
          << what << ": layer " << l << " parameter " << i << " differs";
    }
  }
}

void FlipByte(const std::string& path, long offset_from_end) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f) << path;
  f.seekg(-offset_from_end, std::ios::end);
  char c;
  f.read(&c, 1);
  c ^= 0x5a;
  f.seekp(-offset_from_end, std::ios::end);
  f.write(&c, 1);
}

std::vector<std::vector<Tensor>> Uninterrupted(int iterations) {
  TrainOptions o;
  o.iterations = iterations;
  std::vector<RankResult> r = TrainAll(MakePlan(ScheduleKind::k1F1B, 2), o);
  return Weights(r);
}

TEST(CheckpointTest, WritesCompleteCheckpointsAndKeepsTheNewest) {
  const std::string dir = FreshTestDir("keep");
  TrainOptions o;
  o.iterations = 4;
  o.checkpoint_dir = dir;
  o.checkpoint_interval = 1;
  o.keep_checkpoints = 2;
  TrainAll(MakePlan(ScheduleKind::k1F1B, 2), o);
  absl::StatusOr<int64_t> latest = LatestCompleteCheckpoint(dir, Spec());
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, 4);
  // Rank 0 prunes when it saves 4, keeping the 2 newest complete checkpoints: 3 is complete
  // (iteration 4 needed every rank past its save of 3), and 4 is too when rank 1's save of 4
  // landed first, else 2 is — so 1 is always pruned, 3 always kept, 2 either way.
  EXPECT_FALSE(fs::exists(LayerCheckpointPath(dir, 1, 0))) << "pruned";
  EXPECT_TRUE(fs::exists(LayerCheckpointPath(dir, 3, 0)));
  absl::StatusOr<LayerCheckpoint> c = ReadLayerCheckpoint(LayerCheckpointPath(dir, 3, 2));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->layer, 2);
  EXPECT_EQ(c->iteration, 3);
  EXPECT_EQ(c->optimizer_step, 3);
  EXPECT_EQ(c->kind, Spec().kinds[2]);
  EXPECT_EQ(c->first_moments.size(), c->params.size());
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << "left over: " << e.path();
  }
}

TEST(CheckpointTest, VerifiedBytesCopyToAnotherRootAndBadBytesAreRefused) {
  const std::string dir = FreshTestDir("copy-from");
  const std::string other = FreshTestDir("copy-to");
  TrainOptions o;
  o.iterations = 2;
  o.checkpoint_dir = dir;
  o.checkpoint_interval = 2;
  TrainAll(MakePlan(ScheduleKind::k1F1B, 2), o);
  const int layers = static_cast<int>(Spec().kinds.size());
  EXPECT_EQ(ListLayerCheckpoints(dir).size(), static_cast<size_t>(layers));
  for (int l = 0; l < layers; ++l) {
    absl::StatusOr<std::string> bytes = ReadLayerCheckpointBytes(LayerCheckpointPath(dir, 2, l));
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    absl::StatusOr<std::string> path = StoreLayerCheckpointBytes(other, *bytes);
    ASSERT_TRUE(path.ok()) << path.status();
    EXPECT_EQ(*path, LayerCheckpointPath(other, 2, l));  // where its own header says
  }
  EXPECT_EQ(*LatestCompleteCheckpoint(other, Spec()), 2);
  std::string bytes = *ReadLayerCheckpointBytes(LayerCheckpointPath(dir, 2, 0));
  bytes[bytes.size() / 2] ^= 1;
  const std::string dropped = FreshTestDir("copy-refused");
  EXPECT_EQ(StoreLayerCheckpointBytes(dropped, bytes).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_TRUE(ListLayerCheckpoints(dropped).empty());
}

TEST(CheckpointTest, CorruptTruncatedOrPartialCheckpointsFallBackToThePreviousOne) {
  const std::string dir = FreshTestDir("corrupt");
  TrainOptions o;
  o.iterations = 3;
  o.checkpoint_dir = dir;
  o.checkpoint_interval = 1;
  o.keep_checkpoints = 3;
  TrainAll(MakePlan(ScheduleKind::k1F1B, 2), o);
  ASSERT_EQ(*LatestCompleteCheckpoint(dir, Spec()), 3);

  FlipByte(LayerCheckpointPath(dir, 3, 4), 20);
  absl::StatusOr<LayerCheckpoint> bad = ReadLayerCheckpoint(LayerCheckpointPath(dir, 3, 4));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find("checksum"), std::string::npos) << bad.status();
  EXPECT_EQ(*LatestCompleteCheckpoint(dir, Spec()), 2);

  fs::resize_file(LayerCheckpointPath(dir, 2, 1), 30);  // a partial write
  EXPECT_EQ(*LatestCompleteCheckpoint(dir, Spec()), 1);

  fs::remove(LayerCheckpointPath(dir, 1, 0));  // a rank died before writing its layers
  absl::StatusOr<int64_t> none = LatestCompleteCheckpoint(dir, Spec());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(LatestCompleteCheckpoint(dir + "/absent", Spec()).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(CheckpointTest, ResumeOntoAnyPartitionIsBitIdenticalToAnUninterruptedRun) {
  const std::vector<std::vector<Tensor>> want = Uninterrupted(5);
  struct Case {
    const char* what;
    ScheduleKind kind;
    int ranks;
  };
  for (const Case& c : {Case{"same partition", ScheduleKind::k1F1B, 2},
                        Case{"3 ranks", ScheduleKind::k1F1B, 3},
                        Case{"1 rank", ScheduleKind::kGpipe, 1},
                        Case{"4 ranks gpipe", ScheduleKind::kGpipe, 4}}) {
    const std::string dir = FreshTestDir(std::string("resume-") + std::to_string(c.ranks));
    TrainOptions first;
    first.iterations = 2;
    first.checkpoint_dir = dir;
    first.checkpoint_interval = 2;
    TrainAll(MakePlan(ScheduleKind::k1F1B, 2), first);
    TrainOptions second = first;
    second.iterations = 5;
    second.resume = true;
    std::vector<RankResult> resumed = TrainAll(MakePlan(c.kind, c.ranks), second);
    ASSERT_FALSE(resumed.empty());
    EXPECT_EQ(resumed[0].first_iteration, 2) << c.what;
    EXPECT_EQ(resumed[0].completed_iterations, 5) << c.what;
    EXPECT_EQ(resumed[0].iterations.size(), 3u) << c.what;
    ExpectBitIdentical(Weights(resumed), want, c.what);
  }
}

TEST(CheckpointTest, ResumeSkipsACorruptedNewestCheckpoint) {
  const std::vector<std::vector<Tensor>> want = Uninterrupted(4);
  const std::string dir = FreshTestDir("skip");
  TrainOptions first;
  first.iterations = 3;
  first.checkpoint_dir = dir;
  first.checkpoint_interval = 1;
  TrainAll(MakePlan(ScheduleKind::k1F1B, 2), first);
  FlipByte(LayerCheckpointPath(dir, 3, 0), 100);
  TrainOptions second = first;
  second.iterations = 4;
  second.resume = true;
  std::vector<RankResult> resumed = TrainAll(MakePlan(ScheduleKind::k1F1B, 3), second);
  ASSERT_FALSE(resumed.empty());
  EXPECT_EQ(resumed[0].first_iteration, 2);
  ExpectBitIdentical(Weights(resumed), want, "after skipping iteration 3");
}

TEST(CheckpointTest, CoordinatedStopCheckpointsAtTheIterationBoundary) {
  const std::vector<std::vector<Tensor>> want = Uninterrupted(4);
  const std::string dir = FreshTestDir("stop");
  std::atomic<int> polls{0};
  TrainOptions o;
  o.iterations = 4;
  o.checkpoint_dir = dir;
  o.checkpoint_interval = 100;  // only the stop saves
  o.stoppable = true;
  o.stop_requested = [&] { return ++polls > 3; };  // stop before iteration 3
  std::vector<RankResult> stopped = TrainAll(MakePlan(ScheduleKind::k1F1B, 3), o);
  ASSERT_EQ(stopped.size(), 3u);
  for (const RankResult& r : stopped) {
    EXPECT_TRUE(r.stopped) << "rank " << r.rank;
    EXPECT_EQ(r.completed_iterations, 3) << "rank " << r.rank;
  }
  EXPECT_EQ(*LatestCompleteCheckpoint(dir, Spec()), 3);
  TrainOptions again;
  again.iterations = 4;
  again.checkpoint_dir = dir;
  again.resume = true;
  again.stoppable = true;  // nobody asks: trains to the end
  std::vector<RankResult> resumed = TrainAll(MakePlan(ScheduleKind::k1F1B, 2), again);
  ASSERT_FALSE(resumed.empty());
  EXPECT_FALSE(resumed[0].stopped);
  ExpectBitIdentical(Weights(resumed), want, "after a coordinated stop");
}

}  // namespace
}  // namespace octopipe::executor
