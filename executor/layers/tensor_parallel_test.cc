// Pins the tensor-parallel shards against the unsharded layers, one thread per member over an
// InProcGroup:
//  - F outputs, B input gradients and (merged) W gradients equal the unsharded layer's, over
//    three micro-batches whose F, B, W interleave; replicated outputs and gradients are
//    bit-identical on every member;
//  - a shard's parameters are its slice of MakeLayer's, bit for bit; Merge(Shard(whole)) is
//    whole; wrong counts, shapes, splits and diverged replicas are refused naming them;
//  - the collectives each op makes are exactly TensorParallelCommOf's, pinned in closed form;
//  - a member of an aborted group reports the failure in comm_status().
#include "executor/layers/tensor_parallel.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "executor/data.h"
#include "executor/inproc_collective.h"
#include "executor/layer.h"
#include "executor/layers/init.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace octopipe::executor {
namespace {

using ::testing::HasSubstr;

// heads = 2, so 4 members cannot split attention; every other split divides by 2 and 4.
ModelDims SmallDims() {
  ModelDims d;
  d.vocab = 32;
  d.hidden = 16;
  d.heads = 2;
  d.ffn = 24;
  d.state = 4;
  d.expand = 2;  // d = 32
  d.seq_len = 8;
  d.batch = 2;  // attention and the scan must keep the two sequences apart
  d.seed = 7;
  return d;
}

// Every split divides by 4: heads 4, ffn 32, d = 48, vocab 48.
ModelDims DivisibleDims() {
  ModelDims d;
  d.vocab = 48;
  d.hidden = 16;
  d.heads = 4;
  d.ffn = 32;
  d.state = 3;
  d.expand = 3;
  d.seq_len = 6;
  d.batch = 2;
  d.seed = 11;
  return d;
}

const std::vector<std::string>& SplitKinds() {
  static const auto* kinds =
      new std::vector<std::string>{"embedding", "attention", "mlp", "mamba", "head"};
  return *kinds;
}

constexpr int kLayerIndex = 3;
constexpr int kMicroBatches = 3;
constexpr double kTolerance = 1e-5;

double RelativeError(const Tensor& got, const Tensor& want) {
  const double diff = (got - want).norm();
  return diff == 0 ? 0 : diff / std::max(1e-30, static_cast<double>(want.norm()));
}

bool SameBits(const Tensor& a, const Tensor& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         std::memcmp(a.data(), b.data(), sizeof(float) * static_cast<size_t>(a.size())) == 0;
}

Tensor Random(Eigen::Index rows, Eigen::Index cols, int stream) {
  Tensor t(rows, cols);
  InitUniform(/*seed=*/99, /*layer_index=*/0, stream, /*a=*/1.0f, &t);
  return t;
}

std::vector<Tensor> Copies(const std::vector<Tensor*>& tensors) {
  std::vector<Tensor> out;
  for (const Tensor* t : tensors) out.push_back(*t);
  return out;
}

std::unique_ptr<Layer> Whole(const std::string& kind, const ModelDims& dims) {
  absl::StatusOr<std::unique_ptr<Layer>> layer = MakeLayer(kind, dims, kLayerIndex);
  EXPECT_TRUE(layer.ok()) << layer.status();
  return std::move(*layer);
}

// Runs fn(rank) on one thread per member.
template <typename Fn>
void OnThreads(int members, Fn fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < members; ++r) threads.emplace_back([&fn, r] { fn(r); });
  for (std::thread& t : threads) t.join();
}

// One op of the schedule every member (and the unsharded layer) runs.
struct Op {
  char op;  // 'F', 'B' or 'W'
  int mb;
};
// F, B and W of three micro-batches, interleaved: B before an earlier micro-batch's B, W long
// after its B, and W of one micro-batch between another's F and B.
const std::vector<Op>& Schedule() {
  static const auto* ops = new std::vector<Op>{{'F', 0}, {'F', 1}, {'B', 1}, {'F', 2}, {'W', 1},
                                               {'B', 0}, {'B', 2}, {'W', 2}, {'W', 0}};
  return *ops;
}

// What a layer produced over the schedule.
struct Outcome {
  std::vector<Tensor> outputs, input_grads, grads;
  absl::Status comm;
};

