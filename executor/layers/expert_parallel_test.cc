// Pins the expert- and tensor-parallel MoE (expert_parallel.h) to the unsharded MoeLayer, with
// every member on its own thread over InProcGroups and every EP member (a data-parallel replica)
// on its own micro-batches:
//  - each member's outputs and input gradients are the unsharded layer's on its micro-batches;
//  - after W, the merged expert gradients are the unsharded layer's summed over every replica's
//    micro-batches, and the replicated gain and router gradients, bit-identical over a replica's
//    TP members, sum over the replicas to the unsharded layer's;
//  - with F, B and W of several micro-batches interleaved, and with routing that leaves members
//    and experts without tokens;
//  - the collectives that run are ParallelMoeCollectivesPerMicroBatch's;
//  - shard / merge round trips are bit-exact and the shards start as the unsharded layer;
//  - invalid splits are refused naming the field; a dead group shows in comm_status().
#include "executor/layers/expert_parallel.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "executor/collective.h"
#include "executor/inproc_collective.h"
#include "executor/layer.h"
#include "executor/layers/init.h"
#include "executor/layers/moe.h"
#include "executor/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace octopipe::executor {
namespace {

using ::testing::HasSubstr;

constexpr int kLayer = 3;
constexpr double kTolerance = 1e-5;

ModelDims Dims(int experts) {
  ModelDims d;
  d.hidden = 16;
  d.experts = experts;
  d.top_k = 2;
  d.moe_ffn = 12;
  d.seq_len = 8;
  d.batch = 2;
  d.seed = 7;
  return d;
}

int Tokens(const ModelDims& d) { return d.batch * d.seq_len; }

Tensor Random(Eigen::Index rows, Eigen::Index cols, int stream) {
  Tensor t(rows, cols);
  InitUniform(/*seed=*/99, /*layer_index=*/0, stream, 1.0f, &t);
  return t;
}

double RelativeError(const Tensor& got, const Tensor& want) {
  if (got.rows() != want.rows() || got.cols() != want.cols()) return 1e30;
  return (got - want).norm() / std::max(want.norm(), 1e-30f);
}

bool SameBits(const Tensor& a, const Tensor& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         std::equal(a.data(), a.data() + a.size(), b.data());
}

std::vector<Tensor> Copy(const std::vector<Tensor*>& tensors) {
  std::vector<Tensor> out;
  for (const Tensor* t : tensors) out.push_back(*t);
  return out;
}

// A Collective that counts what passes through it (per member; read after the threads join).
class CountingCollective final : public Collective {
 public:
  explicit CountingCollective(std::unique_ptr<Collective> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }
  absl::Status AllReduceSum(float* data, size_t count) override {
    all_reduce_floats.push_back(static_cast<int64_t>(count));
    return inner_->AllReduceSum(data, count);
  }
  absl::Status AllToAllV(const float* send, const std::vector<size_t>& send_counts, float* recv,
                         const std::vector<size_t>& recv_counts) override {
    int64_t sent = 0;
    for (size_t c : send_counts) sent += static_cast<int64_t>(c);
    all_to_all_sent.push_back(sent);
    return inner_->AllToAllV(send, send_counts, recv, recv_counts);
  }
  void Reset() {
    all_reduce_floats.clear();
    all_to_all_sent.clear();
  }

  std::vector<int64_t> all_reduce_floats;  // per call, in call order
  std::vector<int64_t> all_to_all_sent;    // floats this member sent, per call

 private:
  std::unique_ptr<Collective> inner_;
};

// ep x tp members: member (i, r) is in EP group r (one per TP rank, members i) and TP group i
// (one per replica, members r). A group of size 1 is passed as null.
class Cluster {
 public:
  Cluster(const ModelDims& dims, int ep, int tp) : ep_(ep), tp_(tp) {
    for (int r = 0; ep > 1 && r < tp; ++r) {
      ep_groups_.push_back(std::make_unique<InProcGroup>(ep, "ep/tp-rank-" + std::to_string(r)));
    }
    for (int i = 0; tp > 1 && i < ep; ++i) {
      tp_groups_.push_back(std::make_unique<InProcGroup>(tp, "tp/replica-" + std::to_string(i)));
    }
    for (int i = 0; i < ep; ++i) {
      for (int r = 0; r < tp; ++r) {
        Member m;
        if (ep > 1) m.ep = std::make_unique<CountingCollective>(ep_groups_[r]->Member(i));
        if (tp > 1) m.tp = std::make_unique<CountingCollective>(tp_groups_[i]->Member(r));
        absl::StatusOr<std::unique_ptr<Layer>> layer =
            MakeParallelMoe(dims, kLayer, m.ep.get(), m.tp.get());
        EXPECT_TRUE(layer.ok()) << layer.status();
        if (layer.ok()) m.layer = std::move(*layer);
        members_.push_back(std::move(m));
      }
    }
  }

