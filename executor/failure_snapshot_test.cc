// TrainOptions::snapshot_on_failure: a rank whose training fails after it completed iterations
// past its last checkpoint writes the layers it holds whole, as they are after the last completed
// iteration, as the checkpoint of the completed iterations (calling on_snapshot), and still
// returns the failure; resuming from that checkpoint trains as an uninterrupted run does.
//
// Failures are injected deterministically: every rank's transport is wrapped in a decorator that
// starts failing every message and collective call with kUnavailable once the rank itself has
// completed iteration k - 1 (the flag is set from that rank's own on_iteration, after all of its
// messages of that iteration are done). Every rank thus fails on its first call of iteration k
// without reaching the in-process transport, so no rank waits on another.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/layout_plan.h"
#include "executor/checkpoint.h"
#include "executor/inproc_transport.h"
#include "executor/layout_trainer.h"
#include "executor/model_spec.h"
#include "executor/testing/random_plan.h"
#include "executor/testing/reference_training.h"
#include "executor/trainer.h"
#include "gtest/gtest.h"
#include "core/test_dirs.h"

namespace octopipe::executor {
namespace {

using ::octopipe::testing::FreshTestDir;

// --- fault injection ---

class FailingCollective : public Collective {
 public:
  FailingCollective(std::unique_ptr<Collective> inner, std::shared_ptr<std::atomic<bool>> failing,
                    std::shared_ptr<std::atomic<int>> injected)
      : inner_(std::move(inner)), failing_(std::move(failing)), injected_(std::move(injected)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }
  absl::Status AllReduceSum(float* data, size_t count) override {
    if (failing_->load()) return Injected("AllReduceSum");
    return inner_->AllReduceSum(data, count);
  }
  absl::Status AllToAllV(const float* send, const std::vector<size_t>& send_counts, float* recv,
                         const std::vector<size_t>& recv_counts) override {
    if (failing_->load()) return Injected("AllToAllV");
    return inner_->AllToAllV(send, send_counts, recv, recv_counts);
  }

 private:
  absl::Status Injected(const char* what) {
    ++*injected_;
    return absl::UnavailableError(absl::StrCat("injected failure: ", what, " on ", name()));
  }
  std::unique_ptr<Collective> inner_;
  std::shared_ptr<std::atomic<bool>> failing_;
  std::shared_ptr<std::atomic<int>> injected_;
};

// Delegates everything to `inner`; once Trip() was called, every Send / Recv / Start* and every
// call of a collective made through it fails at once with kUnavailable (the inner transport is
// not touched). Making collectives is always delegated.
class FailingTransport : public Transport {
 public:
  // `point_to_point` false: once tripped only collectives fail (messages still go through, as
  // between the survivors of a lost peer's group).
  explicit FailingTransport(std::unique_ptr<Transport> inner, bool point_to_point = true)
      : inner_(std::move(inner)), point_to_point_(point_to_point) {}
  void Trip() { failing_->store(true); }
  int injected() const { return injected_->load(); }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return inner_->name(); }
  absl::Status Send(int dst, uint32_t tag, const void* data, size_t bytes) override {
    if (failing_->load() && point_to_point_) return Injected("Send to", dst, tag);
    return inner_->Send(dst, tag, data, bytes);
  }
  absl::Status Recv(int src, uint32_t tag, void* data, size_t bytes) override {
    if (failing_->load() && point_to_point_) return Injected("Recv from", src, tag);
    return inner_->Recv(src, tag, data, bytes);
  }
  bool has_async() const override { return inner_->has_async(); }
  absl::StatusOr<std::unique_ptr<PendingMessage>> StartSend(int dst, uint32_t tag,
                                                            const void* data,
                                                            size_t bytes) override {
    if (failing_->load() && point_to_point_) return Injected("StartSend to", dst, tag);
    return inner_->StartSend(dst, tag, data, bytes);
  }
  absl::StatusOr<std::unique_ptr<PendingMessage>> StartRecv(int src, uint32_t tag, void* data,
                                                            size_t bytes) override {
    if (failing_->load() && point_to_point_) return Injected("StartRecv from", src, tag);
    return inner_->StartRecv(src, tag, data, bytes);
  }
  absl::StatusOr<std::unique_ptr<Collective>> NewCollective(const std::vector<int>& ranks,
                                                            const std::string& name) override {
    absl::StatusOr<std::unique_ptr<Collective>> c = inner_->NewCollective(ranks, name);
    if (!c.ok()) return c.status();
    return std::unique_ptr<Collective>(
        std::make_unique<FailingCollective>(std::move(*c), failing_, injected_));
  }

