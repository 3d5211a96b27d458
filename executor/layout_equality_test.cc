// The executor's contract for whole layouts: data-parallel replicas (also heterogeneous ones),
// tensor parallelism inside a pipeline device and expert parallelism over replicas train the
// reference model (selective scan, attention, SwiGLU MLP, top-k MoE, embedding, head) exactly as
// single-process training on the same global batch does: the loss of every iteration within
// 1e-6 relative, every parameter after 5 AdamW steps within 1e-5 relative, with random plans.
// One thread per rank over the in-process transport; tests/layout_training_test runs the same
// layouts as Gloo processes.
#include <random>
#include <thread>

#include "core/layout_plan.h"
#include "executor/checkpoint.h"
#include "executor/inproc_transport.h"
#include "executor/layers/expert_parallel.h"
#include "executor/layers/tensor_parallel.h"
#include "executor/layout_trainer.h"
#include "executor/model_spec.h"
#include "executor/testing/random_plan.h"
#include "executor/testing/reference_training.h"
#include "gtest/gtest.h"

namespace octopipe::executor {
namespace {

constexpr int kIterations = 5;

ModelSpec Spec(int microbatches) {
  return ::octopipe::executor::testing::EqualityTestSpec(microbatches);
}

std::vector<absl::StatusOr<RankResult>> TrainThreads(const ModelSpec& spec,
                                                     const LayoutPlan& plan,
                                                     const TrainOptions& options) {
  InProcHub hub(plan.num_ranks);
  std::vector<absl::StatusOr<RankResult>> results(plan.num_ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < plan.num_ranks; ++r) {
    threads.emplace_back([&, r] {
      auto transport = hub.Endpoint(r);
      results[r] = TrainLayoutRank(spec, plan, r, transport.get(), options);
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

std::vector<Tensor> Params(Layer& layer) {
  std::vector<Tensor> out;
  for (Tensor* p : layer.params()) out.push_back(*p);
  return out;
}

// The whole model's parameters from the ranks: layer l from the replicas of EP group 0 (its TP
// shards, and its experts' shards over the group, merged); and every replica's copy of each
// layer must equal that replica's EP/TP peer's in the other groups bit for bit (checked on the
// replicated layers: DP peers hold identical parameters after every step).
std::vector<std::vector<Tensor>> WholeParams(const ModelSpec& spec, const LayoutPlan& plan,
                                             std::vector<absl::StatusOr<RankResult>>& results) {
  const std::vector<RankRole> roles = RankRoles(plan);
  const int L = static_cast<int>(spec.kinds.size());
  const int tp = plan.layout.tp, ep = plan.layout.ep;
  std::vector<std::vector<Tensor>> out(L);
  for (int l = 0; l < L; ++l) {
    // shards[e][t] from the ranks with dp_rank e (< ep) holding layer l.
    std::vector<std::vector<std::vector<Tensor>>> shards(ep, std::vector<std::vector<Tensor>>(tp));
    std::vector<Tensor> first_copy;
    for (int r = 0; r < plan.num_ranks; ++r) {
      Layer* layer = results[r]->layers[l].get();
      if (layer == nullptr) continue;
      const RankRole& role = roles[r];
      if (role.dp_rank < ep) shards[role.dp_rank][role.tp_rank] = Params(*layer);
    }
    if (spec.kinds[l] == "moe" && (tp > 1 || ep > 1)) {
      absl::StatusOr<std::vector<Tensor>> whole = MergeParallelMoeShards(spec.dims, shards);
      EXPECT_TRUE(whole.ok()) << whole.status();
      if (whole.ok()) out[l] = std::move(*whole);
    } else if (tp > 1) {
      absl::StatusOr<std::vector<Tensor>> whole =
          MergeTensorParallelShards(spec.kinds[l], spec.dims, shards[0]);
      EXPECT_TRUE(whole.ok()) << whole.status();
      if (whole.ok()) out[l] = std::move(*whole);
    } else {
      out[l] = shards[0][0];
    }
  }
  return out;
}

// Replicas hold bit-identical copies of every layer shard they share.
void ExpectReplicasIdentical(const ModelSpec& spec, const LayoutPlan& plan,
                             std::vector<absl::StatusOr<RankResult>>& results,
                             const std::string& what) {
  const std::vector<RankRole> roles = RankRoles(plan);
  const int L = static_cast<int>(spec.kinds.size());
  for (int l = 0; l < L; ++l) {
    std::map<std::pair<int, int>, std::vector<Tensor>> seen;  // (tp, ep) -> params
    for (int r = 0; r < plan.num_ranks; ++r) {
      Layer* layer = results[r]->layers[l].get();
      if (layer == nullptr) continue;
      const int ep_key = spec.kinds[l] == "moe" ? roles[r].ep_rank : 0;
      auto [at, inserted] = seen.try_emplace({roles[r].tp_rank, ep_key}, Params(*layer));
      if (inserted) continue;
      for (size_t i = 0; i < at->second.size(); ++i) {
        const Tensor& a = at->second[i];
        const Tensor b = *layer->params()[i];
        if (spec.kinds[l] == "moe" && plan.layout.ep > 1 && i >= 2) continue;
        EXPECT_TRUE(a.size() == b.size() && (a - b).norm() == 0)
            << what << ": rank " << r << " layer " << l << " param " << i
            << " differs from another replica's copy";
      }
    }
  }
}

void ExpectTrainsLikeOneProcess(const ModelSpec& spec, const LayoutPlan& plan,
                                const std::string& what) {
  ASSERT_TRUE(CheckLayoutRunnable(spec, plan).ok()) << what << ": "
                                                    << CheckLayoutRunnable(spec, plan);
  TrainOptions options;
  options.iterations = kIterations;
  std::vector<absl::StatusOr<RankResult>> results = TrainThreads(spec, plan, options);
  for (int r = 0; r < plan.num_ranks; ++r) {
    ASSERT_TRUE(results[r].ok()) << what << " rank " << r << ": " << results[r].status();
  }
  const testing::Reference ref = testing::TrainReference(spec, plan.global_microbatches, kIterations);
  int loss_ranks = 0;
  for (int r = 0; r < plan.num_ranks; ++r) {
    const RankResult& rr = *results[r];
    ASSERT_EQ(rr.iterations.size(), static_cast<size_t>(kIterations));
    if (!rr.iterations[0].has_loss) continue;
    ++loss_ranks;
    for (int it = 0; it < kIterations; ++it) {
      EXPECT_NEAR(rr.iterations[it].loss, ref.losses[it], 1e-6 * std::abs(ref.losses[it]))
          << what << ": rank " << r << " iteration " << it;
    }
  }
  EXPECT_GE(loss_ranks, 1) << what;
  const std::vector<std::vector<Tensor>> got = WholeParams(spec, plan, results);
  for (size_t l = 0; l < ref.params.size(); ++l) {
    ASSERT_EQ(got[l].size(), ref.params[l].size()) << what << " layer " << l;
    for (size_t i = 0; i < got[l].size(); ++i) {
      const double err = (got[l][i] - ref.params[l][i]).norm() /
                         std::max(1e-12, static_cast<double>(ref.params[l][i].norm()));
      EXPECT_LE(err, 1e-5) << what << ": layer " << l << " (" << spec.kinds[l] << ") param "
                           << i;
    }
  }
  ExpectReplicasIdentical(spec, plan, results, what);
}

Plan Random(std::mt19937& rng, const ModelSpec& spec, int devices, int microbatches) {
  const int L = static_cast<int>(spec.kinds.size());
  const int stages = devices + static_cast<int>(rng() % 3);
  return testing::RandomPlan(rng, L, devices, stages, microbatches,
                             /*split_backward=*/rng() % 2 == 0);
}

TEST(LayoutEqualityTest, Pp2Dp2) {
  std::mt19937 rng(251);
  const ModelSpec spec = Spec(3);
  for (int trial = 0; trial < 3; ++trial) {
    ExpectTrainsLikeOneProcess(spec, testing::HomogeneousLayout(Random(rng, spec, 2, 3), 1, 1, 2),
                               "PP2xDP2 trial " + std::to_string(trial));
  }
}

TEST(LayoutEqualityTest, Pp2Tp2) {
  std::mt19937 rng(252);
  const ModelSpec spec = Spec(4);
  for (int trial = 0; trial < 2; ++trial) {
    ExpectTrainsLikeOneProcess(spec, testing::HomogeneousLayout(Random(rng, spec, 2, 4), 2, 1, 1),
                               "PP2xTP2 trial " + std::to_string(trial));
  }
}

TEST(LayoutEqualityTest, Dp2Ep2) {
  std::mt19937 rng(253);
  const ModelSpec spec = Spec(3);
  ExpectTrainsLikeOneProcess(spec, testing::HomogeneousLayout(Random(rng, spec, 1, 3), 1, 2, 2), "DP2xEP2");
  // With two pipeline stages too: PP2 x DP2 x EP2.
  ExpectTrainsLikeOneProcess(spec, testing::HomogeneousLayout(Random(rng, spec, 2, 3), 1, 2, 2),
                             "PP2xDP2xEP2");
}

TEST(LayoutEqualityTest, Pp1Tp2Dp2) {
  std::mt19937 rng(254);
  const ModelSpec spec = Spec(2);
  ExpectTrainsLikeOneProcess(spec, testing::HomogeneousLayout(Random(rng, spec, 1, 2), 2, 1, 2), "PP1xTP2xDP2");
  ExpectTrainsLikeOneProcess(spec, testing::HomogeneousLayout(Random(rng, spec, 1, 2), 2, 2, 2),
                             "PP1xTP2xDP2xEP2");
}

// A 2-stage replica with 4 micro-batches beside a 1-stage replica with 2: different partitions,
// device counts and shares of the batch, as on a mixed cluster or after a node is lost.
TEST(LayoutEqualityTest, HeterogeneousReplicas) {
  std::mt19937 rng(255);
  const ModelSpec spec = Spec(6);
  for (int trial = 0; trial < 3; ++trial) {
    LayoutPlan lp;
    lp.layout = {2, 1, 1, 2, true};
    lp.num_ranks = 3;
    lp.global_microbatches = 6;
    LayoutPipelinePlan a, b;
    a.plan = Random(rng, spec, 2, 4);
    a.replicas = {{0, trial == 1 ? 2 : 0, {0, 1}}};
    b.plan = Random(rng, spec, 1, 2);
    b.replicas = {{1, trial == 1 ? 0 : 4, {2}}};
    lp.pipelines = {a, b};
    ExpectTrainsLikeOneProcess(spec, lp, "heterogeneous trial " + std::to_string(trial));
  }
}

TEST(LayoutEqualityTest, LayoutsTheModelCannotSplitAreRefusedNamingTheField) {
  std::mt19937 rng(256);
  ModelSpec spec = Spec(2);
  spec.dims.heads = 1;  // TP 2 cannot split one head
  absl::Status s = CheckLayoutRunnable(spec, testing::HomogeneousLayout(Random(rng, spec, 1, 2), 2, 1, 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("heads"), std::string::npos) << s;
  spec = Spec(2);
  spec.dims.experts = 3;
  spec.dims.top_k = 1;
  s = CheckLayoutRunnable(spec, testing::HomogeneousLayout(Random(rng, spec, 1, 2), 1, 2, 2));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("experts"), std::string::npos) << s;
}

}  // namespace
}  // namespace octopipe::executor

namespace octopipe::executor {
namespace {

// Checkpoints hold whole layers: a run under one layout resumes under another with the same
// global batch, each rank cutting its shards — PP2 x DP2 -> one 3-stage pipeline -> PP1 x TP2 x
// DP2 x EP2 -> PP2 x TP2 — and every iteration's loss and the final weights are single-process
// training's.
TEST(LayoutEqualityTest, CheckpointsResumeAcrossLayouts) {
  std::mt19937 rng(257);
  const ModelSpec spec = Spec(4);
  const int global = 4;
  const std::string dir = ::testing::TempDir() + "/layout-resume";
  struct Step {
    std::string name;
    LayoutPlan plan;
    int iterations;  // train until this many are complete
  };
  const std::vector<Step> steps = {
      {"PP2xDP2", testing::HomogeneousLayout(Random(rng, spec, 2, 2), 1, 1, 2), 2},
      {"PP3", SinglePipelineLayout(Random(rng, spec, 3, 4)), 3},
      {"PP1xTP2xDP2xEP2", testing::HomogeneousLayout(Random(rng, spec, 1, 2), 2, 2, 2), 5},
      {"PP2xTP2", testing::HomogeneousLayout(Random(rng, spec, 2, 4), 2, 1, 1), 6},
  };
  const testing::Reference ref = testing::TrainReference(spec, global, 6);
  std::vector<absl::StatusOr<RankResult>> results;
  int done = 0;
  for (const Step& step : steps) {
    ASSERT_EQ(step.plan.global_microbatches, global) << step.name;
    TrainOptions options;
    options.iterations = step.iterations;
    options.checkpoint_dir = dir;
    options.resume = true;
    options.checkpoint_at_end = true;
    results = TrainThreads(spec, step.plan, options);
    for (int r = 0; r < step.plan.num_ranks; ++r) {
      ASSERT_TRUE(results[r].ok()) << step.name << " rank " << r << ": " << results[r].status();
      const RankResult& rr = *results[r];
      EXPECT_EQ(rr.first_iteration, done) << step.name << " rank " << r;
      for (size_t i = 0; i < rr.iterations.size(); ++i) {
        if (!rr.iterations[i].has_loss) continue;
        const int it = rr.first_iteration + static_cast<int>(i);
        EXPECT_NEAR(rr.iterations[i].loss, ref.losses[it], 1e-6 * std::abs(ref.losses[it]))
            << step.name << ": rank " << r << " iteration " << it;
      }
    }
    done = step.iterations;
  }
  const std::vector<std::vector<Tensor>> got = WholeParams(spec, steps.back().plan, results);
  for (size_t l = 0; l < ref.params.size(); ++l) {
    ASSERT_EQ(got[l].size(), ref.params[l].size()) << "layer " << l;
    for (size_t i = 0; i < got[l].size(); ++i) {
      const double err = (got[l][i] - ref.params[l][i]).norm() /
                         std::max(1e-12, static_cast<double>(ref.params[l][i].norm()));
      EXPECT_LE(err, 1e-5) << "layer " << l << " (" << spec.kinds[l] << ") param " << i;
    }
  }
}

}  // namespace
}  // namespace octopipe::executor

namespace octopipe::executor {
namespace {

// Data-parallel replicas of a plan whose head (and embedding) is split by vocabulary train as
// one process does — their checkpoint (replica 0 gathers the shards into whole layers) holds
// single-process training's weights — and the checkpoint resumes a plain pipeline.
TEST(LayoutEqualityTest, VocabularySplitReplicasAndTheirCheckpoint) {
  std::mt19937 rng(258);
  const ModelSpec spec = Spec(2);
  const int L = static_cast<int>(spec.kinds.size());
  const Plan split = testing::RandomPlan(rng, L, 2, 3, 2, /*split_backward=*/true,
                                         /*vocab_parallel=*/true);
  const std::string dir = ::testing::TempDir() + "/vocab-layout-resume";
  TrainOptions options;
  options.iterations = 2;
  options.checkpoint_dir = dir;
  options.checkpoint_at_end = true;
  const testing::Reference two = testing::TrainReference(spec, 4, 2);
  int loss_ranks = 0;
  for (auto& r : TrainThreads(spec, testing::HomogeneousLayout(split, 1, 1, 2), options)) {
    ASSERT_TRUE(r.ok()) << r.status();
    for (int it = 0; it < 2; ++it) {
      if (!r->iterations[it].has_loss) continue;
      ++loss_ranks;
      EXPECT_NEAR(r->iterations[it].loss, two.losses[it], 1e-6 * std::abs(two.losses[it]));
    }
  }
  EXPECT_EQ(loss_ranks, 4);  // both replicas' last devices, both iterations
  for (int l = 0; l < L; ++l) {
    absl::StatusOr<LayerCheckpoint> c = ReadLayerCheckpoint(LayerCheckpointPath(dir, 2, l));
    ASSERT_TRUE(c.ok()) << c.status();
    ASSERT_EQ(c->params.size(), two.params[l].size()) << "layer " << l;
    for (size_t i = 0; i < c->params.size(); ++i) {
      EXPECT_LE((c->params[i] - two.params[l][i]).norm() /
                    std::max(1e-12, static_cast<double>(two.params[l][i].norm())),
                1e-5)
          << "checkpointed layer " << l << " param " << i;
    }
  }
  options.iterations = 3;
  options.resume = true;
  const LayoutPlan single = SinglePipelineLayout(Random(rng, spec, 2, 4));
  std::vector<absl::StatusOr<RankResult>> results = TrainThreads(spec, single, options);
  const testing::Reference ref = testing::TrainReference(spec, 4, 3);
  for (auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->first_iteration, 2);
  }
  const std::vector<std::vector<Tensor>> got = WholeParams(spec, single, results);
  for (size_t l = 0; l < ref.params.size(); ++l) {
    for (size_t i = 0; i < got[l].size(); ++i) {
      EXPECT_LE((got[l][i] - ref.params[l][i]).norm() /
                    std::max(1e-12, static_cast<double>(ref.params[l][i].norm())),
                1e-5)
          << "layer " << l << " param " << i;
    }
  }
}

}  // namespace
}  // namespace octopipe::executor
