// Vocabulary-parallel plans (the head and the input embedding split by vocabulary over every
// rank; executor/engine.h, executor/layers/vocab_head.h, executor/layers/vocab_embedding.h)
// train the real reference model exactly as single-process training does: loss, every gradient
// (the head's and the embedding's reassembled from their shards) and, after
// several AdamW steps, every weight agree to fp32 rounding (relative error <= 1e-5; the shards'
// softmax sums add in another order, so not bit for bit). Plans from the real tuner with
// --vocab_parallel=on and random list-scheduled orders on 2 and 3 ranks in-process, with equal
// and unequal shards (Plan::vocab_shard_columns), and 2 and 3 ranks with unequal shards as
// processes over Gloo.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <thread>

#include "core/cluster.h"
#include "core/cost_model.h"
#include "core/fake_clock.h"
#include "executor/checkpoint.h"
#include "executor/gloo_transport.h"
#include "executor/inproc_transport.h"
#include "executor/layers/vocab_embedding.h"
#include "executor/layers/vocab_head.h"
#include "executor/model_spec.h"
#include "executor/reference_trainer.h"
#include "executor/testing/random_plan.h"
#include "executor/testing/reference_training.h"
#include "executor/trainer.h"
#include "gtest/gtest.h"
#include "simulator/list_scheduler.h"
#include "simulator/problem.h"
#include "tuner/tuner.h"
#include "core/test_dirs.h"

