// Pins the engine's contract with small linear layers (the real reference layers are tested
// against it in executor/pipeline_equality_test.cc): any partition, placement and valid
// schedule — classic, list-scheduled with random priorities, with B/W split and recompute —
// gives the loss and gradients of single-process training; a dead peer is an error, not a hang.
#include "executor/engine.h"

#include <atomic>
#include <map>
#include <tuple>
#include <random>
#include <thread>

#include "executor/inproc_transport.h"
#include "executor/layers/vocab_embedding.h"
#include "executor/testing/random_plan.h"
#include "gtest/gtest.h"
#include "simulator/evaluator.h"
#include "simulator/list_scheduler.h"
#include "simulator/problem.h"
#include "simulator/schedules.h"

namespace octopipe::executor {
namespace {

constexpr int kHidden = 6;
constexpr int kTokens = 5;
constexpr int kVocab = 11;

float Init(int layer, int i) {
  std::mt19937 rng(1000 * layer + i);
  return std::uniform_real_distribution<float>(-0.5f, 0.5f)(rng);
}

class FakeEmbed : public Layer {
 public:
  explicit FakeEmbed(int index) : table_(kVocab, kHidden), grad_(kVocab, kHidden) {
    for (int i = 0; i < table_.size(); ++i) table_.data()[i] = Init(index, i);
    grad_.setZero();
  }
  absl::string_view kind() const override { return "embedding"; }
  Tensor Forward(const Tensor&, const MicroBatch& mb, LayerContext*) const override {
    Tensor y(kTokens, kHidden);
    for (int t = 0; t < kTokens; ++t) y.row(t) = table_.row(mb.tokens[t]);
    return y;
  }
  Tensor BackwardInput(const Tensor& dy, const MicroBatch&, LayerContext* ctx) const override {
    ctx->saved = {dy};
    return Tensor();
  }
  void BackwardWeight(const MicroBatch& mb, LayerContext* ctx) override {
    for (int t = 0; t < kTokens; ++t) grad_.row(mb.tokens[t]) += ctx->saved[0].row(t);
  }
  std::vector<Tensor*> params() override { return {&table_}; }
  std::vector<Tensor*> grads() override { return {&grad_}; }

 private:
  Tensor table_, grad_;
};

// y = x + tanh(x W): nonlinear so recompute and ordering errors show.
class FakeBlock : public Layer {
 public:
  explicit FakeBlock(int index) : w_(kHidden, kHidden), grad_(kHidden, kHidden) {
    for (int i = 0; i < w_.size(); ++i) w_.data()[i] = Init(index, i);
    grad_.setZero();
  }
  absl::string_view kind() const override { return "mlp"; }
  Tensor Forward(const Tensor& x, const MicroBatch&, LayerContext* ctx) const override {
    Tensor h = (x * w_).array().tanh().matrix();
    ctx->saved = {x, h};
    return x + h;
  }
  Tensor BackwardInput(const Tensor& dy, const MicroBatch&, LayerContext* ctx) const override {
    const Tensor& h = ctx->saved[1];
    Tensor dz = (dy.array() * (1 - h.array().square())).matrix();
    ctx->saved.push_back(dz);
    return dy + dz * w_.transpose();
  }
  void BackwardWeight(const MicroBatch&, LayerContext* ctx) override {
    grad_ += ctx->saved[0].transpose() * ctx->saved[2];
  }
  std::vector<Tensor*> params() override { return {&w_}; }
  std::vector<Tensor*> grads() override { return {&grad_}; }

 private:
  Tensor w_, grad_;
};

class FakeHead : public Layer {
 public:
  explicit FakeHead(int index) : v_(kHidden, 1), grad_(kHidden, 1) {
    for (int i = 0; i < v_.size(); ++i) v_.data()[i] = Init(index, i);
    grad_.setZero();
  }
  absl::string_view kind() const override { return "head"; }
  Tensor Forward(const Tensor& x, const MicroBatch& mb, LayerContext* ctx) const override {
    Tensor r = x * v_;
    double loss = 0;
    for (int t = 0; t < kTokens; ++t) {
      r(t, 0) -= static_cast<float>(mb.targets[t]) / kVocab;
      loss += r(t, 0) * r(t, 0);
    }
    ctx->saved = {x, r};
    return Tensor::Constant(1, 1, static_cast<float>(loss / kTokens));
  }
  Tensor BackwardInput(const Tensor& dy, const MicroBatch&, LayerContext* ctx) const override {
    Tensor dr = ctx->saved[1] * (2.0f * dy(0, 0) / kTokens);
    ctx->saved.push_back(dr);
    return dr * v_.transpose();
  }
  void BackwardWeight(const MicroBatch&, LayerContext* ctx) override {
    grad_ += ctx->saved[0].transpose() * ctx->saved[2];
  }
  std::vector<Tensor*> params() override { return {&v_}; }
  std::vector<Tensor*> grads() override { return {&grad_}; }