Outcome RunSchedule(Layer& layer, const std::vector<MicroBatch>& mbs, const std::vector<Tensor>& xs,
                    const std::vector<Tensor>& dys) {
  Outcome run;
  run.outputs.resize(mbs.size());
  run.input_grads.resize(mbs.size());
  std::vector<LayerContext> ctx(mbs.size());
  layer.ZeroGrads();
  for (const Op& op : Schedule()) {
    const size_t m = static_cast<size_t>(op.mb);
    if (op.op == 'F') run.outputs[m] = layer.Forward(xs[m], mbs[m], &ctx[m]);
    if (op.op == 'B') run.input_grads[m] = layer.BackwardInput(dys[m], mbs[m], &ctx[m]);
    if (op.op == 'W') layer.BackwardWeight(mbs[m], &ctx[m]);
  }
  run.grads = Copies(layer.grads());
  run.comm = layer.comm_status();
  return run;
}

// --- the shards compute the unsharded layer ---

struct Case {
  std::string name;
  ModelDims dims;
  std::string kind;
  int tp;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (const auto& [name, dims] :
       {std::pair<std::string, ModelDims>{"Small", SmallDims()}, {"Divisible", DivisibleDims()}}) {
    for (const std::string& kind : SplitKinds()) {
      for (int tp : {2, 4}) {
        if (!CheckTensorParallel(kind, dims, kLayerIndex, tp).ok()) continue;
        cases.push_back({absl::StrCat(name, "_", kind, "_tp", tp), dims, kind, tp});
      }
    }
  }
  return cases;
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class TensorParallelLayerTest : public ::testing::TestWithParam<Case> {};

TEST_P(TensorParallelLayerTest, ShardsComputeTheUnshardedLayer) {
  const Case& c = GetParam();
  const ModelDims& dims = c.dims;
  const Eigen::Index rows = Eigen::Index{dims.batch} * dims.seq_len;
  const std::vector<MicroBatch> mbs = MakeMicroBatches(dims, /*seed=*/5, 0, kMicroBatches);
  std::vector<Tensor> xs, dys;
  for (int m = 0; m < kMicroBatches; ++m) {
    xs.push_back(c.kind == "embedding" ? Tensor() : Random(rows, dims.hidden, 10 + m));
    dys.push_back(c.kind == "head" ? Tensor::Constant(1, 1, 1.0f / kMicroBatches)
                                   : Random(rows, dims.hidden, 20 + m));
  }

  std::unique_ptr<Layer> whole = Whole(c.kind, dims);
  InProcGroup group(c.tp, absl::StrCat("tp/", c.name));
  std::vector<std::unique_ptr<Collective>> members;
  std::vector<std::unique_ptr<Layer>> shards;
  for (int r = 0; r < c.tp; ++r) {
    members.push_back(group.Member(r));
    absl::StatusOr<std::unique_ptr<Layer>> shard =
        MakeTensorParallelLayer(c.kind, dims, kLayerIndex, members.back().get());
    ASSERT_TRUE(shard.ok()) << shard.status();
    EXPECT_EQ((*shard)->kind(), c.kind);
    shards.push_back(std::move(*shard));
  }
  if (c.kind == "mamba") {
    // Steps delta = softplus(0) ~ 0.7 instead of ~0.01, so that the decay, state and A_log
    // terms of the scan are large enough to be compared above float noise.
    whole->params()[3]->setZero();  // b_dt
    for (auto& shard : shards) shard->params()[3]->setZero();
  }

  const Outcome want = RunSchedule(*whole, mbs, xs, dys);
  std::vector<Outcome> got(static_cast<size_t>(c.tp));
  OnThreads(c.tp, [&](int r) { got[r] = RunSchedule(*shards[r], mbs, xs, dys); });

  for (int r = 0; r < c.tp; ++r) {
    EXPECT_TRUE(got[r].comm.ok()) << "member " << r << ": " << got[r].comm;
    for (int m = 0; m < kMicroBatches; ++m) {
      const std::string where = absl::StrCat("member ", r, " micro-batch ", m);
      ASSERT_EQ(got[r].outputs[m].rows(), want.outputs[m].rows()) << where;
      ASSERT_EQ(got[r].outputs[m].cols(), want.outputs[m].cols()) << where;
      EXPECT_LE(RelativeError(got[r].outputs[m], want.outputs[m]), kTolerance) << where;
      ASSERT_EQ(got[r].input_grads[m].rows(), want.input_grads[m].rows()) << where;
      ASSERT_EQ(got[r].input_grads[m].cols(), want.input_grads[m].cols()) << where;
      if (want.input_grads[m].size() > 0) {
        EXPECT_LE(RelativeError(got[r].input_grads[m], want.input_grads[m]), kTolerance) << where;
      }
      // Replicated activations and input gradients: the same bits on every member.
      EXPECT_TRUE(SameBits(got[r].outputs[m], got[0].outputs[m])) << where;
      EXPECT_TRUE(SameBits(got[r].input_grads[m], got[0].input_grads[m])) << where;
    }
  }
  if (c.kind == "head") {  // the loss is a number worth seeing move: ~ln(vocab) at init
    EXPECT_GT(want.outputs[0](0, 0), 1.0f);
  }

  // Merged gradients (Merge also refuses replicated gradients that differ in any bit).
  std::vector<std::vector<Tensor>> shard_grads;
  for (const Outcome& run : got) shard_grads.push_back(run.grads);
  absl::StatusOr<std::vector<Tensor>> merged = MergeTensorParallelShards(c.kind, dims, shard_grads);
  ASSERT_TRUE(merged.ok()) << merged.status();
  ASSERT_EQ(merged->size(), want.grads.size());
  for (size_t i = 0; i < want.grads.size(); ++i) {
    EXPECT_GT(want.grads[i].norm(), 0.0f) << "gradient " << i << " is all zero";
    EXPECT_LE(RelativeError((*merged)[i], want.grads[i]), kTolerance) << "gradient " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(KindsAndDegrees, TensorParallelLayerTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

TEST(TensorParallelLayerTest, EveryKindIsCoveredAtTwoAndFourMembers) {
  std::vector<std::string> covered;
  for (const Case& c : Cases()) covered.push_back(absl::StrCat(c.kind, "/", c.tp));
  for (const std::string& kind : SplitKinds()) {
    for (int tp : {2, 4}) {
      EXPECT_NE(std::find(covered.begin(), covered.end(), absl::StrCat(kind, "/", tp)),
                covered.end())
          << kind << " at tp " << tp;
    }
  }
}

// --- parameters ---

TEST(TensorParallelParamsTest, ShardsHoldTheirSliceOfMakeLayersParametersBitForBit) {
  for (const ModelDims& dims : {SmallDims(), DivisibleDims()}) {
    for (const std::string& kind : SplitKinds()) {
      const std::vector<Tensor> whole = Copies(Whole(kind, dims)->params());
      for (int tp : {1, 2, 4}) {
        if (!CheckTensorParallel(kind, dims, kLayerIndex, tp).ok()) continue;
        InProcGroup group(tp, "tp");
        std::vector<std::vector<Tensor>> built;
        for (int r = 0; r < tp; ++r) {
          const std::string where = absl::StrCat(kind, " member ", r, " of ", tp);
          std::unique_ptr<Collective> member = group.Member(r);
          absl::StatusOr<std::unique_ptr<Layer>> shard =
              MakeTensorParallelLayer(kind, dims, kLayerIndex, member.get());
          ASSERT_TRUE(shard.ok()) << where << ": " << shard.status();
          absl::StatusOr<std::vector<Tensor>> slice = TensorParallelShard(kind, dims, whole, r, tp);
          ASSERT_TRUE(slice.ok()) << where << ": " << slice.status();
          const std::vector<Tensor*> params = (*shard)->params(), grads = (*shard)->grads();
          ASSERT_EQ(params.size(), slice->size()) << where;
          ASSERT_EQ(grads.size(), slice->size()) << where;
          for (size_t i = 0; i < params.size(); ++i) {
            EXPECT_TRUE(SameBits(*params[i], (*slice)[i])) << where << " tensor " << i;
            EXPECT_EQ(grads[i]->rows(), params[i]->rows()) << where << " gradient " << i;
            EXPECT_EQ(grads[i]->cols(), params[i]->cols()) << where << " gradient " << i;
            EXPECT_EQ(grads[i]->norm(), 0.0f) << where << " gradient " << i;
          }
          if (tp > 1) {  // a real split: some tensor is smaller than the whole's
            EXPECT_LT(params.back()->size(), whole.back().size()) << where;
          }
          built.push_back(Copies(params));
        }
        absl::StatusOr<std::vector<Tensor>> merged = MergeTensorParallelShards(kind, dims, built);
        ASSERT_TRUE(merged.ok()) << kind << " tp " << tp << ": " << merged.status();
        ASSERT_EQ(merged->size(), whole.size());
        for (size_t i = 0; i < whole.size(); ++i) {
          EXPECT_TRUE(SameBits((*merged)[i], whole[i])) << kind << " tp " << tp << " tensor " << i;
        }
      }
    }
  }
}

TEST(TensorParallelParamsTest, MambaSplitsUAndZColumnsOfWInByChannel) {
  const ModelDims dims = SmallDims();  // d = 32: member 1 of 2 holds channels 16..31
  const std::vector<Tensor> whole = Copies(Whole("mamba", dims)->params());
  absl::StatusOr<std::vector<Tensor>> shard = TensorParallelShard("mamba", dims, whole, 1, 2);
  ASSERT_TRUE(shard.ok()) << shard.status();
  const Tensor& w_in = (*shard)[1];
  ASSERT_EQ(w_in.cols(), 32);
  EXPECT_TRUE(SameBits(w_in.leftCols(16), whole[1].middleCols(16, 16)));   // u
  EXPECT_TRUE(SameBits(w_in.rightCols(16), whole[1].middleCols(48, 16)));  // z
  EXPECT_TRUE(SameBits((*shard)[2], whole[2].middleRows(16, 16)));         // W_dt rows
  EXPECT_TRUE(SameBits((*shard)[3], whole[3].middleCols(16, 16)));         // b_dt
}

TEST(TensorParallelParamsTest, MergeAndShardRefuseWrongCountsShapesAndDivergedReplicas) {
  const ModelDims dims = SmallDims();
  const std::vector<Tensor> whole = Copies(Whole("mlp", dims)->params());
  std::vector<std::vector<Tensor>> shards;
  for (int r = 0; r < 2; ++r) shards.push_back(*TensorParallelShard("mlp", dims, whole, r, 2));
  ASSERT_TRUE(MergeTensorParallelShards("mlp", dims, shards).ok());

  std::vector<std::vector<Tensor>> bad = shards;
  bad[1].pop_back();
  absl::Status s = MergeTensorParallelShards("mlp", dims, bad).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("mlp member 1 of 2 has 3 tensors, expected 4"));

  bad = shards;
  bad[0][2] = Tensor::Zero(16, 13);
  s = MergeTensorParallelShards("mlp", dims, bad).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("mlp member 0 of 2 tensor 2 is 16x13, expected 16x12"));

  bad = shards;
  bad[1][0](0, 3) += 1.0f;  // the replicated gain
  s = MergeTensorParallelShards("mlp", dims, bad).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("member 1's copy differs from member 0's"));

  bad = {shards[0], shards[1], shards[0], shards[1], shards[0]};  // 5 members
  s = MergeTensorParallelShards("mlp", dims, bad).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("5 does not divide ffn = 24"));