namespace octopipe::executor {
namespace {

using ::octopipe::testing::TestPath;

ModelSpec Spec(int microbatches) {
  // vocab 31: shards of unequal width on 2 and 3 ranks.
  auto spec = ParseModelSpec(
      "ref:pattern=M*-E,hidden=16,heads=2,ffn=24,experts=4,top_k=2,moe_ffn=12,state=4,"
      "expand=2,seq=8,batch=1,vocab=31,seed=3,microbatches=" +
      std::to_string(microbatches));
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}


double RelativeError(const Tensor& got, const Tensor& want) {
  return (got - want).norm() / std::max(1e-12, static_cast<double>(want.norm()));
}

// A rank's tensors by layer: params or grads of each layer it holds (empty where it holds none).
using RankTensors = std::vector<std::vector<Tensor>>;
RankTensors TensorsOf(RankResult& rank, bool grads) {
  RankTensors out(rank.layers.size());
  for (size_t l = 0; l < rank.layers.size(); ++l) {
    if (!rank.layers[l]) continue;
    for (Tensor* t : grads ? rank.layers[l]->grads() : rank.layers[l]->params()) {
      out[l].push_back(*t);
    }
  }
  return out;
}

// The whole model's tensors by layer from every rank's: the head's and the embedding's shards
// merged (when they are split by vocabulary).
std::vector<std::vector<Tensor>> WholeModel(const std::vector<RankTensors>& ranks,
                                            bool vocab_parallel = true) {
  const size_t L = ranks[0].size();
  std::vector<std::vector<Tensor>> out(L);
  std::vector<std::vector<Tensor>> head_shards, embedding_shards;
  for (const RankTensors& r : ranks) {
    for (size_t l = 0; l < L; ++l) {
      if (!r[l].empty()) out[l] = r[l];
    }
    head_shards.push_back(r[L - 1]);
    embedding_shards.push_back(r[0]);
  }
  if (!vocab_parallel) return out;
  absl::StatusOr<std::vector<Tensor>> head = WholeHeadOf(head_shards);
  EXPECT_TRUE(head.ok()) << head.status();
  if (head.ok()) out[L - 1] = std::move(*head);
  absl::StatusOr<std::vector<Tensor>> embedding = WholeEmbeddingOf(embedding_shards);
  EXPECT_TRUE(embedding.ok()) << embedding.status();
  if (embedding.ok()) out[0] = std::move(*embedding);
  return out;
}

using testing::Reference;
using testing::TrainReference;

void ExpectClose(const std::vector<std::vector<Tensor>>& got,
                 const std::vector<std::vector<Tensor>>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t l = 0; l < want.size(); ++l) {
    ASSERT_EQ(got[l].size(), want[l].size()) << what << " layer " << l;
    for (size_t i = 0; i < want[l].size(); ++i) {
      EXPECT_LE(RelativeError(got[l][i], want[l][i]), 1e-5)
          << what << ": layer " << l << " tensor " << i;
    }
  }
}

// Trains `iterations` iterations of `plan` (AdamW after each) with one thread per rank over the
// in-process transport and checks the last loss and gradients and the final weights against
// single-process training.
std::vector<absl::StatusOr<RankResult>> TrainThreads(const ModelSpec& spec, const Plan& plan,
                                                     const TrainOptions& options) {
  InProcHub hub(plan.num_devices);
  std::vector<absl::StatusOr<RankResult>> results(plan.num_devices);
  std::vector<std::thread> threads;
  for (int r = 0; r < plan.num_devices; ++r) {
    threads.emplace_back([&, r] {
      auto transport = hub.Endpoint(r);
      results[r] = TrainRank(spec, plan, r, transport.get(), options);
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

void ExpectTrainsLikeOneProcess(const ModelSpec& spec, const Plan& plan, int iterations,
                                const std::string& what) {
  ASSERT_TRUE(plan.vocab_parallel) << what;
  TrainOptions options;
  options.iterations = iterations;
  std::vector<absl::StatusOr<RankResult>> results = TrainThreads(spec, plan, options);
  std::vector<RankTensors> grads, params;
  double loss = -1;
  for (int r = 0; r < plan.num_devices; ++r) {
    ASSERT_TRUE(results[r].ok()) << what << " rank " << r << ": " << results[r].status();
    if (results[r]->iterations.back().has_loss) loss = results[r]->iterations.back().loss;
    grads.push_back(TensorsOf(*results[r], /*grads=*/true));
    params.push_back(TensorsOf(*results[r], /*grads=*/false));
  }
  const Reference ref = TrainReference(spec, plan.num_microbatches, iterations);
  EXPECT_NEAR(loss, ref.loss, 1e-5 * std::abs(ref.loss)) << what;
  ExpectClose(WholeModel(grads), ref.grads, what + " gradients");
  ExpectClose(WholeModel(params), ref.params, what + " weights");
}

// The tuner splits the head when it is heavy: plan for the same layers with a wide hidden state
// and a large vocabulary (so the split pays), then run the plan on the small model.
TEST(VocabParallelTrainingTest, TunerPlansOnTwoAndThreeRanks) {
  const ModelSpec spec = Spec(6);
  absl::StatusOr<ModelSpec> heavy_head = ParseModelSpec(
      "ref:pattern=M*-E,hidden=256,heads=2,ffn=24,experts=4,top_k=2,moe_ffn=12,state=4,seq=8,"
      "vocab=65536,microbatches=6");
  ASSERT_TRUE(heavy_head.ok()) << heavy_head.status();
  const ModelGraph graph = ToModelGraph(*heavy_head);
  for (int P : {2, 3}) {
    TunerOptions o;
    o.num_devices = P;
    o.num_microbatches = 6;
    o.time_budget_s = 3;
    o.clock = std::make_shared<FakeClock>();  // frozen: the search runs to its end, under load too
    o.vocab_parallel = VocabParallelMode::kOn;
    auto r = Tune(graph, SyntheticCluster(P), CostModel(), o);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(r->plan.vocab_parallel);
    // The plan's shards are the heavy model's 65536 columns (equal on identical devices):
    // scaled to the small model's 31 by the same rule.
    Plan plan = r->plan;
    ASSERT_EQ(plan.vocab_shard_columns, EqualVocabShardColumns(65536, P));
    plan.vocab_shard_columns = VocabShardColumns(
        spec.dims.vocab,
        std::vector<double>(plan.vocab_shard_columns.begin(), plan.vocab_shard_columns.end()));
    ExpectTrainsLikeOneProcess(spec, plan, 3, "tuned P=" + std::to_string(P));
  }
}

// Random list-scheduled orders: random placements (several non-adjacent stages per rank),
// uneven partitions, recompute, split and unsplit backward, and random priorities for the S
// and T passes, so T before and after the head's backward, S of later micro-batches before T
// of earlier ones, and ranks that hold no stage near the head all occur.
TEST(VocabParallelTrainingTest, RandomValidSchedulesOnTwoAndThreeRanks) {
  std::mt19937 rng(330);
  for (int trial = 0; trial < 40; ++trial) {
    const ModelSpec spec = Spec(1 + trial % 4);
    const int L = static_cast<int>(spec.kinds.size());
    const int P = 2 + trial % 2;
    const int S = P + static_cast<int>(rng() % (L - P + 1));
    const Plan plan = testing::RandomPlan(rng, L, P, S, spec.microbatches,
                                          /*split_backward=*/trial % 3 != 0,
                                          /*vocab_parallel=*/true);
    ExpectTrainsLikeOneProcess(spec, plan, 2, "trial " + std::to_string(trial));
    if (HasFailure()) return;
  }
}

// Unequal shards, as the tuner plans them for devices of different speeds
// (Plan::vocab_shard_columns): each rank's shard is its columns, and training still matches one
// process, in random orders, with shards of one column and shards holding most of the
// vocabulary.
TEST(VocabParallelTrainingTest, UnequalShardsMatchSingleProcessTraining) {
  std::mt19937 rng(334);
  const std::vector<std::vector<int64_t>> splits = {{25, 6}, {1, 30}, {3, 20, 8}, {29, 1, 1}};
  for (int trial = 0; trial < 12; ++trial) {
    const ModelSpec spec = Spec(1 + trial % 3);
    const int L = static_cast<int>(spec.kinds.size());
    const std::vector<int64_t>& columns = splits[trial % splits.size()];
    const int P = static_cast<int>(columns.size());
    const int S = P + static_cast<int>(rng() % (L - P + 1));
    Plan plan = testing::RandomPlan(rng, L, P, S, spec.microbatches,
                                    /*split_backward=*/trial % 3 != 0, /*vocab_parallel=*/true);
    plan.vocab_shard_columns = columns;
    const std::string what = "unequal trial " + std::to_string(trial);
    // Each rank's head is its own columns, not an equal part, and its embedding the same rows.
    for (int r = 0; r < P; ++r) {
      absl::StatusOr<std::vector<std::unique_ptr<Layer>>> layers = BuildRankLayers(spec, plan, r);
      ASSERT_TRUE(layers.ok()) << what << ": " << layers.status();
      const auto* shard = dynamic_cast<const VocabShardHead*>(layers->back().get());
      ASSERT_NE(shard, nullptr) << what;
      EXPECT_EQ(shard->range().end - shard->range().begin, columns[r]) << what << " rank " << r;
      auto* rows = dynamic_cast<VocabShardEmbedding*>(layers->front().get());
      ASSERT_NE(rows, nullptr) << what;
      EXPECT_EQ(rows->range().begin, shard->range().begin) << what << " rank " << r;
      EXPECT_EQ(rows->range().end, shard->range().end) << what << " rank " << r;
      EXPECT_EQ(rows->params()[0]->rows(), columns[r]) << what << " rank " << r;
    }
    ExpectTrainsLikeOneProcess(spec, plan, 2, what);
    if (HasFailure()) return;
  }
}

// Columns that do not fit the model are refused before training, naming the field.
TEST(VocabParallelTrainingTest, ShardColumnsThatDoNotFitTheModelAreRefused) {
  const ModelSpec spec = Spec(2);
  const int L = static_cast<int>(spec.kinds.size());
  std::mt19937 rng(335);
  Plan plan = testing::RandomPlan(rng, L, 2, 3, spec.microbatches, true, /*vocab_parallel=*/true);
  for (const auto& [columns, message] :
       {std::pair<std::vector<int64_t>, std::string>{{20, 10}, "vocab_shard_columns sum to 30"},
        {{31}, "vocab_shard_columns has 1 entries for 2 devices"},
        {{31, 0}, "vocab_shard_columns[1] must be > 0"}}) {
    plan.vocab_shard_columns = columns;
    absl::StatusOr<std::vector<std::unique_ptr<Layer>>> layers = BuildRankLayers(spec, plan, 0);
    ASSERT_FALSE(layers.ok()) << message;
    EXPECT_EQ(layers.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(layers.status().message().find(message), absl::string_view::npos)
        << layers.status();
  }
}

// A list-scheduled vocab_parallel plan of two stages (layers [0, 2] and the rest) on
// `stage_devices`, over `ranks` ranks.
Plan TwoStagePlan(const ModelSpec& spec, std::vector<int> stage_devices, int ranks, bool split) {
  const int L = static_cast<int>(spec.kinds.size());
  PipelineProblem pb = UniformProblem(stage_devices, ranks, spec.microbatches, 1, 2, 1);
  pb.vocab_parallel = true;
  for (int d = 0; d < ranks; ++d) {
    pb.vocab_s_s.push_back(0.3 + 0.2 * d);
    pb.vocab_t_s.push_back(0.6 - 0.2 * d);
  }
  pb.vocab_activation_bytes.assign(ranks, 0.0);
  ListSchedulerOptions lo;
  lo.split_backward = split;
  absl::StatusOr<ListScheduleResult> ls = ListSchedule(pb, WeightedPolicy{}, lo);
  EXPECT_TRUE(ls.ok()) << ls.status();
  Plan plan;
  plan.num_devices = ranks;
  plan.num_microbatches = spec.microbatches;
  plan.vocab_parallel = true;
  plan.stages = {{0, 2, stage_devices[0], false}, {3, L - 1, stage_devices[1], false}};
  if (ls.ok()) plan.schedule = ls->schedule;
  return plan;
}

// More ranks than stages: rank 2 holds no stage, only its shard of the head, and still trains
// it (S and T for every micro-batch), with split and unsplit backward.
TEST(VocabParallelTrainingTest, ARankWithOnlyAHeadShard) {
  const ModelSpec spec = Spec(3);
  for (bool split : {true, false}) {
    const Plan plan = TwoStagePlan(spec, {0, 1}, 3, split);
    ASSERT_EQ(plan.schedule.ops[2].size(), 2u * spec.microbatches);
    ExpectTrainsLikeOneProcess(spec, plan, 2, split ? "shard-only rank, split" : "unsplit");
  }
}

// Rank 1 holds only its shards and dies: rank 0, waiting for that shard's embedding rows of
// the first micro-batch, fails with an error naming rank 1 instead of waiting forever.
TEST(VocabParallelTrainingTest, ADeadShardIsNamedNotWaitedFor) {
  const ModelSpec spec = Spec(2);
  const Plan plan = TwoStagePlan(spec, {0, 0}, 2, true);
  InProcHub hub(2, InProcOptions{.timeout_s = 20});
  hub.Abort(1);
  auto transport = hub.Endpoint(0);
  absl::StatusOr<RankResult> r = TrainRank(spec, plan, 0, transport.get(), TrainOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("rank 1"), absl::string_view::npos) << r.status();
  EXPECT_NE(r.status().message().find("(waiting for shard 1's embedding rows for F0."),
            absl::string_view::npos)
      << r.status();
}

// Checkpoints of a vocabulary-parallel run hold the whole head and the whole embedding (the
// norm holder and stage 0's rank gather the shards), so a run resumes onto another vocabulary
// split, onto a plan without one, and the other way round, and trains on as if uninterrupted.
TEST(VocabParallelTrainingTest, CheckpointsResumeAcrossVocabularySplits) {
  const ModelSpec spec = Spec(4);
  const int L = static_cast<int>(spec.kinds.size()), M = spec.microbatches;
  std::mt19937 rng(332);
  const Plan split2 = testing::RandomPlan(rng, L, 2, 3, M, true, /*vocab_parallel=*/true);
  const Plan split3 = testing::RandomPlan(rng, L, 3, 4, M, false, /*vocab_parallel=*/true);
  const Plan whole2 = testing::RandomPlan(rng, L, 2, 4, M, true, /*vocab_parallel=*/false);
  Plan unequal2 = testing::RandomPlan(rng, L, 2, 3, M, false, /*vocab_parallel=*/true);
  unequal2.vocab_shard_columns = {24, 7};
  Plan unequal3 = testing::RandomPlan(rng, L, 3, 3, M, true, /*vocab_parallel=*/true);
  unequal3.vocab_shard_columns = {2, 9, 20};
  const Reference ref = TrainReference(spec, M, 4);
  struct Case {
    const Plan* first;
    const Plan* then;
    std::string name;
  };
  for (const Case& c : {Case{&split2, &split3, "split2_to_split3"},
                        Case{&split2, &whole2, "split2_to_whole2"},
                        Case{&whole2, &split3, "whole2_to_split3"},
                        Case{&unequal2, &unequal3, "unequal2_to_unequal3"},
                        Case{&split3, &unequal2, "split3_to_unequal2"}}) {
    TrainOptions options;
    options.checkpoint_dir = TestPath(c.name);
    options.iterations = 2;
    options.checkpoint_at_end = true;
    for (auto& r : TrainThreads(spec, *c.first, options)) {
      ASSERT_TRUE(r.ok()) << c.name << ": " << r.status();
    }
    // One file per whole vocabulary layer, with its moments, whoever held the shards.
    for (int l : {0, L - 1}) {
      absl::StatusOr<LayerCheckpoint> whole =
          ReadLayerCheckpoint(LayerCheckpointPath(options.checkpoint_dir, 2, l));
      ASSERT_TRUE(whole.ok()) << c.name << ": " << whole.status();
      const Tensor& table = whole->params.back();
      EXPECT_EQ(l == 0 ? table.rows() : table.cols(), spec.dims.vocab) << c.name << " layer " << l;
      EXPECT_EQ(whole->first_moments.size(), whole->params.size()) << c.name << " layer " << l;
    }
    options.iterations = 4;
    options.checkpoint_at_end = false;
    options.resume = true;
    std::vector<RankTensors> params;
    for (auto& r : TrainThreads(spec, *c.then, options)) {
      ASSERT_TRUE(r.ok()) << c.name << ": " << r.status();
      EXPECT_EQ(r->first_iteration, 2) << c.name;
      params.push_back(TensorsOf(*r, /*grads=*/false));
    }
    ExpectClose(WholeModel(params, c.then->vocab_parallel), ref.params, c.name + " weights");
  }
}

// --- ranks as processes over Gloo/TCP ---

void WriteTensors(const std::string& path, const RankTensors& tensors) {
  std::ofstream out(path, std::ios::binary);
  for (size_t l = 0; l < tensors.size(); ++l) {
    for (const Tensor& t : tensors[l]) {
      const int64_t header[3] = {static_cast<int64_t>(l), t.rows(), t.cols()};
      out.write(reinterpret_cast<const char*>(header), sizeof(header));
      out.write(reinterpret_cast<const char*>(t.data()), t.size() * sizeof(float));
    }
  }
}

RankTensors ReadTensors(const std::string& path, size_t layers) {
  RankTensors out(layers);
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  int64_t header[3];
  while (in.read(reinterpret_cast<char*>(header), sizeof(header))) {
    Tensor t(header[1], header[2]);
    in.read(reinterpret_cast<char*>(t.data()), t.size() * sizeof(float));
    out[header[0]].push_back(std::move(t));
  }
  return out;
}

// Child process: trains `iterations` iterations as `rank` over Gloo and writes its gradients
// and weights to DIR/grads-R and DIR/params-R. Returns the exit code.
int GlooChild(const ModelSpec& spec, const Plan& plan, int rank, const std::string& dir,
              int iterations) {
  GlooOptions go;
  go.rank = rank;
  go.size = plan.num_devices;
  go.store_dir = dir + "/store";
  go.prefix = "vocab";
  go.timeout_s = 60;
  auto transport = GlooTransport::Create(go);
  if (!transport.ok()) return 2;
  TrainOptions options;
  options.iterations = iterations;
  auto r = TrainRank(spec, plan, rank, transport->get(), options);
  if (!r.ok()) {
    std::ofstream(dir + "/err-" + std::to_string(rank)) << r.status().message();
    return 1;
  }
  WriteTensors(dir + "/grads-" + std::to_string(rank), TensorsOf(*r, /*grads=*/true));
  WriteTensors(dir + "/params-" + std::to_string(rank), TensorsOf(*r, /*grads=*/false));
  return 0;
}

// 2 and 3 ranks as processes over Gloo, unequal shards (as for devices of different speeds):
// the shards' partial sums and the embedding rows cross real sockets.
TEST(VocabParallelTrainingTest, GlooProcessesMatchSingleProcessTraining) {
  const ModelSpec spec = Spec(4);
  const int L = static_cast<int>(spec.kinds.size()), iterations = 3;
  std::mt19937 rng(331);
  for (const std::vector<int64_t>& columns : {std::vector<int64_t>{9, 22},
                                              std::vector<int64_t>{7, 15, 9}}) {
    const int P = static_cast<int>(columns.size());
    const std::string what = std::to_string(P) + " gloo ranks";
    Plan plan = testing::RandomPlan(rng, L, P, P + 1, spec.microbatches,
                                    /*split_backward=*/true, /*vocab_parallel=*/true);
    plan.vocab_shard_columns = columns;
    const std::string dir = TestPath("gloo-" + std::to_string(P));
    std::vector<pid_t> pids;
    for (int r = 0; r < P; ++r) {
      const pid_t pid = fork();
      if (pid == 0) _exit(GlooChild(spec, plan, r, dir, iterations));
      pids.push_back(pid);
    }
    for (int r = 0; r < P; ++r) {
      int status = 0;
      waitpid(pids[r], &status, 0);
      std::ifstream err(dir + "/err-" + std::to_string(r));
      std::string message((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << what << ", rank " << r << ": " << message;
    }
    std::vector<RankTensors> grads, params;
    for (int r = 0; r < P; ++r) {
      grads.push_back(ReadTensors(dir + "/grads-" + std::to_string(r), L));
      params.push_back(ReadTensors(dir + "/params-" + std::to_string(r), L));
    }
    const Reference ref = TrainReference(spec, plan.num_microbatches, iterations);
    ExpectClose(WholeModel(grads), ref.grads, what + " gradients");
    ExpectClose(WholeModel(params), ref.params, what + " weights");
  }
}

}  // namespace
}  // namespace octopipe::executor
