// Whole layouts as processes over Gloo: PP2 x DP2, PP1 x TP2 x DP2 x EP2 and heterogeneous
// replicas train exactly as single-process training on the global batch. Every rank checks
// itself: its loss of every iteration (1e-6 relative) and each parameter it holds after the
// last step (1e-5 relative) against its shard of the single-process model's.
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "core/layout_plan.h"
#include "executor/gloo_transport.h"
#include "executor/layers/expert_parallel.h"
#include "executor/layers/tensor_parallel.h"
#include "executor/layout_trainer.h"
#include "executor/model_spec.h"
#include "executor/testing/random_plan.h"
#include "executor/testing/reference_training.h"
#include "gtest/gtest.h"
#include "core/test_dirs.h"

namespace octopipe::executor {
namespace {

using ::octopipe::testing::TestPath;

constexpr int kIterations = 5;

ModelSpec Spec() {
  auto spec = ParseModelSpec(
      "ref:pattern=M*-EM-*E,hidden=16,heads=2,ffn=24,experts=4,top_k=2,moe_ffn=12,state=4,"
      "expand=2,seq=8,batch=1,vocab=32,seed=3,microbatches=4");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}


// The rank's own check, in the child: "" when it matches single-process training.
std::string CheckRank(const ModelSpec& spec, const LayoutPlan& plan, int rank,
                      const RankResult& result) {
  const testing::Reference ref =
      testing::TrainReference(spec, plan.global_microbatches, kIterations);
  std::ostringstream err;
  for (int it = 0; it < kIterations; ++it) {
    const IterationStats& s = result.iterations[it];
    const double want = ref.losses[it];
    if (s.has_loss && std::abs(s.loss - want) > 1e-6 * std::abs(want)) {
      err << "iteration " << it << " loss " << s.loss << " != " << want << "; ";
    }
  }
  const RankRole role = RankRoles(plan)[rank];
  const int tp = plan.layout.tp, ep = plan.layout.ep;
  for (size_t l = 0; l < result.layers.size(); ++l) {
    Layer* mine = result.layers[l].get();
    if (mine == nullptr) continue;
    const std::vector<Tensor>& whole = ref.params[l];
    absl::StatusOr<std::vector<Tensor>> want = whole;
    if (spec.kinds[l] == "moe" && (tp > 1 || ep > 1)) {
      want = ParallelMoeShard(spec.dims, whole, role.ep_rank, ep, role.tp_rank, tp);
    } else if (tp > 1) {
      want = TensorParallelShard(spec.kinds[l], spec.dims, whole, role.tp_rank, tp);
    }
    if (!want.ok()) return want.status().ToString();
    std::vector<Tensor*> got = mine->params();
    if (got.size() != want->size()) return absl::StrCat("layer ", l, ": parameter count");
    for (size_t i = 0; i < got.size(); ++i) {
      const double e = ((*got[i]) - (*want)[i]).norm() /
                       std::max(1e-12, static_cast<double>((*want)[i].norm()));
      if (!(e <= 1e-5)) err << "layer " << l << " param " << i << " relative error " << e << "; ";
    }
  }
  return err.str();
}

int Child(const ModelSpec& spec, const LayoutPlan& plan, int rank, const std::string& dir) {
  GlooOptions go;
  go.rank = rank;
  go.size = plan.num_ranks;
  go.store_dir = dir + "/store";
  go.prefix = "layout";
  go.timeout_s = 60;
  auto transport = GlooTransport::Create(go);
  std::string error;
  if (!transport.ok()) {
    error = transport.status().ToString();
  } else {
    TrainOptions options;
    options.iterations = kIterations;
    auto r = TrainLayoutRank(spec, plan, rank, transport->get(), options);
    error = r.ok() ? CheckRank(spec, plan, rank, *r) : r.status().ToString();
  }
  if (!error.empty()) std::ofstream(dir + "/err-" + std::to_string(rank)) << error;
  return error.empty() ? 0 : 1;
}

void ExpectProcessesMatch(const ModelSpec& spec, const LayoutPlan& plan, const std::string& what) {
  ASSERT_TRUE(CheckLayoutRunnable(spec, plan).ok()) << CheckLayoutRunnable(spec, plan);
  const std::string dir = TestPath(what);
  std::vector<pid_t> pids;
  for (int r = 0; r < plan.num_ranks; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      alarm(120);
      _exit(Child(spec, plan, r, dir));
    }
    pids.push_back(pid);
  }
  for (int r = 0; r < plan.num_ranks; ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    std::ifstream err(dir + "/err-" + std::to_string(r));
    std::string message((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << what << ", rank " << r << ": " << message;
  }
}

TEST(LayoutGlooTest, Pp2Dp2OnFourProcesses) {
  std::mt19937 rng(91);
  const ModelSpec spec = Spec();
  const int L = static_cast<int>(spec.kinds.size());
  ExpectProcessesMatch(
      spec, testing::HomogeneousLayout(testing::RandomPlan(rng, L, 2, 3, 2, /*split_backward=*/true), 1, 1, 2),
      "pp2dp2");
}

TEST(LayoutGlooTest, Tp2Dp2Ep2OnFourProcesses) {
  std::mt19937 rng(92);
  const ModelSpec spec = Spec();
  const int L = static_cast<int>(spec.kinds.size());
  ExpectProcessesMatch(
      spec, testing::HomogeneousLayout(testing::RandomPlan(rng, L, 1, 1, 2, /*split_backward=*/true), 2, 2, 2),
      "tp2dp2ep2");
}

TEST(LayoutGlooTest, HeterogeneousReplicasOnThreeProcesses) {
  std::mt19937 rng(93);
  const ModelSpec spec = Spec();
  const int L = static_cast<int>(spec.kinds.size());
  LayoutPlan lp;
  lp.layout = {2, 1, 1, 2, true};
  lp.num_ranks = 3;
  lp.global_microbatches = 5;
  LayoutPipelinePlan a, b;
  a.plan = testing::RandomPlan(rng, L, 2, 3, 3, /*split_backward=*/false);
  a.replicas = {{0, 0, {0, 1}}};
  b.plan = testing::RandomPlan(rng, L, 1, 1, 2, /*split_backward=*/true);
  b.replicas = {{1, 3, {2}}};
  lp.pipelines = {a, b};
  ExpectProcessesMatch(spec, lp, "hetero");
}

}  // namespace
}  // namespace octopipe::executor
