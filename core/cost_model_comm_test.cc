// Pins the cost model's collectives to their formulas (cost_model.h: ring all-reduce,
// all-to-all, the MoE dispatch with node-limited routing) and CostModel::Comm's TP and EP
// communication per layer, with numbers computed by hand.
#include <algorithm>
#include <cmath>

#include "core/cost_model.h"
#include "core/cost_model_test_layers.h"
#include "gtest/gtest.h"

namespace octopipe {
namespace {

using cost_model_test::Training;
using cost_model_test::Llama8bAttention;
using cost_model_test::Llama8bMlp;
using cost_model_test::DeepSeekV3Moe;
using cost_model_test::kNvlink;
using cost_model_test::kIb;

TEST(CollectiveTest, RingAllReduceOfOneLlamaActivationOverEightGpus) {
  // b·s·h·2 = 4096·4096·2 bytes; 2·7·3 us + 2·7/8 · 33554432 / 450e9.
  EXPECT_NEAR(1.7248945777777777e-4, RingAllReduceSeconds(4096.0 * 4096 * 2, 8, kNvlink), 1e-12);
  EXPECT_EQ(0, RingAllReduceSeconds(1e9, 1, kNvlink));
}

TEST(CollectiveTest, RingAllReduceRunsAtTheLinksAllReduceBusBandwidthWhereItHasOne) {
  // The same all-reduce at a measured bus bandwidth of 360 GB/s (nccl-tests' busbw on the
  // 450 GB/s link): 2·7·3 us + 2·7/8 · 33554432 / 360e9; the latency is the link's.
  LinkSpec measured = kNvlink;
  measured.allreduce_bandwidth = 360e9;
  EXPECT_NEAR(4.2e-5 + 1.75 * 33554432 / 360e9,
              RingAllReduceSeconds(4096.0 * 4096 * 2, 8, measured), 1e-12);
  // Two members move the whole buffer once: 2·3 us + 1e6 / 0.5e9 = 2.006 ms.
  measured.allreduce_bandwidth = 0.5e9;
  EXPECT_NEAR(2.006e-3, RingAllReduceSeconds(1e6, 2, measured), 1e-12);
  // A measured step latency replaces the link's: 2·50 us + 2 ms.
  measured.allreduce_latency_s = 50e-6;
  EXPECT_NEAR(2.1e-3, RingAllReduceSeconds(1e6, 2, measured), 1e-12);
}

TEST(CollectiveTest, AllReduceBesideComputeRunsAtTheOverlappedRateUntilTheComputeEnds) {
  // Two members, 1e6 bytes. Idle: 2·50 us + 1e6 / 0.5e9 = 2.1 ms. Beside compute: 2·100 us +
  // 1e6 / 0.25e9 = 4.2 ms.
  LinkSpec link = kNvlink;
  link.allreduce_bandwidth = 0.5e9;
  link.allreduce_latency_s = 50e-6;
  const double idle = 2.1e-3, busy = 4.2e-3;
  // No overlapped figures: the idle time wherever it starts.
  EXPECT_NEAR(idle, OverlappedRingAllReduceSeconds(1e6, 2, link, 0, 1), 1e-12);
  link.allreduce_overlapped_bandwidth = 0.25e9;
  link.allreduce_overlapped_latency_s = 100e-6;
  // Started after the compute ended: idle.
  EXPECT_NEAR(idle, OverlappedRingAllReduceSeconds(1e6, 2, link, 1.0, 1.0), 1e-12);
  EXPECT_NEAR(idle, OverlappedRingAllReduceSeconds(1e6, 2, link, 2.0, 1.0), 1e-12);
  // Done before the compute ends: all of it beside compute.
  EXPECT_NEAR(busy, OverlappedRingAllReduceSeconds(1e6, 2, link, 0, 1.0), 1e-12);
  // The compute ends 1.05 ms in: a quarter done at the overlapped rate, the other three
  // quarters at the idle one: 1.05 + 0.75 · 2.1 = 2.625 ms.
  EXPECT_NEAR(2.625e-3, OverlappedRingAllReduceSeconds(1e6, 2, link, 1.0, 1.0 + 1.05e-3),
              1e-12);
  // Only the bandwidth given: the idle step latency stays (2·50 us + 4 ms).
  link.allreduce_overlapped_latency_s = 0;
  EXPECT_NEAR(4.1e-3, OverlappedRingAllReduceSeconds(1e6, 2, link, 0, 1.0), 1e-12);
  // Figures faster than idle (a noisy fit) are not taken: never below the idle time.
  link.allreduce_overlapped_bandwidth = 1e9;
  link.allreduce_overlapped_latency_s = 10e-6;
  EXPECT_NEAR(idle, OverlappedRingAllReduceSeconds(1e6, 2, link, 0, 1.0), 1e-12);
  EXPECT_EQ(0, OverlappedRingAllReduceSeconds(1e6, 1, link, 0, 1.0));
}

TEST(CollectiveTest, AllToAllOverEightNodesIsBoundByTheInterNodeShare) {
  // DeepSeek-V3 dispatch: 4096 tokens · top-8 · 7168 · 2 bytes over EP 64, 8 ranks per node.
  // Chunk V/64 = 7340032 bytes. NVLink: 7 peers, 7·3 us + 7·chunk/450e9 = 0.13518 ms;
  // IB: 56 peers, 56·5 us + 56·chunk/50e9 = 8.50084 ms; the two are served at once: the max.
  const double v = 4096.0 * 8 * 7168 * 2;
  EXPECT_NEAR(8.50083584e-3, AllToAllSeconds(v, 64, 8, kNvlink, kIb), 1e-12);
  // All 8 ranks in one node: only the NVLink share.
  EXPECT_NEAR(7 * 3e-6 + 7 * (v / 8) / 450e9, AllToAllSeconds(v, 8, 8, kNvlink, kIb), 1e-12);
  EXPECT_EQ(0, AllToAllSeconds(v, 1, 1, kNvlink, kIb));
}


TEST(CommTest, ExpertParallelMoeLayerPaysTwoAllToAllsInFAndTwoInB) {
  TrainingOptions t = Training();
  t.ep_degree = 64;
  t.ep_ranks_per_node = 8;
  const LayerComm c = CostModel().Comm(DeepSeekV3Moe(), t, CommLinks{kNvlink, kIb, 8});
  EXPECT_NEAR(2 * 8.50083584e-3, c.forward_s, 1e-12);
  EXPECT_NEAR(2 * 8.50083584e-3, c.backward_input_s, 1e-12);
  // Not a MoE layer, or no EP: nothing.
  EXPECT_EQ(0, CostModel().Comm(Llama8bMlp(), t, CommLinks{kNvlink, kIb, 8}).forward_s);
  t.ep_degree = 1;
  t.ep_ranks_per_node = 0;
  EXPECT_EQ(0, CostModel().Comm(DeepSeekV3Moe(), t, CommLinks{kNvlink, kIb, 8}).forward_s);
}

// DeepSeek-V3's node-limited routing (at most 4 nodes per token): over EP 64 on 8 nodes of 8 a
// token's 8 experts lie on d = 4 (1 - (3/4)^8) = 3.60 of its 4 nodes, d x 7/8 of them remote,
// against 8 x 56/64 = 7 copies without the limit; the kernels are timed at the NIC's rate over
// all d destination nodes' copies (the own node's included, as they are measured), about
// 0.51 of the unlimited exchange's network time. NVLink carries the own node's copies and
// forwards the arrivals. With no limit the all-to-all is AllToAllSeconds of all top_k copies.
TEST(CommTest, NodeLimitedRoutingCrossesTheNetworkOncePerDestinationNode) {
  const double copy = 4096.0 * 7168 * 2;  // one copy of a micro-batch's tokens, BF16
  EXPECT_DOUBLE_EQ(ExpertAllToAllSeconds(copy, 8, 0, 64, 8, kNvlink, kIb),
                   AllToAllSeconds(8 * copy, 64, 8, kNvlink, kIb));
  const double d4 = 4 * (1 - std::pow(0.75, 8));  // 3.60
  const double inter = 7 * 5e-6 + d4 * copy / 50e9;
  const double intra = 7 * 3e-6 + (8.0 * 7 / 64 + d4 * 7 / 8) * copy / 450e9;
  EXPECT_DOUBLE_EQ(ExpertAllToAllSeconds(copy, 8, 4, 64, 8, kNvlink, kIb), std::max(inter, intra));
  // About half (the unlimited exchange also pays 56 peers' latencies instead of 7).
  EXPECT_NEAR(ExpertAllToAllSeconds(copy, 8, 4, 64, 8, kNvlink, kIb) /
                  ExpertAllToAllSeconds(copy, 8, 0, 64, 8, kNvlink, kIb),
              0.51, 0.02);
  // A limit of at least the nodes spanned: the 8 experts lie on 8 (1 - (7/8)^8) = 5.25 of the
  // 8 nodes, all timed at the NIC's rate: still under the 7 remote copies of every-copy
  // sending.
  const double d8 = 8 * (1 - std::pow(7.0 / 8, 8));
  EXPECT_DOUBLE_EQ(ExpertAllToAllSeconds(copy, 8, 8, 64, 8, kNvlink, kIb),
                   std::max(7 * 5e-6 + d8 * copy / 50e9,
                            7 * 3e-6 + (8.0 * 7 / 64 + d8 * 7 / 8) * copy / 450e9));
  EXPECT_EQ(ExpertAllToAllSeconds(copy, 8, 4, 1, 8, kNvlink, kIb), 0);
}

// The flex dispatcher (DeepEP, HybridEP) sends a token once per destination node whatever the
// routing: Qwen3-30B-A3B's top-8 of 128 experts over EP 16 on 2 nodes of 8 crosses the network
// d x 1/2 times per token, d = 2 (1 - (1/2)^8) = 1.99 destination nodes, instead of 8 x 8/16 = 4
// (alltoall, NCCL's all-to-all), timed as all d copies at the NIC's rate (the kernels' measured
// throughput).
TEST(CommTest, FlexDispatcherCrossesTheNetworkOncePerDestinationNode) {
  TrainingOptions t = Training();
  t.ep_degree = 16;
  t.ep_ranks_per_node = 8;
  Layer moe = DeepSeekV3Moe();
  moe.dims.hidden = 2048;
  moe.dims.top_k = 8;
  const CommLinks links{kNvlink, kIb, 8};
  const double copy = 4096.0 * 2048 * 2;
  const LayerComm alltoall = CostModel().Comm(moe, t, links);
  EXPECT_DOUBLE_EQ(alltoall.forward_s, 2 * AllToAllSeconds(8 * copy, 16, 8, kNvlink, kIb));
  t.moe_dispatcher = MoeDispatcher::kFlex;
  const LayerComm flex = CostModel().Comm(moe, t, links);
  const double d = 2 * (1 - std::pow(0.5, 8));
  const double inter = 1 * 5e-6 + d * copy / 50e9;
  const double intra = 7 * 3e-6 + (8.0 * 7 / 16 + d / 2 * 7 / 8) * copy / 450e9;
  EXPECT_DOUBLE_EQ(flex.forward_s, 2 * std::max(inter, intra));
  EXPECT_DOUBLE_EQ(flex.backward_input_s, flex.forward_s);
  EXPECT_NEAR(alltoall.forward_s / flex.forward_s, 2.05, 0.02);  // and 8 peers' latencies, not 1
  // A limit the model gives is kept as it is.
  moe.dims.max_nodes_per_token = 1;
  EXPECT_DOUBLE_EQ(CostModel().Comm(moe, t, links).forward_s,
                   2 * ExpertAllToAllSeconds(copy, 8, 1, 16, 8, kNvlink, kIb));
  // Within one node there is no network to save: the same as alltoall.
  t.ep_degree = 8;
  moe.dims.max_nodes_per_token = 0;
  const double in_node = CostModel().Comm(moe, t, links).forward_s;
  t.moe_dispatcher = MoeDispatcher::kAllToAll;
  EXPECT_NEAR(in_node, CostModel().Comm(moe, t, links).forward_s, 1e-12);
}

// Deduplicating never costs more than sending every copy: with few experts per token (top-2,
// Mixtral's routing) a token's copies mostly land on distinct nodes anyway, and the timing of
// all destination nodes' copies at the NIC's rate would exceed every-copy sending's remote
// bytes; the network side is capped there. Top-2 over 2 nodes: 1.5 destination nodes timed,
// capped at 1 remote copy.
TEST(CommTest, DeduplicatingNeverCostsMoreThanSendingEveryCopy) {
  const double copy = 4096.0 * 4096 * 2;
  for (int top_k : {1, 2, 4, 8}) {
    for (int nodes : {2, 4, 8, 16}) {
      const int group = 8 * nodes;
      EXPECT_LE(ExpertAllToAllSeconds(copy, top_k, nodes, group, 8, kNvlink, kIb),
                ExpertAllToAllSeconds(copy, top_k, 0, group, 8, kNvlink, kIb) * (1 + 1e-12))
          << "top_k " << top_k << ", nodes " << nodes;
    }
  }
  EXPECT_DOUBLE_EQ(ExpertAllToAllSeconds(copy, 2, 2, 16, 8, kNvlink, kIb),
                   std::max(1 * 5e-6 + 1 * copy / 50e9,
                            7 * 3e-6 + (2.0 * 7 / 16 + 1.5 / 2 * 7 / 8) * copy / 450e9));
}

// FP8 training dispatches the expert GEMMs' FP8 inputs: the dispatch moves half the bytes, the
// combine and both gradients stay BF16.
TEST(CommTest, Fp8TrainingDispatchesInOneByteAndCombinesInTwo) {
  TrainingOptions t = Training();
  t.ep_degree = 64;
  t.ep_ranks_per_node = 8;
  Layer moe = DeepSeekV3Moe();
  moe.dims.max_nodes_per_token = 4;
  const CommLinks links{kNvlink, kIb, 8};
  const LayerComm bf16 = CostModel().Comm(moe, t, links);
  t.precision = Precision::kFp8;
  const LayerComm fp8 = CostModel().Comm(moe, t, links);
  const double copy = 4096.0 * 7168;
  EXPECT_DOUBLE_EQ(fp8.forward_s, ExpertAllToAllSeconds(copy, 8, 4, 64, 8, kNvlink, kIb) +
                                      ExpertAllToAllSeconds(2 * copy, 8, 4, 64, 8, kNvlink, kIb));
  EXPECT_LT(fp8.forward_s, bf16.forward_s);
  EXPECT_DOUBLE_EQ(fp8.backward_input_s, bf16.backward_input_s);
}

TEST(CommTest, EpRanksPerNodeDefaultsToWhatTheNodeHolds) {
  TrainingOptions t = Training();
  t.ep_degree = 8;  // 0 ranks per node: min(8, 8 devices) = all on NVLink
  const double v = 4096.0 * 8 * 7168 * 2;
  const LayerComm c = CostModel().Comm(DeepSeekV3Moe(), t, CommLinks{kNvlink, kIb, 8});
  EXPECT_NEAR(2 * (7 * 3e-6 + 7 * (v / 8) / 450e9), c.forward_s, 1e-12);
}

TEST(CommTest, TensorParallelAllReducesFollowMegatronsFAndGOperators) {
  TrainingOptions t = Training();
  t.tp_degree = 8;
  const CommLinks links{kNvlink, kIb, 8};
  const double one = 1.7248945777777777e-4;  // b·s·h·2 bytes over 8 ranks, as above
  const LayerComm attn = CostModel().Comm(Llama8bAttention(), t, links);
  EXPECT_NEAR(one, attn.forward_s, 1e-12);
  EXPECT_NEAR(one, attn.backward_input_s, 1e-12);
  Layer emb;
  emb.kind = LayerKind::kEmbedding;
  emb.dims.hidden = 4096;
  emb.dims.vocab = 128256;
  const LayerComm e = CostModel().Comm(emb, t, links);
  EXPECT_NEAR(one, e.forward_s, 1e-12);  // vocab-parallel lookup: all-reduce of the output
  EXPECT_EQ(0, e.backward_input_s);      // no input gradient (token ids)
  Layer head = emb;
  head.kind = LayerKind::kHead;
  const LayerComm h = CostModel().Comm(head, t, links);
  EXPECT_EQ(0, h.forward_s);  // column-parallel logits: identity forward
  EXPECT_NEAR(one, h.backward_input_s, 1e-12);
  t.tp_degree = 1;
  EXPECT_EQ(0, CostModel().Comm(Llama8bAttention(), t, links).forward_s);
}

}  // namespace
}  // namespace octopipe