  struct Member {
    std::unique_ptr<CountingCollective> ep, tp;
    std::unique_ptr<Layer> layer;
  };
  Member& at(int i, int r) { return members_[static_cast<size_t>(i) * tp_ + r]; }
  int ep() const { return ep_; }
  int tp() const { return tp_; }
  InProcGroup& ep_group(int r) { return *ep_groups_[r]; }
  InProcGroup& tp_group(int i) { return *tp_groups_[i]; }

  // fn(i, r) on one thread per member.
  void Run(const std::function<void(int, int)>& fn) {
    std::vector<std::thread> threads;
    for (int i = 0; i < ep_; ++i) {
      for (int r = 0; r < tp_; ++r) threads.emplace_back(fn, i, r);
    }
    for (std::thread& t : threads) t.join();
  }

 private:
  const int ep_, tp_;
  std::vector<std::unique_ptr<InProcGroup>> ep_groups_, tp_groups_;
  std::vector<Member> members_;
};

enum class Op { kF, kB, kW };
struct Step {
  Op op;
  int mb;
};
// Every member runs the same order (the collectives of a group must match); W of a micro-batch
// may come long after its B, and micro-batches overtake each other.
const std::vector<Step> kInterleaved = {{Op::kF, 0}, {Op::kF, 1}, {Op::kB, 1},
                                        {Op::kF, 2}, {Op::kW, 1}, {Op::kB, 0},
                                        {Op::kB, 2}, {Op::kW, 2}, {Op::kW, 0}};
const std::vector<Step> kOne = {{Op::kF, 0}, {Op::kB, 0}, {Op::kW, 0}};
int MicroBatches(const std::vector<Step>& schedule) {
  int m = 0;
  for (const Step& s : schedule) m = std::max(m, s.mb + 1);
  return m;
}

// Replica i's micro-batch m (the same on its TP members, different between replicas).
struct Inputs {
  std::function<Tensor(int i, int m)> x;
  std::function<Tensor(int i, int m)> dy;
};
Inputs RandomInputs(const ModelDims& d) {
  return {[d](int i, int m) { return Random(Tokens(d), d.hidden, 100 + 10 * i + m); },
          [d](int i, int m) { return Random(Tokens(d), d.hidden, 500 + 10 * i + m); }};
}

// Overwrites the router of every member and of `reference` (it is replicated).
void SetRouter(Cluster& cluster, Layer& reference, const Tensor& router) {
  *reference.params()[1] = router;
  for (int i = 0; i < cluster.ep(); ++i) {
    for (int r = 0; r < cluster.tp(); ++r) *cluster.at(i, r).layer->params()[1] = router;
  }
}

// Runs `schedule` on every member and compares with the unsharded layer run on each replica's
// micro-batches (see the top comment).
void RunAndCompare(const ModelDims& dims, Cluster& cluster, MoeLayer& reference,
                   const std::vector<Step>& schedule, const Inputs& inputs) {
  const int ep = cluster.ep(), tp = cluster.tp(), mbs = MicroBatches(schedule);
  const MicroBatch mb;
  struct Result {
    std::vector<Tensor> y, dx;
  };
  std::vector<Result> results(static_cast<size_t>(ep) * tp);
  cluster.Run([&](int i, int r) {
    Layer& layer = *cluster.at(i, r).layer;
    Result& res = results[static_cast<size_t>(i) * tp + r];
    res.y.resize(mbs);
    res.dx.resize(mbs);
    std::vector<LayerContext> ctx(mbs);
    for (const Step& s : schedule) {
      if (s.op == Op::kF) res.y[s.mb] = layer.Forward(inputs.x(i, s.mb), mb, &ctx[s.mb]);
      if (s.op == Op::kB) res.dx[s.mb] = layer.BackwardInput(inputs.dy(i, s.mb), mb, &ctx[s.mb]);
      if (s.op == Op::kW) layer.BackwardWeight(mb, &ctx[s.mb]);
    }
  });

  reference.ZeroGrads();
  for (int i = 0; i < ep; ++i) {
    for (int m = 0; m < mbs; ++m) {
      LayerContext ctx;
      const Tensor y = reference.Forward(inputs.x(i, m), mb, &ctx);
      const Tensor dx = reference.BackwardInput(inputs.dy(i, m), mb, &ctx);
      reference.BackwardWeight(mb, &ctx);
      for (int r = 0; r < tp; ++r) {
        const Result& res = results[static_cast<size_t>(i) * tp + r];
        EXPECT_LE(RelativeError(res.y[m], y), kTolerance)
            << "member " << i << "," << r << " mb " << m;
        EXPECT_LE(RelativeError(res.dx[m], dx), kTolerance)
            << "member " << i << "," << r << " mb " << m;
      }
    }
  }

  std::vector<std::vector<std::vector<Tensor>>> grads(ep);
  for (int i = 0; i < ep; ++i) {
    for (int r = 0; r < tp; ++r) {
      Layer& layer = *cluster.at(i, r).layer;
      EXPECT_TRUE(layer.comm_status().ok()) << layer.comm_status();
      grads[i].push_back(Copy(layer.grads()));
      EXPECT_EQ(grads[i].back().size(),
                static_cast<size_t>(ParallelMoeReplicatedParams() + 3 * dims.experts / ep));
    }
  }
  ASSERT_TRUE(cluster.at(0, 0).layer->comm_status().ok());
  absl::StatusOr<std::vector<Tensor>> merged = MergeParallelMoeShards(dims, grads);
  ASSERT_TRUE(merged.ok()) << merged.status();
  const std::vector<Tensor> want = Copy(reference.grads());
  ASSERT_EQ(merged->size(), want.size());
  for (size_t j = ParallelMoeReplicatedParams(); j < want.size(); ++j) {
    EXPECT_LE(RelativeError((*merged)[j], want[j]), kTolerance) << "expert tensor " << j;
  }
  for (int j = 0; j < ParallelMoeReplicatedParams(); ++j) {
    Tensor sum = Tensor::Zero(want[j].rows(), want[j].cols());
    for (int i = 0; i < ep; ++i) {
      sum += grads[i][0][j];
      for (int r = 1; r < tp; ++r) {
        EXPECT_TRUE(SameBits(grads[i][r][j], grads[i][0][j]))
            << "replicated tensor " << j << " differs on TP member " << r << " of replica " << i;
      }
    }
    EXPECT_LE(RelativeError(sum, want[j]), kTolerance) << "replicated tensor " << j;
  }
}

struct Split {
  int experts, ep, tp;
};

class ParallelMoeTest : public ::testing::TestWithParam<Split> {};

TEST_P(ParallelMoeTest, MatchesTheUnshardedLayerWithInterleavedMicroBatches) {
  const Split split = GetParam();
  const ModelDims dims = Dims(split.experts);
  Cluster cluster(dims, split.ep, split.tp);
  MoeLayer reference(dims, kLayer);
  RunAndCompare(dims, cluster, reference, kInterleaved, RandomInputs(dims));
}

// Router zero but for expert 3, whose logit is 4 n[0]: tokens with x[0] < 0 pick experts 0 and
// 1 (tied zeros go to the lower index), those with x[0] > 0 pick 3 then 0. Replica 0's tokens
// all have x[0] < 0, replica 1's x[0] > 0: with 2 EP members, member 1 gets no rows from
// member 0 and expert 2 gets none at all.
TEST_P(ParallelMoeTest, UnbalancedRoutingLeavesMembersAndExpertsWithoutTokens) {
  const Split split = GetParam();
  const ModelDims dims = Dims(split.experts);
  Cluster cluster(dims, split.ep, split.tp);
  MoeLayer reference(dims, kLayer);
  Tensor router = Tensor::Zero(dims.hidden, dims.experts);
  router(0, 3) = 4.0f;
  SetRouter(cluster, reference, router);
  Inputs inputs = RandomInputs(dims);
  inputs.x = [dims](int i, int m) {
    Tensor x = Random(Tokens(dims), dims.hidden, 100 + 10 * i + m);
    x.col(0) = x.col(0).cwiseAbs().array() + 0.25f;
    if (i % 2 == 0) x.col(0) = -x.col(0);
    return x;
  };
  for (int i = 0; i < 2; ++i) {  // the routing is what the comment says
    LayerContext ctx;
    reference.Forward(inputs.x(i, 0), MicroBatch(), &ctx);
    for (size_t p = 0; p < ctx.saved_index[0].size(); ++p) {
      EXPECT_EQ(ctx.saved_index[0][p], i == 0 ? static_cast<int>(p % 2) : (p % 2 == 0 ? 3 : 0));
    }
  }
  RunAndCompare(dims, cluster, reference, kInterleaved, inputs);
}

TEST_P(ParallelMoeTest, RunsTheCollectivesItsCostModelStates) {
  const Split split = GetParam();
  const ModelDims dims = Dims(split.experts);
  Cluster cluster(dims, split.ep, split.tp);
  const ParallelMoeCollectives want = ParallelMoeCollectivesPerMicroBatch(dims, split.ep, split.tp);
  EXPECT_EQ(want.tokens, Tokens(dims));
  EXPECT_EQ(want.routed_floats, int64_t{Tokens(dims)} * dims.top_k * dims.hidden);
  const Inputs inputs = RandomInputs(dims);
  // Per op and member: the all-to-alls' sent floats and the all-reduces' sizes.
  struct Seen {
    std::vector<int64_t> ep_sent[3], tp_floats[3];
  };
  std::vector<Seen> seen(static_cast<size_t>(split.ep) * split.tp);
  cluster.Run([&](int i, int r) {
    Cluster::Member& member = cluster.at(i, r);
    Seen& s = seen[static_cast<size_t>(i) * split.tp + r];
    LayerContext ctx;
    for (int op = 0; op < 3; ++op) {
      if (member.ep) member.ep->Reset();
      if (member.tp) member.tp->Reset();
      if (op == 0) member.layer->Forward(inputs.x(i, 0), MicroBatch(), &ctx);
      if (op == 1) member.layer->BackwardInput(inputs.dy(i, 0), MicroBatch(), &ctx);
      if (op == 2) member.layer->BackwardWeight(MicroBatch(), &ctx);
      if (member.ep) s.ep_sent[op] = member.ep->all_to_all_sent;
      if (member.tp) s.tp_floats[op] = member.tp->all_reduce_floats;
    }
  });
  const ParallelMoeOpCollectives* ops[3] = {&want.forward, &want.backward_input,
                                            &want.backward_weight};
  for (int op = 0; op < 3; ++op) {
    int64_t out_total = 0, back_total = 0;
    for (const Seen& s : seen) {
      const size_t rows = ops[op]->ep_row_all_to_alls, counts = ops[op]->ep_count_all_to_alls;
      ASSERT_EQ(s.ep_sent[op].size(), counts + rows) << "op " << op;
      if (counts == 1) {
        EXPECT_EQ(s.ep_sent[op][0], dims.experts);
      }
      if (rows == 2) {
        EXPECT_EQ(s.ep_sent[op][counts], want.routed_floats) << "op " << op;
        out_total += s.ep_sent[op][counts];
        back_total += s.ep_sent[op][counts + 1];
      }
      ASSERT_EQ(s.tp_floats[op].size(), static_cast<size_t>(ops[op]->tp_all_reduces));
      for (int64_t f : s.tp_floats[op]) EXPECT_EQ(f, ops[op]->tp_all_reduce_floats);
    }
    EXPECT_EQ(back_total, out_total) << "what goes out to the experts comes back";
  }
  if (split.ep > 1) {
    EXPECT_EQ(want.forward.ep_row_all_to_alls, 2);
    EXPECT_EQ(want.backward_input.ep_row_all_to_alls, 2);
  }
  EXPECT_EQ(want.backward_weight.ep_row_all_to_alls + want.backward_weight.tp_all_reduces, 0);
}

TEST_P(ParallelMoeTest, ShardsStartAsTheUnshardedLayerAndRoundTripExactly) {
  const Split split = GetParam();
  const ModelDims dims = Dims(split.experts);
  Cluster cluster(dims, split.ep, split.tp);
  MoeLayer reference(dims, kLayer);
  // Perturb the whole so that no tensor is its initial value by accident.
  std::vector<Tensor> whole = Copy(reference.params());
  for (size_t j = 0; j < whole.size(); ++j) {
    whole[j] += Random(whole[j].rows(), whole[j].cols(), 900 + static_cast<int>(j));
  }
  const std::vector<Tensor> initial = Copy(reference.params());
  std::vector<std::vector<std::vector<Tensor>>> shards(split.ep);
  for (int i = 0; i < split.ep; ++i) {
    for (int r = 0; r < split.tp; ++r) {
      absl::StatusOr<std::vector<Tensor>> built =
          ParallelMoeShard(dims, initial, i, split.ep, r, split.tp);
      ASSERT_TRUE(built.ok()) << built.status();
      const std::vector<Tensor> have = Copy(cluster.at(i, r).layer->params());
      ASSERT_EQ(have.size(), built->size());
      for (size_t j = 0; j < have.size(); ++j) {
        EXPECT_TRUE(SameBits(have[j], (*built)[j])) << "member " << i << "," << r << " param " << j;
      }
      absl::StatusOr<std::vector<Tensor>> shard =
          ParallelMoeShard(dims, whole, i, split.ep, r, split.tp);
      ASSERT_TRUE(shard.ok()) << shard.status();
      shards[i].push_back(std::move(*shard));
    }
  }
  absl::StatusOr<std::vector<Tensor>> merged = MergeParallelMoeShards(dims, shards);
  ASSERT_TRUE(merged.ok()) << merged.status();
  ASSERT_EQ(merged->size(), whole.size());
  for (size_t j = 0; j < whole.size(); ++j) EXPECT_TRUE(SameBits((*merged)[j], whole[j])) << j;
}

INSTANTIATE_TEST_SUITE_P(Splits, ParallelMoeTest,
                         ::testing::Values(Split{4, 2, 1}, Split{8, 2, 1}, Split{4, 4, 1},
                                           Split{8, 4, 1}, Split{4, 1, 2}, Split{4, 2, 2},
                                           Split{8, 4, 2}),
                         [](const ::testing::TestParamInfo<Split>& info) {
                           return "experts" + std::to_string(info.param.experts) + "_ep" +
                                  std::to_string(info.param.ep) + "_tp" +
                                  std::to_string(info.param.tp);
                         });

TEST(ParallelMoeCheckTest, RefusesSplitsNamingTheField) {
  const ModelDims dims = Dims(4);
  absl::Status s = CheckParallelMoe(dims, 4, 3, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "expert parallelism: 3 does not divide experts = 4 (layer 4, moe)");
  s = CheckParallelMoe(dims, 4, 2, 5);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "tensor parallelism: 5 does not divide moe_ffn = 12 (layer 4, moe)");
  EXPECT_THAT(CheckParallelMoe(dims, 4, 0, 1).message(), HasSubstr("ep must be >= 1, got 0"));
  EXPECT_THAT(CheckParallelMoe(dims, 4, 1, -1).message(), HasSubstr("tp must be >= 1, got -1"));
  ModelDims bad = dims;
  bad.top_k = 5;
  EXPECT_THAT(CheckParallelMoe(bad, 4, 1, 1).message(), HasSubstr("dims.top_k"));
  EXPECT_TRUE(CheckParallelMoe(dims, 4, 4, 3).ok());