 private:
  Tensor v_, grad_;
};

std::vector<std::unique_ptr<Layer>> BuildLayers(int L) {
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(std::make_unique<FakeEmbed>(0));
  for (int l = 1; l + 1 < L; ++l) layers.push_back(std::make_unique<FakeBlock>(l));
  layers.push_back(std::make_unique<FakeHead>(L - 1));
  return layers;
}

std::vector<MicroBatch> Data(int M) {
  std::vector<MicroBatch> out(M);
  for (int m = 0; m < M; ++m) {
    out[m].seq_len = kTokens;
    for (int t = 0; t < kTokens; ++t) {
      out[m].tokens.push_back((m * 7 + t * 3) % kVocab);
      out[m].targets.push_back((m * 5 + t * 2 + 1) % kVocab);
    }
  }
  return out;
}

struct Reference {
  double loss = 0;
  std::vector<std::vector<Tensor>> grads;
};

Reference SingleProcess(int L, const std::vector<MicroBatch>& mbs) {
  auto layers = BuildLayers(L);
  Reference ref;
  const int M = static_cast<int>(mbs.size());
  for (const MicroBatch& mb : mbs) {
    std::vector<LayerContext> ctx(L);
    Tensor x;
    for (int l = 0; l < L; ++l) x = layers[l]->Forward(x, mb, &ctx[l]);
    ref.loss += x(0, 0) / M;
    Tensor dy = Tensor::Constant(1, 1, 1.0f / M);
    for (int l = L - 1; l >= 0; --l) dy = layers[l]->BackwardInput(dy, mb, &ctx[l]);
    for (int l = 0; l < L; ++l) layers[l]->BackwardWeight(mb, &ctx[l]);
  }
  for (auto& layer : layers) {
    std::vector<Tensor> g;
    for (Tensor* t : layer->grads()) g.push_back(*t);
    ref.grads.push_back(g);
  }
  return ref;
}

// Runs the plan with one thread per rank over the in-process transport.
void ExpectEqualsSingleProcess(const Plan& plan, int L, const std::string& what) {
  const std::vector<MicroBatch> mbs = Data(plan.num_microbatches);
  const Reference ref = SingleProcess(L, mbs);
  InProcHub hub(plan.num_devices);
  std::vector<std::vector<std::unique_ptr<Layer>>> layers(plan.num_devices);
  std::vector<absl::StatusOr<IterationStats>> results(plan.num_devices);
  std::vector<std::thread> threads;
  for (int r = 0; r < plan.num_devices; ++r) {
    layers[r] = BuildLayers(L);
    threads.emplace_back([&, r] {
      auto transport = hub.Endpoint(r);
      PipelineEngine engine(plan, r, &layers[r], transport.get(), kTokens, kHidden);
      results[r] = engine.RunIteration(mbs);
    });
  }
  for (auto& t : threads) t.join();
  double loss = -1;
  for (int r = 0; r < plan.num_devices; ++r) {
    ASSERT_TRUE(results[r].ok()) << what << " rank " << r << ": " << results[r].status();
    if (results[r]->has_loss) loss = results[r]->loss;
  }
  EXPECT_NEAR(loss, ref.loss, 1e-5 * std::abs(ref.loss)) << what;
  for (const StageAssignment& st : plan.stages) {
    for (int l = st.first_layer; l <= st.last_layer; ++l) {
      std::vector<Tensor*> g = layers[st.device][l]->grads();
      for (size_t i = 0; i < g.size(); ++i) {
        const double err = (*g[i] - ref.grads[l][i]).norm();
        EXPECT_LE(err, 1e-5 * std::max(1e-6f, ref.grads[l][i].norm())) << what << " layer " << l;
      }
    }
  }
}

Plan ClassicPlanFor(ScheduleKind kind, int P, int V, int M, int L) {
  auto g = GenerateSchedule(kind, P, V, M);
  EXPECT_TRUE(g.ok()) << g.status();
  Plan plan;
  plan.num_devices = P;
  plan.num_microbatches = M;
  plan.stages = EvenPartition(L, g->num_stages);
  for (int s = 0; s < g->num_stages; ++s) plan.stages[s].device = g->stage_device[s];
  plan.schedule = g->schedule;
  return plan;
}

TEST(EngineTest, ClassicSchedulesMatchSingleProcessTraining) {
  for (ScheduleKind kind : AllScheduleKinds()) {
    for (int P : {2, 3, 4}) {
      const int M = kind == ScheduleKind::kDualPipeV ? 2 * P : (kind == ScheduleKind::kInterleaved ? 2 * P : 5);
      const int L = 4 * P + 1;
      ExpectEqualsSingleProcess(ClassicPlanFor(kind, P, 0, M, L), L,
                                std::string(ScheduleKindName(kind)) + " P=" + std::to_string(P));
    }
  }
}

// Irregular plans: uneven partitions, several non-adjacent stages per rank, recompute, random
// priorities — 200 random valid schedules from the list scheduler.
TEST(EngineTest, TwoHundredRandomValidSchedulesNeverDeadlockAndAlwaysMatch) {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 200; ++trial) {
    const int P = 2 + trial % 3;
    const int S = P + static_cast<int>(rng() % (P + 2));
    const int L = S + static_cast<int>(rng() % 4);
    const int M = 1 + static_cast<int>(rng() % 5);
    const Plan plan = testing::RandomPlan(rng, L, P, S, M, trial % 2 == 0);
    ExpectEqualsSingleProcess(plan, L, "trial " + std::to_string(trial));
    if (HasFailure()) return;
  }
}

TEST(EngineTest, ADeadRankMakesTheOthersFailWithAClearErrorNotHang) {
  const Plan plan = ClassicPlanFor(ScheduleKind::k1F1B, 3, 0, 4, 7);
  const std::vector<MicroBatch> mbs = Data(4);
  InProcHub hub(3, InProcOptions{.timeout_s = 5});
  std::vector<std::vector<std::unique_ptr<Layer>>> layers(3);
  std::vector<absl::StatusOr<IterationStats>> results(3);
  std::vector<std::thread> threads;
  hub.Abort(1);  // rank 1 is dead before it starts
  for (int r : {0, 2}) {
    layers[r] = BuildLayers(7);
    threads.emplace_back([&, r] {
      auto transport = hub.Endpoint(r);
      PipelineEngine engine(plan, r, &layers[r], transport.get(), kTokens, kHidden);
      results[r] = engine.RunIteration(mbs);
    });
  }
  for (auto& t : threads) t.join();
  for (int r : {0, 2}) {
    ASSERT_FALSE(results[r].ok()) << "rank " << r;
    EXPECT_NE(results[r].status().message().find("rank 1"), absl::string_view::npos)
        << results[r].status();
  }
}

// A vocab_parallel plan needs every rank's head shard (BuildRankLayers builds it): run on
// whole-model layers, it is refused up front, by name, before any rank waits on a peer.
TEST(EngineTest, RefusesAVocabParallelPlanWithoutHeadShards) {
  Plan plan = ClassicPlanFor(ScheduleKind::k1F1B, 2, 0, 2, 5);
  plan.vocab_parallel = true;
  InProcHub hub(2, InProcOptions{.timeout_s = 5});
  std::vector<std::unique_ptr<Layer>> layers = BuildLayers(5);
  auto transport = hub.Endpoint(0);
  PipelineEngine engine(plan, 0, &layers, transport.get(), kTokens, kHidden);
  absl::Status s = engine.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("vocab_parallel"), absl::string_view::npos) << s;
}