  s = TensorParallelShard("mlp", dims, whole, 2, 2).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("rank 2 outside [0, 2)"));

  std::vector<Tensor> wrong = whole;
  wrong[3] = Tensor::Zero(24, 15);
  s = TensorParallelShard("mlp", dims, wrong, 0, 2).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("whole mlp tensor 3 is 24x15, expected 24x16"));
}

// --- what may be split ---

TEST(CheckTensorParallelTest, NamesTheFieldAndValuesThatDoNotDivide) {
  ModelDims dims = SmallDims();
  dims.heads = 4;
  absl::Status s = CheckTensorParallel("attention", dims, 2, 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "tensor parallelism: 3 does not divide heads = 4 (layer 2, attention)");
  EXPECT_EQ(CheckTensorParallel("mlp", dims, 5, 5).message(),
            "tensor parallelism: 5 does not divide ffn = 24 (layer 5, mlp)");
  EXPECT_EQ(CheckTensorParallel("mamba", dims, 1, 3).message(),
            "tensor parallelism: 3 does not divide expand*hidden = 32 (layer 1, mamba)");
  EXPECT_EQ(CheckTensorParallel("embedding", dims, 0, 5).message(),
            "tensor parallelism: 5 does not divide vocab = 32 (layer 0, embedding)");
  EXPECT_EQ(CheckTensorParallel("head", dims, 9, 3).message(),
            "tensor parallelism: 3 does not divide vocab = 32 (layer 9, head)");
  for (const std::string& kind : SplitKinds()) {
    EXPECT_TRUE(CheckTensorParallel(kind, dims, 1, 1).ok()) << kind;
    EXPECT_TRUE(CheckTensorParallel(kind, dims, 1, 2).ok()) << kind;
    EXPECT_EQ(CheckTensorParallel(kind, dims, 1, 0).code(), absl::StatusCode::kInvalidArgument)
        << kind;
  }
  EXPECT_EQ(CheckTensorParallel("conv", dims, 1, 2).code(), absl::StatusCode::kInvalidArgument);
  dims.ffn = 0;
  EXPECT_EQ(CheckTensorParallel("mlp", dims, 4, 2).message(),
            "tensor parallelism: ffn = 0 must be > 0 (layer 4, mlp)");
}

