// Pipeline training as real processes over Gloo/TCP: every rank's gradients equal
// single-process training (fp32, relative error <= 1e-5), and a rank that dies makes the others
// fail with an error naming it within the timeout instead of hanging.
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "core/test_dirs.h"
#include "executor/gloo_transport.h"
#include "executor/model_spec.h"
#include "executor/reference_trainer.h"
#include "executor/trainer.h"
#include "gtest/gtest.h"
#include "simulator/classic_pipeline.h"

namespace octopipe::executor {
namespace {

using ::octopipe::testing::TestPath;

ModelSpec Spec() {
  return *ParseModelSpec(
      "ref:pattern=M*-EM-,hidden=16,heads=2,ffn=24,experts=4,top_k=2,moe_ffn=12,state=4,"
      "seq=8,vocab=32,seed=5,microbatches=6");
}

// Child: trains one iteration (no optimizer step) and writes every owned gradient as raw floats
// to DIR/grad-L-I. Returns the exit code.
int Child(const ModelSpec& spec, const Plan& plan, int rank, const std::string& dir,
          double timeout_s, bool die_early) {
  GlooOptions go;
  go.rank = rank;
  go.size = plan.num_devices;
  go.store_dir = dir + "/store";
  go.prefix = "run";
  go.timeout_s = timeout_s;
  auto t = GlooTransport::Create(go);
  if (!t.ok()) {
    std::ofstream(dir + "/err-" + std::to_string(rank)) << t.status().message();
    return 1;
  }
  if (die_early) _exit(3);  // connected, then gone: its peers must not hang
  TrainOptions o;
  o.step_optimizer = false;
  auto r = TrainRank(spec, plan, rank, t->get(), o);
  if (!r.ok()) {
    std::ofstream(dir + "/err-" + std::to_string(rank)) << r.status().message();
    return 1;
  }
  for (size_t l = 0; l < r->layers.size(); ++l) {
    if (!r->layers[l]) continue;
    std::vector<Tensor*> g = r->layers[l]->grads();
    for (size_t i = 0; i < g.size(); ++i) {
      std::ofstream out(dir + "/grad-" + std::to_string(l) + "-" + std::to_string(i),
                        std::ios::binary);
      out.write(reinterpret_cast<const char*>(g[i]->data()), g[i]->size() * sizeof(float));
    }
  }
  return 0;
}

std::vector<int> RunProcesses(const ModelSpec& spec, const Plan& plan, const std::string& dir,
                              double timeout_s, int dying_rank) {
  std::vector<pid_t> pids;
  for (int r = 0; r < plan.num_devices; ++r) {
    const pid_t pid = fork();
    if (pid == 0) _exit(Child(spec, plan, r, dir, timeout_s, r == dying_rank));
    pids.push_back(pid);
  }
  std::vector<int> codes;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  return codes;
}

TEST(GlooTrainingTest, ProcessesMatchSingleProcessTraining) {
  const ModelSpec spec = Spec();
  const ModelGraph graph = ToModelGraph(spec);
  int run = 0;
  for (ScheduleKind kind : {ScheduleKind::k1F1B, ScheduleKind::kZbV, ScheduleKind::kInterleaved}) {
    const int P = kind == ScheduleKind::kInterleaved ? 3 : 2;
    auto plan = ClassicPlan(kind, P, 0, 6, graph);
    ASSERT_TRUE(plan.ok()) << plan.status();
    const std::string dir = TestPath("run" + std::to_string(run++));
    const std::vector<int> codes = RunProcesses(spec, *plan, dir, 60, -1);
    for (int r = 0; r < P; ++r) ASSERT_EQ(codes[r], 0) << ScheduleKindName(kind) << " rank " << r;
    auto model = BuildModel(spec.pattern, spec.dims);
    ASSERT_TRUE(model.ok());
    const ReferenceResult ref =
        RunReferenceIteration(*model, IterationData(spec, 7, 0, plan->num_microbatches));
    for (size_t l = 0; l < ref.grads_per_layer.size(); ++l) {
      for (size_t i = 0; i < ref.grads_per_layer[l].size(); ++i) {
        const Tensor& want = ref.grads_per_layer[l][i];
        Tensor got(want.rows(), want.cols());
        std::ifstream in(dir + "/grad-" + std::to_string(l) + "-" + std::to_string(i),
                         std::ios::binary);
        ASSERT_TRUE(in) << "layer " << l;
        in.read(reinterpret_cast<char*>(got.data()), got.size() * sizeof(float));
        EXPECT_LE((got - want).norm() / std::max(1e-12f, want.norm()), 1e-5)
            << ScheduleKindName(kind) << " layer " << l << " grad " << i;
      }
    }
  }
}

TEST(GlooTrainingTest, ADyingRankMakesTheOthersFailNamingItWithinTheTimeout) {
  const ModelSpec spec = Spec();
  auto plan = ClassicPlan(ScheduleKind::k1F1B, 3, 0, 6, ToModelGraph(spec));
  ASSERT_TRUE(plan.ok());
  const std::string dir = TestPath("dying");
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int> codes = RunProcesses(spec, *plan, dir, 3, /*dying_rank=*/1);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(codes[1], 3);
  for (int r : {0, 2}) {
    EXPECT_EQ(codes[r], 1) << "rank " << r;
    std::ifstream in(dir + "/err-" + std::to_string(r));
    std::stringstream s;
    s << in.rdbuf();
    EXPECT_NE(s.str().find("rank 1"), std::string::npos) << "rank " << r << ": " << s.str();
  }
  EXPECT_LT(waited, 30) << "ranks must fail within the timeout, not hang";
}

}  // namespace
}  // namespace octopipe::executor