// A vocabulary shard of the embedding runs only in a vocab_parallel plan (it holds only some
// rows of the table): refused up front, naming layer 0.
TEST(EngineTest, RefusesAnEmbeddingShardOutsideAVocabParallelPlan) {
  Plan plan = ClassicPlanFor(ScheduleKind::k1F1B, 2, 0, 2, 5);
  InProcHub hub(2, InProcOptions{.timeout_s = 5});
  std::vector<std::unique_ptr<Layer>> layers = BuildLayers(5);
  ModelDims dims;
  dims.vocab = kVocab;
  dims.hidden = kHidden;
  layers[0] = std::make_unique<VocabShardEmbedding>(dims, 0, VocabShardRange({4, kVocab - 4}, 0));
  auto transport = hub.Endpoint(0);
  absl::Status s = PipelineEngine(plan, 0, &layers, transport.get(), kTokens, kHidden).Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("layer 0 on rank 0 is a vocabulary shard of the embedding, but the "
                             "plan is not vocab_parallel"),
            absl::string_view::npos)
      << s;
}

// Vocabulary passes are refused by name unless the plan is vocab_parallel, and a rank runs
// only its own shard's passes.
TEST(EngineTest, RefusesVocabularyPassesOutsideTheirPlaceOrPlan) {
  InProcHub hub(2, InProcOptions{.timeout_s = 5});
  std::vector<std::unique_ptr<Layer>> layers = BuildLayers(5);
  auto transport = hub.Endpoint(0);
  Plan plain = ClassicPlanFor(ScheduleKind::k1F1B, 2, 0, 2, 5);
  plain.schedule.ops[0].push_back(Op{OpKind::kS, 0, 0});
  absl::Status s = PipelineEngine(plain, 0, &layers, transport.get(), kTokens, kHidden).Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("op S0.0 on rank 0: vocabulary passes need a vocab_parallel plan"),
            absl::string_view::npos)
      << s;
  Plan split = ClassicPlanFor(ScheduleKind::k1F1B, 2, 0, 2, 5);
  split.vocab_parallel = true;
  split.schedule.ops[0].push_back(Op{OpKind::kT, 1, 0});
  s = PipelineEngine(split, 0, &layers, transport.get(), kTokens, kHidden).Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("op T1.0 on rank 0: a vocabulary pass runs the rank's own shard, 0"),
            absl::string_view::npos)
      << s;
}