 private:
  absl::Status Injected(const char* what, int peer, uint32_t tag) {
    ++*injected_;
    return absl::UnavailableError(
        absl::StrCat("injected failure: rank ", rank(), " ", what, " ", peer, " tag ", tag));
  }
  std::unique_ptr<Transport> inner_;
  const bool point_to_point_;
  std::shared_ptr<std::atomic<bool>> failing_ = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<std::atomic<int>> injected_ = std::make_shared<std::atomic<int>>(0);
};

// When the transports start failing: never (both -1 / false), from the start (the first
// iteration this run trains), or once the rank has completed iteration `after_iteration`.
struct Failure {
  bool from_start = false;
  int after_iteration = -1;
  bool collectives_only = false;  // FailingTransport's point_to_point false
};

struct Outcome {
  std::vector<absl::StatusOr<RankResult>> results;
  std::vector<std::vector<std::pair<int, int>>> snapshots;  // per rank: (iteration, layers)
  std::vector<int> injected;                                // per rank: calls failed on purpose
};

using TrainFn = std::function<absl::StatusOr<RankResult>(int rank, Transport* transport,
                                                         const TrainOptions& options)>;

// One thread per rank over a fresh in-process hub (its timeout only a safety net: no injected
// failure waits on it).
Outcome RunRanks(int num_ranks, const TrainFn& train, const TrainOptions& base,
                 Failure failure) {
  InProcOptions hub_options;
  hub_options.timeout_s = 30;
  InProcHub hub(num_ranks, hub_options);
  Outcome out;
  out.results.resize(num_ranks);
  out.snapshots.resize(num_ranks);
  out.injected.resize(num_ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < num_ranks; ++r) {
    threads.emplace_back([&, r] {
      FailingTransport transport(hub.Endpoint(r), !failure.collectives_only);
      if (failure.from_start) transport.Trip();
      TrainOptions options = base;
      options.on_iteration = [&transport, failure](int it, const IterationStats&) {
        if (it == failure.after_iteration) transport.Trip();
      };
      options.on_snapshot = [&out, r](int iteration, int layers) {
        out.snapshots[r].push_back({iteration, layers});
      };
      out.results[r] = train(r, &transport, options);
      out.injected[r] = transport.injected();
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

// --- the model and helpers ---

ModelSpec Spec(int microbatches) {
  return ::octopipe::executor::testing::EqualityTestSpec(microbatches);
}


double RelErr(const Tensor& got, const Tensor& want) {
  if (got.rows() != want.rows() || got.cols() != want.cols()) return 1e30;
  return (got - want).norm() / std::max(1e-12, static_cast<double>(want.norm()));
}

// Layer l's parameters from the first rank holding it (whole layers only).
std::vector<std::vector<Tensor>> ModelParams(const std::vector<absl::StatusOr<RankResult>>& results,
                                             int num_layers) {
  std::vector<std::vector<Tensor>> out(num_layers);
  for (int l = 0; l < num_layers; ++l) {
    for (const auto& r : results) {
      if (!r.ok() || r->layers[l] == nullptr) continue;
      for (Tensor* p : r->layers[l]->params()) out[l].push_back(*p);
      break;
    }
  }
  return out;
}

// The losses of iterations [first, n) (from the ranks that report one).
std::vector<double> Losses(const std::vector<absl::StatusOr<RankResult>>& results) {
  std::vector<double> out;
  for (const auto& r : results) {
    if (!r.ok()) continue;
    if (r->iterations.empty() || !r->iterations[0].has_loss) continue;
    for (const IterationStats& s : r->iterations) out.push_back(s.loss);
    break;
  }
  return out;
}

std::vector<int64_t> CheckpointIterations(const std::string& dir) {
  std::vector<int64_t> out;
  for (const auto& [it, layer] : ListLayerCheckpoints(dir)) {
    if (out.empty() || out.back() != it) out.push_back(it);
  }
  return out;
}

TrainFn Pipeline(const ModelSpec& spec, const Plan& plan) {
  return [&spec, plan](int rank, Transport* transport, const TrainOptions& options) {
    return TrainRank(spec, plan, rank, transport, options);
  };
}

TrainFn Layout(const ModelSpec& spec, const LayoutPlan& plan) {
  return [&spec, plan](int rank, Transport* transport, const TrainOptions& options) {
    return TrainLayoutRank(spec, plan, rank, transport, options);
  };
}

void ExpectAllFailedAt(const Outcome& o, int iteration, const std::string& what) {
  for (size_t r = 0; r < o.results.size(); ++r) {
    ASSERT_FALSE(o.results[r].ok()) << what << " rank " << r << " did not fail";
    EXPECT_TRUE(absl::IsUnavailable(o.results[r].status())) << what << " rank " << r << ": "
                                                            << o.results[r].status();
    EXPECT_NE(o.results[r].status().message().find(absl::StrCat("iteration ", iteration)),
              std::string::npos)
        << what << " rank " << r << ": " << o.results[r].status();
    EXPECT_GT(o.injected[r], 0) << what << " rank " << r;
  }
}

// The whole scenario of test 1: train with failures injected during iteration k (no checkpoint
// covering k), expect the snapshot of k on every rank (layers per rank as `layers_per_rank`
// says; together every layer), the checkpoint of k complete and holding single-process
// training's state after k iterations; then resume to n and match an uninterrupted run.
// `sharded` (ranks hold TP / EP shards): only the collectives fail, and the final weights are
// read from the resumed run's checkpoint of n (a multiple of the checkpoint interval).
void ExpectSnapshotResumes(const ModelSpec& spec, int num_ranks, int global_microbatches,
                           const TrainFn& train, const TrainOptions& base, int k, int n,
                           const std::vector<int>& layers_per_rank,
                           const std::vector<int64_t>& checkpoints_after_failure,
                           const std::string& what, bool sharded = false) {
  const int L = static_cast<int>(spec.kinds.size());
  ASSERT_FALSE(base.checkpoint_dir.empty());
  TrainOptions options = base;
  options.iterations = n;
  options.snapshot_on_failure = true;
  const Outcome failed =
      RunRanks(num_ranks, train, options, Failure{false, k - 1, /*collectives_only=*/sharded});
  ExpectAllFailedAt(failed, k, what);
  for (int r = 0; r < num_ranks; ++r) {
    ASSERT_EQ(failed.snapshots[r].size(), 1u) << what << " rank " << r;
    EXPECT_EQ(failed.snapshots[r][0].first, k) << what << " rank " << r;
    EXPECT_EQ(failed.snapshots[r][0].second, layers_per_rank[r]) << what << " rank " << r;
  }
  absl::StatusOr<int64_t> latest = LatestCompleteCheckpoint(base.checkpoint_dir, spec);
  ASSERT_TRUE(latest.ok()) << what << ": " << latest.status();
  EXPECT_EQ(*latest, k) << what;
  EXPECT_EQ(CheckpointIterations(base.checkpoint_dir), checkpoints_after_failure) << what;

  // The snapshot holds the state after k iterations (the failed one left it untouched).
  const testing::Reference after_k = testing::TrainReference(spec, global_microbatches, k);
  for (int l = 0; l < L; ++l) {
    absl::StatusOr<LayerCheckpoint> c =
        ReadLayerCheckpoint(LayerCheckpointPath(base.checkpoint_dir, k, l));
    ASSERT_TRUE(c.ok()) << what << ": " << c.status();
    EXPECT_EQ(c->iteration, k) << what << " layer " << l;
    EXPECT_EQ(c->optimizer_step, k) << what << " layer " << l;
    ASSERT_EQ(c->params.size(), after_k.params[l].size()) << what << " layer " << l;
    EXPECT_EQ(c->first_moments.size(), c->params.size()) << what << " layer " << l;
    for (size_t i = 0; i < c->params.size(); ++i) {
      EXPECT_LE(RelErr(c->params[i], after_k.params[l][i]), 1e-5)
          << what << ": snapshot layer " << l << " (" << spec.kinds[l] << ") param " << i;
    }
  }

  // Resume from it on fresh transports, to n.
  TrainOptions resume = base;
  resume.iterations = n;
  resume.resume = true;
  const Outcome resumed = RunRanks(num_ranks, train, resume, Failure{});
  for (int r = 0; r < num_ranks; ++r) {
    ASSERT_TRUE(resumed.results[r].ok()) << what << " resumed rank " << r << ": "
                                         << resumed.results[r].status();
    EXPECT_EQ(resumed.results[r]->first_iteration, k) << what << " rank " << r;
    EXPECT_EQ(resumed.results[r]->completed_iterations, n) << what << " rank " << r;
    EXPECT_TRUE(resumed.snapshots[r].empty()) << what << " rank " << r;
  }

  // An uninterrupted run of the same plan, without checkpoints.
  TrainOptions plain;
  plain.iterations = n;
  const Outcome whole = RunRanks(num_ranks, train, plain, Failure{});
  for (int r = 0; r < num_ranks; ++r) {
    ASSERT_TRUE(whole.results[r].ok()) << what << " uninterrupted rank " << r << ": "
                                       << whole.results[r].status();
  }
  const testing::Reference ref = testing::TrainReference(spec, global_microbatches, n);

  const std::vector<double> resumed_losses = Losses(resumed.results);
  const std::vector<double> whole_losses = Losses(whole.results);
  ASSERT_EQ(resumed_losses.size(), static_cast<size_t>(n - k)) << what;
  ASSERT_EQ(whole_losses.size(), static_cast<size_t>(n)) << what;
  for (int it = k; it < n; ++it) {
    const double got = resumed_losses[it - k];
    EXPECT_NEAR(got, whole_losses[it], 1e-6 * std::abs(whole_losses[it]))
        << what << " iteration " << it;
    EXPECT_NEAR(got, ref.losses[it], 1e-6 * std::abs(ref.losses[it])) << what << " iteration "
                                                                      << it;
  }
  if (sharded) {
    // Ranks hold shards: the whole model from the resumed run's checkpoint of n (gathered).
    for (int l = 0; l < L; ++l) {
      absl::StatusOr<LayerCheckpoint> c =
          ReadLayerCheckpoint(LayerCheckpointPath(base.checkpoint_dir, n, l));
      ASSERT_TRUE(c.ok()) << what << ": " << c.status();
      ASSERT_EQ(c->params.size(), ref.params[l].size()) << what << " layer " << l;
      for (size_t i = 0; i < c->params.size(); ++i) {
        EXPECT_LE(RelErr(c->params[i], ref.params[l][i]), 1e-5)
            << what << ": layer " << l << " (" << spec.kinds[l] << ") param " << i
            << " differs from single-process training";
      }
    }
    return;
  }
  const auto got = ModelParams(resumed.results, L);
  const auto want = ModelParams(whole.results, L);
  for (int l = 0; l < L; ++l) {
    ASSERT_EQ(got[l].size(), want[l].size()) << what << " layer " << l;
    ASSERT_EQ(got[l].size(), ref.params[l].size()) << what << " layer " << l;
    for (size_t i = 0; i < got[l].size(); ++i) {
      EXPECT_LE(RelErr(got[l][i], want[l][i]), 1e-6)
          << what << ": layer " << l << " (" << spec.kinds[l] << ") param " << i
          << " differs from the uninterrupted run";
      EXPECT_LE(RelErr(got[l][i], ref.params[l][i]), 1e-5)
          << what << ": layer " << l << " (" << spec.kinds[l] << ") param " << i
          << " differs from single-process training";
    }
  }
}

// Layers rank r holds in a plain pipeline plan.
std::vector<int> PipelineLayers(const Plan& plan) {
  std::vector<int> out(plan.num_devices, 0);
  for (const StageAssignment& st : plan.stages) out[st.device] += st.last_layer - st.first_layer + 1;
  return out;
}

// --- 1. a failure past the last checkpoint saves the completed iterations ---

// Two ranks of one pipeline, each holding part of the model: both fail in iteration 3 (no
// periodic checkpoint), each writes its layers of iteration 3, together the whole model; the
// checkpoint resumes to 5 as an uninterrupted run trains. Also when the failure hits the stop
// agreement before iteration 3 (stoppable: rank 0's decision message).
TEST(FailureSnapshotTest, TwoRankPipelineSnapshotsTheCompletedIterationsAndResumes) {
  std::mt19937 rng(31);
  const ModelSpec spec = Spec(4);
  const int L = static_cast<int>(spec.kinds.size());
  const Plan plan = testing::RandomPlan(rng, L, 2, 3, 4, /*split_backward=*/true);
  for (bool stoppable : {false, true}) {
    const std::string what = stoppable ? "PP2 stoppable" : "PP2";
    TrainOptions options;
    options.checkpoint_dir = FreshTestDir(stoppable ? "pp2-stoppable" : "pp2");
    options.checkpoint_interval = 0;
    options.stoppable = stoppable;
    const std::vector<int> layers = PipelineLayers(plan);
    ASSERT_EQ(layers[0] + layers[1], L);
    ExpectSnapshotResumes(spec, 2, plan.num_microbatches, Pipeline(spec, plan), options,
                          /*k=*/3, /*n=*/5, layers, /*checkpoints_after_failure=*/{3}, what);
    if (HasFatalFailure()) return;
  }
}

// Two data-parallel replicas of a one-device pipeline: every rank holds every layer whole, so
// each writes the whole model (the copies are identical); the failure comes from the gradient
// all-reduce. A periodic checkpoint at 2 exists; the snapshot of 3 is newer.
TEST(FailureSnapshotTest, DataParallelReplicasEachSnapshotTheWholeModelAndResume) {
  std::mt19937 rng(32);
  const ModelSpec spec = Spec(2);
  const int L = static_cast<int>(spec.kinds.size());
  const LayoutPlan plan = testing::HomogeneousLayout(
      testing::RandomPlan(rng, L, 1, 2, 2, /*split_backward=*/false), 1, 1, 2);
  ASSERT_TRUE(CheckLayoutRunnable(spec, plan).ok()) << CheckLayoutRunnable(spec, plan);
  ASSERT_EQ(plan.num_ranks, 2);
  TrainOptions options;
  options.checkpoint_dir = FreshTestDir("dp2");
  options.checkpoint_interval = 2;
  ExpectSnapshotResumes(spec, 2, plan.global_microbatches, Layout(spec, plan), options,
                        /*k=*/3, /*n=*/5, {L, L}, /*checkpoints_after_failure=*/{2, 3}, "DP2");
}

// Layers split over TP or EP groups are gathered over each rank's own copy and written whole by
// its first rank; a rank of such a copy that is not its first writes only its whole layers. The
// collectives fail in iteration 3 and messages still go through (as among the survivors of a
// lost node: what broke was a group with the lost rank in it). Ranks are TP innermost, then DP:
// - DP4 x EP2: EP group 0 is ranks 0, 1 and group 1 ranks 2, 3, each holding every expert; both
//   groups' first ranks write the MoE layers (the same state: the groups are DP replicas);
// - TP2 x DP2: every layer is split over a replica's two ranks; ranks 0 and 2 write them all.
// Either way the checkpoint of 3 is complete and resumes as an uninterrupted run trains (the
// final weights compared in the checkpoint of 6, the ranks holding shards).
TEST(FailureSnapshotTest, ShardedLayersAreGatheredOverEachRanksOwnCopyAndWritten) {
  std::mt19937 rng(34);
  const ModelSpec spec = Spec(2);
  const int L = static_cast<int>(spec.kinds.size());
  const int moe = static_cast<int>(std::count(spec.kinds.begin(), spec.kinds.end(), "moe"));
  ASSERT_GT(moe, 0);
  const Plan one_device = testing::RandomPlan(rng, L, 1, 2, 2, /*split_backward=*/false);
  {
    const LayoutPlan plan = testing::HomogeneousLayout(one_device, /*tp=*/1, /*ep=*/2, /*dp=*/4);
    ASSERT_TRUE(CheckLayoutRunnable(spec, plan).ok()) << CheckLayoutRunnable(spec, plan);
    TrainOptions options;
    options.checkpoint_dir = FreshTestDir("dp4-ep2");
    options.checkpoint_interval = 2;
    ExpectSnapshotResumes(spec, 4, plan.global_microbatches, Layout(spec, plan), options,
                          /*k=*/3, /*n=*/6, {L, L - moe, L, L - moe},
                          /*checkpoints_after_failure=*/{2, 3}, "DP4 x EP2", /*sharded=*/true);
  }
  {
    const LayoutPlan plan = testing::HomogeneousLayout(one_device, /*tp=*/2, /*ep=*/1, /*dp=*/2);
    ASSERT_TRUE(CheckLayoutRunnable(spec, plan).ok()) << CheckLayoutRunnable(spec, plan);
    TrainOptions options;
    options.checkpoint_dir = FreshTestDir("tp2-dp2");
    options.checkpoint_interval = 2;
    ExpectSnapshotResumes(spec, 4, plan.global_microbatches, Layout(spec, plan), options,
                          /*k=*/3, /*n=*/6, {L, 0, L, 0}, /*checkpoints_after_failure=*/{2, 3},
                          "TP2 x DP2", /*sharded=*/true);
  }
}

// --- 2. without the option nothing is written ---

TEST(FailureSnapshotTest, WithoutTheOptionNothingIsWritten) {
  std::mt19937 rng(31);
  const ModelSpec spec = Spec(4);
  const int L = static_cast<int>(spec.kinds.size());
  const Plan plan = testing::RandomPlan(rng, L, 2, 3, 4, /*split_backward=*/true);
  for (int interval : {0, 2}) {
    const std::string what = absl::StrCat("interval ", interval);
    TrainOptions options;
    options.iterations = 5;
    options.checkpoint_dir = FreshTestDir(absl::StrCat("off-", interval));
    options.checkpoint_interval = interval;
    options.snapshot_on_failure = false;
    const Outcome o = RunRanks(2, Pipeline(spec, plan), options, Failure{false, 2});
    ExpectAllFailedAt(o, 3, what);
    for (int r = 0; r < 2; ++r) EXPECT_TRUE(o.snapshots[r].empty()) << what << " rank " << r;
    absl::StatusOr<int64_t> latest = LatestCompleteCheckpoint(options.checkpoint_dir, spec);
    if (interval == 0) {
      EXPECT_TRUE(absl::IsNotFound(latest.status())) << what << ": " << latest.status();
      EXPECT_TRUE(ListLayerCheckpoints(options.checkpoint_dir).empty()) << what;
    } else {
      ASSERT_TRUE(latest.ok()) << what << ": " << latest.status();
      EXPECT_EQ(*latest, 2) << what;  // the periodic one, older than the failure
      EXPECT_EQ(CheckpointIterations(options.checkpoint_dir), (std::vector<int64_t>{2})) << what;
    }
  }
}

// --- 3. nothing completed past the last checkpoint: nothing is written ---

// A fresh run failing in iteration 0.
TEST(FailureSnapshotTest, FailureInTheFirstIterationWritesNothing) {
  std::mt19937 rng(31);
  const ModelSpec spec = Spec(4);
  const int L = static_cast<int>(spec.kinds.size());
  const Plan plan = testing::RandomPlan(rng, L, 2, 3, 4, /*split_backward=*/true);
  TrainOptions options;
  options.iterations = 3;
  options.checkpoint_dir = FreshTestDir("first");
  options.snapshot_on_failure = true;
  const Outcome o = RunRanks(2, Pipeline(spec, plan), options, Failure{true, -1});
  ExpectAllFailedAt(o, 0, "fresh");
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(o.snapshots[r].empty()) << "rank " << r;
  EXPECT_TRUE(ListLayerCheckpoints(options.checkpoint_dir).empty());
  EXPECT_TRUE(absl::IsNotFound(LatestCompleteCheckpoint(options.checkpoint_dir, spec).status()));
}

// Every rank reports, once, that the checkpoint of `k` holds its layers (on_snapshot with the
// layer files it would have written: together, every layer of the 2-stage pipeline).
void ExpectReportedHeldAt(const Outcome& o, int k, int num_layers, const std::string& what) {
  int layers = 0;
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(o.snapshots[r].size(), 1u) << what << " rank " << r;
    EXPECT_EQ(o.snapshots[r][0].first, k) << what << " rank " << r;
    EXPECT_GT(o.snapshots[r][0].second, 0) << what << " rank " << r;
    layers += o.snapshots[r][0].second;
  }
  EXPECT_EQ(layers, num_layers) << what;
}

// A run resumed from the checkpoint of 2 failing in iteration 2 (its first), and a run whose
// periodic checkpoint of 2 was just written failing in iteration 2: the checkpoint of 2 stays
// the only one, untouched, and each rank reports that it holds its state of 2.
TEST(FailureSnapshotTest, FailureRightAfterTheLastCheckpointWritesNothingAndReportsIt) {
  std::mt19937 rng(31);
  const ModelSpec spec = Spec(4);
  const int L = static_cast<int>(spec.kinds.size());
  const Plan plan = testing::RandomPlan(rng, L, 2, 3, 4, /*split_backward=*/true);

  // Resumed.
  {
    TrainOptions options;
    options.iterations = 2;
    options.checkpoint_dir = FreshTestDir("resumed");
    options.checkpoint_at_end = true;
    const Outcome first = RunRanks(2, Pipeline(spec, plan), options, Failure{});
    for (int r = 0; r < 2; ++r) ASSERT_TRUE(first.results[r].ok()) << first.results[r].status();
    ASSERT_EQ(CheckpointIterations(options.checkpoint_dir), (std::vector<int64_t>{2}));
    const auto before = ListLayerCheckpoints(options.checkpoint_dir);

    options.iterations = 5;
    options.resume = true;
    options.snapshot_on_failure = true;
    const Outcome o = RunRanks(2, Pipeline(spec, plan), options, Failure{true, -1});
    ExpectAllFailedAt(o, 2, "resumed");
    ExpectReportedHeldAt(o, 2, L, "resumed");
    EXPECT_EQ(ListLayerCheckpoints(options.checkpoint_dir), before);
    absl::StatusOr<int64_t> latest = LatestCompleteCheckpoint(options.checkpoint_dir, spec);
    ASSERT_TRUE(latest.ok()) << latest.status();
    EXPECT_EQ(*latest, 2);
  }

  // A periodic checkpoint just written.
  {
    TrainOptions options;
    options.iterations = 5;
    options.checkpoint_dir = FreshTestDir("periodic");
    options.checkpoint_interval = 2;
    options.snapshot_on_failure = true;
    const Outcome o = RunRanks(2, Pipeline(spec, plan), options, Failure{false, 1});
    ExpectAllFailedAt(o, 2, "periodic");
    ExpectReportedHeldAt(o, 2, L, "periodic");
    EXPECT_EQ(CheckpointIterations(options.checkpoint_dir), (std::vector<int64_t>{2}));
    absl::StatusOr<int64_t> latest = LatestCompleteCheckpoint(options.checkpoint_dir, spec);
    ASSERT_TRUE(latest.ok()) << latest.status();
    EXPECT_EQ(*latest, 2);
  }
}

// --- 4. a node lost in the middle of the gradient all-reduces ---

// Counts a rank's finished all-reduces; before each call, runs `before` (which may fail it).
class HookedCollective : public Collective {
 public:
  HookedCollective(std::unique_ptr<Collective> inner, std::function<absl::Status()> before,
                   std::shared_ptr<std::atomic<int>> done)
      : inner_(std::move(inner)), before_(std::move(before)), done_(std::move(done)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }
  absl::Status AllReduceSum(float* data, size_t count) override {
    RETURN_IF_ERROR(before_());
    absl::Status s = inner_->AllReduceSum(data, count);
    if (s.ok()) ++*done_;
    return s;
  }
  absl::Status AllToAllV(const float* send, const std::vector<size_t>& send_counts, float* recv,
                         const std::vector<size_t>& recv_counts) override {
    return inner_->AllToAllV(send, send_counts, recv, recv_counts);
  }

 private:
  std::unique_ptr<Collective> inner_;
  std::function<absl::Status()> before_;
  std::shared_ptr<std::atomic<int>> done_;
};

// A transport whose collectives are HookedCollectives.
class HookedTransport : public Transport {
 public:
  HookedTransport(std::unique_ptr<Transport> inner, std::function<absl::Status()> before)
      : inner_(std::move(inner)), before_(std::move(before)) {}
  int all_reduces_done() const { return done_->load(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return inner_->name(); }
  absl::Status Send(int dst, uint32_t tag, const void* data, size_t bytes) override {
    return inner_->Send(dst, tag, data, bytes);
  }
  absl::Status Recv(int src, uint32_t tag, void* data, size_t bytes) override {
    return inner_->Recv(src, tag, data, bytes);
  }
  bool has_async() const override { return inner_->has_async(); }
  absl::StatusOr<std::unique_ptr<PendingMessage>> StartSend(int dst, uint32_t tag,
                                                            const void* data,
                                                            size_t bytes) override {
    return inner_->StartSend(dst, tag, data, bytes);
  }
  absl::StatusOr<std::unique_ptr<PendingMessage>> StartRecv(int src, uint32_t tag, void* data,
                                                            size_t bytes) override {
    return inner_->StartRecv(src, tag, data, bytes);
  }
  absl::StatusOr<std::unique_ptr<Collective>> NewCollective(const std::vector<int>& ranks,
                                                            const std::string& name) override {
    absl::StatusOr<std::unique_ptr<Collective>> c = inner_->NewCollective(ranks, name);
    if (!c.ok()) return c.status();
    return std::unique_ptr<Collective>(
        std::make_unique<HookedCollective>(std::move(*c), before_, done_));
  }

 private:
  std::unique_ptr<Transport> inner_;
  std::function<absl::Status()> before_;
  std::shared_ptr<std::atomic<int>> done_ = std::make_shared<std::atomic<int>>(0);
};

// PP2 x DP2 over two "nodes" (a checkpoint directory each): node A holds replica 0 (ranks 0 and
// 2: its stages 0 and 1), node B replica 1 (ranks 1 and 3). In iteration k node B dies after
// replica 0's last stage (rank 2) finished its gradient all-reduces with rank 3 but before
// rank 0's with rank 1: rank 1 waits for that on its first all-reduce of k, then both of B's
// ranks are aborted, as their process' exit fails every message and group of theirs; each
// failed rank is aborted as it returns. Without the committed step, rank 2 would step to k + 1
// while rank 0 stays at k, leaving node A no complete state of either iteration. With it,
// node A's newest complete checkpoint is k, equal to single-process training's state after k
// iterations; rank 2 also rolled forward to k + 1 (its gradients were the reduced ones): its
// layers of k + 1 equal the reference after k + 1.
TEST(FailureSnapshotTest, ANodeLostDuringTheGradientAllReducesLeavesTheSurvivorsOneIteration) {
  std::mt19937 rng(33);
  const ModelSpec spec = Spec(2);
  const int L = static_cast<int>(spec.kinds.size());
  const Plan pipeline = testing::RandomPlan(rng, L, 2, 2, 2, /*split_backward=*/true);
  const LayoutPlan plan = testing::HomogeneousLayout(pipeline, 1, 1, 2);
  ASSERT_TRUE(CheckLayoutRunnable(spec, plan).ok()) << CheckLayoutRunnable(spec, plan);
  ASSERT_EQ(plan.num_ranks, 4);
  constexpr int k = 2, n = 4;
  const std::string dir_a = FreshTestDir("node-a"), dir_b = FreshTestDir("node-b");
  auto node_of = [](int rank) { return rank % 2; };  // replica r's device j is rank r + 2 j

  InProcOptions hub_options;
  hub_options.timeout_s = 30;  // a safety net: every wait here ends by an abort
  InProcHub hub(4, hub_options);
  std::vector<std::unique_ptr<HookedTransport>> transports(4);
  std::vector<std::atomic<int>> iterations_done(4);
  std::atomic<int> per_iteration{-1};  // rank 2's all-reduces in one iteration
  std::atomic<bool> node_b_lost{false};
  for (int r = 0; r < 4; ++r) {
    std::function<absl::Status()> before = [&, r]() -> absl::Status {
      if (node_b_lost.load() && node_of(r) == 1) {
        return absl::UnavailableError("node B is gone");
      }
      if (r != 1 || iterations_done[1].load() != k) return absl::OkStatus();
      // Rank 1's first all-reduce of iteration k: wait for rank 2's all of k, then lose node B.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (per_iteration.load() <= 0 ||
             transports[2]->all_reduces_done() < (k + 1) * per_iteration.load()) {
        if (std::chrono::steady_clock::now() > deadline) {
          return absl::DeadlineExceededError("rank 2 never finished its all-reduces of k");
        }
        std::this_thread::yield();
      }
      node_b_lost.store(true);
      hub.Abort(1);
      hub.Abort(3);
      return absl::UnavailableError("node B is gone");
    };
    transports[r] = std::make_unique<HookedTransport>(hub.Endpoint(r), before);
  }
  std::vector<absl::StatusOr<RankResult>> results(4);
  std::vector<std::vector<std::pair<int, int>>> snapshots(4);
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      TrainOptions options;
      options.iterations = n;
      options.checkpoint_dir = node_of(r) == 0 ? dir_a : dir_b;
      options.checkpoint_interval = 0;
      options.stoppable = true;
      options.snapshot_on_failure = true;
      options.on_iteration = [&, r](int it, const IterationStats&) {
        if (r == 2 && it == 0) per_iteration.store(transports[2]->all_reduces_done());
        iterations_done[r].store(it + 1);
      };
      options.on_snapshot = [&, r](int iteration, int layers) {
        snapshots[r].push_back({iteration, layers});
      };
      results[r] = TrainLayoutRank(spec, plan, r, transports[r].get(), options);
      if (!results[r].ok()) hub.Abort(r);  // the failed rank's process exits
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(node_b_lost.load()) << "the injection never ran";
  for (int r = 0; r < 4; ++r) {
    ASSERT_FALSE(results[r].ok()) << "rank " << r << " did not fail";
  }
  EXPECT_GT(per_iteration.load(), 0);

  // Rank 0 failed in k: it saved k. Rank 2's gradients of k were final: it saved k and k + 1.
  const std::vector<int> layers = PipelineLayers(pipeline);
  EXPECT_EQ(snapshots[0], (std::vector<std::pair<int, int>>{{k, layers[0]}}))
      << results[0].status();
  ASSERT_EQ(snapshots[2].size(), 2u) << results[2].status();
  EXPECT_EQ(snapshots[2][0].first, k);
  EXPECT_EQ(snapshots[2][1].first, k + 1);
  absl::StatusOr<int64_t> latest = LatestCompleteCheckpoint(dir_a, spec);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, k);

  const testing::Reference after_k = testing::TrainReference(spec, plan.global_microbatches, k);
  const testing::Reference after_k1 =
      testing::TrainReference(spec, plan.global_microbatches, k + 1);
  for (int l = 0; l < L; ++l) {
    absl::StatusOr<LayerCheckpoint> c = ReadLayerCheckpoint(LayerCheckpointPath(dir_a, k, l));
    ASSERT_TRUE(c.ok()) << c.status();
    ASSERT_EQ(c->params.size(), after_k.params[l].size()) << "layer " << l;
    for (size_t i = 0; i < c->params.size(); ++i) {
      EXPECT_LE(RelErr(c->params[i], after_k.params[l][i]), 1e-5)
          << "node A's state of " << k << ": layer " << l << " param " << i;
    }
  }
  EXPECT_EQ(snapshots[2][1].second, layers[1]);
  for (const StageAssignment& st : pipeline.stages) {
    if (st.device != 1) continue;  // rank 2 is replica 0's device 1
    for (int l = st.first_layer; l <= st.last_layer; ++l) {
      absl::StatusOr<LayerCheckpoint> c =
          ReadLayerCheckpoint(LayerCheckpointPath(dir_a, k + 1, l));
      ASSERT_TRUE(c.ok()) << c.status();
      EXPECT_EQ(c->optimizer_step, k + 1);
      for (size_t i = 0; i < c->params.size(); ++i) {
        EXPECT_LE(RelErr(c->params[i], after_k1.params[l][i]), 1e-5)
            << "rank 2 rolled forward to " << k + 1 << ": layer " << l << " param " << i;
      }
    }
  }
}

}  // namespace
}  // namespace octopipe::executor