  InProcGroup three(3, "ep/three");
  std::unique_ptr<Collective> member = three.Member(0);
  absl::StatusOr<std::unique_ptr<Layer>> layer = MakeParallelMoe(dims, 4, member.get(), nullptr);
  EXPECT_EQ(layer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(layer.status().message(),
            "expert parallelism: 3 does not divide experts = 4 (layer 4, moe)");
  EXPECT_EQ(MakeParallelMoe(dims, -1, nullptr, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ParallelMoeCheckTest, ShardAndMergeRefuseWrongShapesAndRanks) {
  const ModelDims dims = Dims(4);
  MoeLayer reference(dims, kLayer);
  const std::vector<Tensor> whole = Copy(reference.params());
  EXPECT_THAT(ParallelMoeShard(dims, whole, 2, 2, 0, 1).status().message(),
              HasSubstr("member [2][0] is outside 2 x 1"));
  std::vector<Tensor> short_whole(whole.begin(), whole.end() - 1);
  EXPECT_THAT(ParallelMoeShard(dims, short_whole, 0, 2, 0, 1).status().message(),
              HasSubstr("has 13 tensors, expected 14"));

  std::vector<std::vector<std::vector<Tensor>>> shards(2);
  for (int i = 0; i < 2; ++i) shards[i].push_back(*ParallelMoeShard(dims, whole, i, 2, 0, 1));
  shards[1][0][2] = Tensor::Zero(3, 3);
  absl::Status s = MergeParallelMoeShards(dims, shards).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("member [1][0] tensor 2 (expert 2 W1) is 3x3, expected 16x12"));
  shards.push_back(shards[0]);
  EXPECT_THAT(MergeParallelMoeShards(dims, shards).status().message(),
              HasSubstr("expert parallelism: 3 does not divide experts = 4"));
}

// Aborted groups: every member's comm_status() names the group; the ops still return tensors
// of the right shape, and the first failure is the one kept.
TEST(ParallelMoeFailureTest, AbortedGroupShowsInCommStatus) {
  for (const Split split : {Split{4, 2, 1}, Split{4, 1, 2}, Split{4, 2, 2}}) {
    const ModelDims dims = Dims(split.experts);
    Cluster cluster(dims, split.ep, split.tp);
    const bool abort_ep = split.ep > 1;
    if (abort_ep) {
      for (int r = 0; r < split.tp; ++r) cluster.ep_group(r).Abort();
    } else {
      for (int i = 0; i < split.ep; ++i) cluster.tp_group(i).Abort();
    }
    const Inputs inputs = RandomInputs(dims);
    cluster.Run([&](int i, int r) {
      Layer& layer = *cluster.at(i, r).layer;
      LayerContext ctx;
      const Tensor y = layer.Forward(inputs.x(i, 0), MicroBatch(), &ctx);
      EXPECT_EQ(y.rows(), Tokens(dims));
      EXPECT_EQ(y.cols(), dims.hidden);
      const absl::Status first = layer.comm_status();
      const Tensor dx = layer.BackwardInput(inputs.dy(i, 0), MicroBatch(), &ctx);
      EXPECT_EQ(dx.rows(), Tokens(dims));
      layer.BackwardWeight(MicroBatch(), &ctx);
      EXPECT_EQ(layer.comm_status(), first);
    });
    for (int i = 0; i < split.ep; ++i) {
      for (int r = 0; r < split.tp; ++r) {
        const absl::Status s = cluster.at(i, r).layer->comm_status();
        EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
        EXPECT_THAT(s.message(), HasSubstr(abort_ep ? "ep/tp-rank-" : "tp/replica-"));
      }
    }
  }
}

TEST(ParallelMoeCostTest, NoCollectivesWithoutParallelism) {
  const ParallelMoeCollectives c = ParallelMoeCollectivesPerMicroBatch(Dims(4), 1, 1);
  for (const ParallelMoeOpCollectives* op : {&c.forward, &c.backward_input, &c.backward_weight}) {
    EXPECT_EQ(op->ep_count_all_to_alls + op->ep_row_all_to_alls + op->tp_all_reduces, 0);
  }
  const ParallelMoeCollectives tp = ParallelMoeCollectivesPerMicroBatch(Dims(4), 1, 2);
  EXPECT_EQ(tp.forward.tp_all_reduce_floats, 16 * 16);
  EXPECT_EQ(tp.backward_input.tp_all_reduce_floats, 16 * (16 + 2));
}

}  // namespace
}  // namespace octopipe::executor