// Counts Send calls per destination; forwards everything to the wrapped transport.
class CountingTransport : public Transport {
 public:
  explicit CountingTransport(std::unique_ptr<Transport> inner)
      : inner_(std::move(inner)), sends_(inner_->size()) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  absl::Status Send(int dst, uint32_t tag, const void* data, size_t bytes) override {
    ++sends_[dst];
    return inner_->Send(dst, tag, data, bytes);
  }
  absl::Status Recv(int src, uint32_t tag, void* data, size_t bytes) override {
    return inner_->Recv(src, tag, data, bytes);
  }
  std::string name() const override { return inner_->name(); }
  int sends_to(int dst) const { return sends_[dst].load(); }

 private:
  std::unique_ptr<Transport> inner_;
  std::vector<std::atomic<int>> sends_;
};

// Every Send to a dead or stalled peer waits out the transport's timeout, so after the first
// failure nothing more may be sent: GPipe starts all M forwards to rank 1 at once, and sending
// each would make the failure take M timeouts instead of one. (The first send may not even be
// tried: the receive from the dead rank can fail first, and the queued sends are abandoned.)
TEST(EngineTest, AFailedSendIsNotRetriedForTheRestOfTheQueue) {
  constexpr int kM = 6;
  const Plan plan = ClassicPlanFor(ScheduleKind::kGpipe, 2, 0, kM, 5);
  const std::vector<MicroBatch> mbs = Data(kM);
  InProcHub hub(2, InProcOptions{.timeout_s = 5});
  hub.Abort(1);
  auto layers = BuildLayers(5);
  CountingTransport transport(hub.Endpoint(0));
  PipelineEngine engine(plan, 0, &layers, &transport, kTokens, kHidden);
  absl::StatusOr<IterationStats> r = engine.RunIteration(mbs);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("rank 1"), absl::string_view::npos) << r.status();
  EXPECT_LE(transport.sends_to(1), 1);
}

// Bytes the fake layers' contexts hold after F and after B (see their Forward/BackwardInput).
int64_t FakeBytesAfterF(int l, int L) {
  if (l == 0) return 0;
  if (l == L - 1) return (kTokens * kHidden + kTokens) * 4;
  return 2 * kTokens * kHidden * 4;
}
int64_t FakeBytesAfterB(int l, int L) {
  if (l == 0) return kTokens * kHidden * 4;
  if (l == L - 1) return (kTokens * kHidden + 2 * kTokens) * 4;
  return 3 * kTokens * kHidden * 4;
}