TEST(CheckTensorParallelTest, MoeSplitsItsExpertsAndAnIndivisibleGroupIsRefused) {
  const ModelDims dims = SmallDims();
  InProcGroup group(4, "tp");
  std::unique_ptr<Collective> member = group.Member(0);
  // MoE: the expert-parallel layer with EP 1, its experts split by moe_ffn.
  EXPECT_TRUE(CheckTensorParallel("moe", dims, 1, 2).ok());
  absl::StatusOr<std::unique_ptr<Layer>> moe = MakeTensorParallelLayer("moe", dims, 1, member.get());
  ASSERT_TRUE(moe.ok()) << moe.status();
  EXPECT_EQ((*moe)->kind(), "moe");
  ModelDims odd = dims;
  odd.moe_ffn = 6;
  EXPECT_EQ(CheckTensorParallel("moe", odd, 1, 4).code(), absl::StatusCode::kInvalidArgument);
  absl::Status s = MakeTensorParallelLayer("attention", dims, 6, member.get()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "tensor parallelism: 4 does not divide heads = 2 (layer 6, attention)");
  EXPECT_EQ(MakeTensorParallelLayer("mlp", dims, 1, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// --- communication ---

// Records every call (size and the pass the test says is running) and forwards it.
class RecordingCollective final : public Collective {
 public:
  explicit RecordingCollective(std::unique_ptr<Collective> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }
  absl::Status AllReduceSum(float* data, size_t count) override {
    calls_.push_back({pass_, TpCollectiveOp::kAllReduceSum, static_cast<int64_t>(count)});
    return inner_->AllReduceSum(data, count);
  }
  absl::Status AllToAllV(const float* send, const std::vector<size_t>& send_counts, float* recv,
                         const std::vector<size_t>& recv_counts) override {
    // The layers' all-to-alls are all-gathers: the same piece to every member.
    for (size_t c : send_counts) EXPECT_EQ(c, send_counts[0]);
    EXPECT_EQ(send_counts, recv_counts);
    calls_.push_back({pass_, TpCollectiveOp::kAllGather, static_cast<int64_t>(send_counts[0])});
    return inner_->AllToAllV(send, send_counts, recv, recv_counts);
  }
  void set_pass(TpPass pass) { pass_ = pass; }
  const std::vector<TensorParallelCall>& calls() const { return calls_; }

 private:
  std::unique_ptr<Collective> inner_;
  TpPass pass_ = TpPass::kForward;
  std::vector<TensorParallelCall> calls_;
};

std::string Describe(const std::vector<TensorParallelCall>& calls) {
  std::string out;
  for (const TensorParallelCall& c : calls) {
    absl::StrAppend(&out, "[pass ", static_cast<int>(c.pass), " op ", static_cast<int>(c.op),
                    " floats ", c.floats, "] ");
  }
  return out;
}

TEST(TensorParallelCommTest, EveryOpMakesExactlyTheCallsTensorParallelCommOfStates) {
  for (const ModelDims& dims : {SmallDims(), DivisibleDims()}) {
    for (const std::string& kind : SplitKinds()) {
      for (int tp : {1, 2, 4}) {
        if (!CheckTensorParallel(kind, dims, kLayerIndex, tp).ok()) continue;
        InProcGroup group(tp, "tp");
        std::vector<std::unique_ptr<RecordingCollective>> members;
        std::vector<std::unique_ptr<Layer>> shards;
        for (int r = 0; r < tp; ++r) {
          members.push_back(std::make_unique<RecordingCollective>(group.Member(r)));
          shards.push_back(*MakeTensorParallelLayer(kind, dims, kLayerIndex, members[r].get()));
        }
        const MicroBatch mb = MakeMicroBatch(dims, 5, 0, 0);
        const Eigen::Index rows = Eigen::Index{dims.batch} * dims.seq_len;
        const Tensor x = kind == "embedding" ? Tensor() : Random(rows, dims.hidden, 1);
        const Tensor dy = kind == "head" ? Tensor::Ones(1, 1) : Random(rows, dims.hidden, 2);
        OnThreads(tp, [&](int r) {
          LayerContext ctx;
          members[r]->set_pass(TpPass::kForward);
          shards[r]->Forward(x, mb, &ctx);
          members[r]->set_pass(TpPass::kBackwardInput);
          shards[r]->BackwardInput(dy, mb, &ctx);
          members[r]->set_pass(TpPass::kBackwardWeight);
          shards[r]->BackwardWeight(mb, &ctx);
        });
        const TensorParallelComm want = TensorParallelCommOf(kind, dims, tp);
        for (int r = 0; r < tp; ++r) {
          const std::vector<TensorParallelCall>& got = members[r]->calls();
          EXPECT_EQ(Describe(got), Describe(want.calls)) << kind << " tp " << tp << " member " << r;
        }
      }
    }
  }
}

TEST(TensorParallelCommTest, CountsAndSizesInClosedForm) {
  const ModelDims dims = DivisibleDims();  // T = 12 tokens, h = 16, d = 48, N = 3
  const int64_t activations = 12 * 16, mixed = 12 * (48 + 2 * 3);
  TensorParallelComm c = TensorParallelCommOf("attention", dims, 4);
  EXPECT_EQ(c.forward_allreduces, 1);
  EXPECT_EQ(c.forward_floats, activations);
  EXPECT_EQ(c.backward_allreduces, 1);
  EXPECT_EQ(c.backward_floats, activations);
  EXPECT_EQ(c.forward_allgathers, 0);
  c = TensorParallelCommOf("mlp", dims, 2);
  EXPECT_EQ(c.forward_floats, activations);
  EXPECT_EQ(c.backward_floats, activations);
  c = TensorParallelCommOf("mamba", dims, 4);
  EXPECT_EQ(c.forward_allreduces, 2);
  EXPECT_EQ(c.forward_floats, mixed + activations);
  EXPECT_EQ(c.backward_allreduces, 2);
  EXPECT_EQ(c.backward_floats, mixed + activations);
  c = TensorParallelCommOf("embedding", dims, 4);
  EXPECT_EQ(c.forward_allreduces, 1);
  EXPECT_EQ(c.forward_floats, activations);
  EXPECT_EQ(c.backward_allreduces, 0);  // token ids have no gradient
  c = TensorParallelCommOf("head", dims, 4);
  EXPECT_EQ(c.forward_allreduces, 0);
  EXPECT_EQ(c.forward_allgathers, 1);
  EXPECT_EQ(c.forward_allgather_floats, 12 * 3);  // max, sum, target logit per token
  EXPECT_EQ(c.backward_allreduces, 1);
  EXPECT_EQ(c.backward_floats, activations);
  EXPECT_TRUE(TensorParallelCommOf("mlp", dims, 1).calls.empty());
  c = TensorParallelCommOf("moe", dims, 4);  // the experts' outputs; dx and the gate gradients
  EXPECT_EQ(c.forward_allreduces, 1);
  EXPECT_EQ(c.forward_floats, activations);
  EXPECT_EQ(c.backward_allreduces, 1);
  EXPECT_EQ(c.backward_floats, 12 * (dims.hidden + dims.top_k));
}

TEST(TensorParallelCommTest, AMemberOfAnAbortedGroupReportsTheFailure) {
  const ModelDims dims = SmallDims();
  const MicroBatch mb = MakeMicroBatch(dims, 5, 0, 0);
  const Eigen::Index rows = Eigen::Index{dims.batch} * dims.seq_len;
  for (const std::string& kind : SplitKinds()) {
    InProcGroup group(2, "tp/stage-3");
    std::unique_ptr<Collective> member = group.Member(0);
    absl::StatusOr<std::unique_ptr<Layer>> layer =
        MakeTensorParallelLayer(kind, dims, kLayerIndex, member.get());
    ASSERT_TRUE(layer.ok()) << layer.status();
    EXPECT_TRUE((*layer)->comm_status().ok()) << kind;
    group.Abort();  // member 1 died
    const Tensor x = kind == "embedding" ? Tensor() : Random(rows, dims.hidden, 1);
    const Tensor dy = kind == "head" ? Tensor::Ones(1, 1) : Random(rows, dims.hidden, 2);
    LayerContext ctx;
    (*layer)->Forward(x, mb, &ctx);  // computes on: no hang, no crash
    (*layer)->BackwardInput(dy, mb, &ctx);
    (*layer)->BackwardWeight(mb, &ctx);
    const absl::Status s = (*layer)->comm_status();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << kind << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("tp/stage-3")) << kind;
  }
}

}  // namespace
}  // namespace octopipe::executor