// Per-layer timing and activation accounting: every layer of every op is timed once per
// micro-batch and kind, inside its op, with the bytes its context holds after F, R and B; the
// engine's peak activation bytes per rank equal what
// the simulator's memory rules predict from the layers' context sizes, for classic and random
// plans with B/W split and recompute.
TEST(EngineTest, TimesEveryLayerOpAndAccountsPeakActivationsAsTheSimulatorPredicts) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 30; ++trial) {
    const int P = 2 + trial % 2;
    const int S = P + static_cast<int>(rng() % (P + 1));
    const int L = S + 1 + static_cast<int>(rng() % 3);
    const int M = 2 + static_cast<int>(rng() % 4);
    const Plan plan = trial == 0 ? ClassicPlanFor(ScheduleKind::k1F1B, 2, 0, 4, 6)
                                 : testing::RandomPlan(rng, L, P, S, M, trial % 2 == 0);
    const int LL = trial == 0 ? 6 : L;
    const std::vector<MicroBatch> mbs = Data(plan.num_microbatches);
    InProcHub hub(plan.num_devices);
    std::vector<std::vector<std::unique_ptr<Layer>>> layers(plan.num_devices);
    std::vector<absl::StatusOr<IterationStats>> results(plan.num_devices);
    std::vector<std::thread> threads;
    for (int r = 0; r < plan.num_devices; ++r) {
      layers[r] = BuildLayers(LL);
      threads.emplace_back([&, r] {
        auto transport = hub.Endpoint(r);
        PipelineEngine engine(plan, r, &layers[r], transport.get(), kTokens, kHidden);
        results[r] = engine.RunIteration(mbs);
      });
    }
    for (auto& t : threads) t.join();

    // The simulator's view of the same plan, with the fake layers' bytes.
    std::vector<int> placement;
    for (const StageAssignment& st : plan.stages) placement.push_back(st.device);
    PipelineProblem pb = UniformProblem(placement, plan.num_devices, plan.num_microbatches, 1, 1, 1);
    for (int s = 0; s < plan.num_stages(); ++s) {
      const StageAssignment& st = plan.stages[s];
      pb.recompute[s] = st.recompute;
      pb.activation_bytes[s] = pb.activation_bytes_w[s] = 0;
      for (int l = st.first_layer; l <= st.last_layer; ++l) {
        pb.activation_bytes[s] += FakeBytesAfterF(l, LL);
        pb.activation_bytes_w[s] += FakeBytesAfterB(l, LL);
      }
      pb.input_bytes[s] = st.first_layer == 0 ? 0 : kTokens * kHidden * 4;
    }
    absl::StatusOr<SimResult> sim = Simulate(pb, plan.schedule);
    ASSERT_TRUE(sim.ok()) << sim.status();

    for (int r = 0; r < plan.num_devices; ++r) {
      ASSERT_TRUE(results[r].ok()) << "trial " << trial << " rank " << r << ": " << results[r].status();
      const IterationStats& st = *results[r];
      EXPECT_EQ(st.peak_activation_bytes, static_cast<int64_t>(sim->devices[r].peak_memory_bytes))
          << "trial " << trial << " rank " << r;
      // Each (layer, micro-batch, kind) once; F, B, W for every layer of the rank, R where the
      // stage recomputes; the layers' seconds fit inside their op.
      std::map<std::tuple<int, int, int>, int> seen;
      for (const LayerOpTiming& t : st.layer_ops) {
        EXPECT_GE(t.seconds, 0);
        EXPECT_EQ(plan.stages[t.stage].device, r);
        EXPECT_GE(t.layer, plan.stages[t.stage].first_layer);
        EXPECT_LE(t.layer, plan.stages[t.stage].last_layer);
        ++seen[{t.layer, t.microbatch, static_cast<int>(t.kind)}];
        // What the layer holds when its share of the op ends: F's (and R's) context for B, B's
        // for W; W records none.
        int64_t held = -1;
        if (t.kind == OpKind::kB) held = FakeBytesAfterB(t.layer, LL);
        if (t.kind == OpKind::kF || t.kind == OpKind::kR) held = FakeBytesAfterF(t.layer, LL);
        EXPECT_EQ(t.held_bytes, held)
            << "layer " << t.layer << " kind " << static_cast<int>(t.kind);
      }
      int expected = 0;
      for (const StageAssignment& sa : plan.stages) {
        if (sa.device != r) continue;
        expected += (sa.last_layer - sa.first_layer + 1) * plan.num_microbatches *
                    (sa.recompute ? 4 : 3);
      }
      EXPECT_EQ(static_cast<int>(seen.size()), expected) << "trial " << trial << " rank " << r;
      for (const auto& [k, n] : seen) EXPECT_EQ(n, 1);
      double layer_sum = 0, op_sum = 0;
      for (const LayerOpTiming& t : st.layer_ops) layer_sum += t.seconds;
      for (const OpTiming& t : st.ops) op_sum += t.end_s - t.start_s;
      EXPECT_LE(layer_sum, op_sum + 1e-9);
    }
    if (HasFailure()) return;
  }
}

}  // namespace
}  // namespace octopipe::executor
