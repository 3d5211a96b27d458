// CostModel: turns (layer, training options, device hardware) into seconds and bytes for one
// micro-batch.
//
// Sources, in order of trust: measured costs in the layer (each present field overrides), then
// analytic formulas (docs/architecture.md, "Cost model"): FLOPs / (peak * efficiency),
// with one efficiency factor per layer kind (calibration later fits them per device). Linear
// (weight GEMM) FLOPs cost the same again for the input gradient (B) and for the weight
// gradient (W); FLOPs without weights (attention core, scans) cost twice in B and nothing in W.
// Stateless apart from its options; thread-safe.
#ifndef OCTOPIPE_CORE_COST_MODEL_H_
#define OCTOPIPE_CORE_COST_MODEL_H_

#include <array>

#include "core/cluster.h"
#include "core/model_graph.h"

namespace octopipe {

struct LayerCost {
  double forward_s = 0;         // F
  double backward_input_s = 0;  // B: gradient w.r.t. the input
  double weight_grad_s = 0;     // W: gradient w.r.t. the weights
  double recompute_s = 0;       // R: re-materialising activations under full recompute (= F)
  // Activation bytes held from F until the backward; `activation_bytes_w` of them (the inputs
  // of weight GEMMs) are still needed by W, the rest is freed by B.
  double activation_bytes = 0;
  double activation_bytes_w = 0;
  double input_bytes = 0;   // the layer input (all that full recompute keeps)
  double output_bytes = 0;  // activation sent to the next layer (and its gradient back)
  double param_count = 0;   // parameters on one tensor-parallel rank
  double param_bytes = 0;   // weights only
  double static_bytes = 0;  // weights + gradients + optimizer state
  double forward_flops = 0; // on one tensor-parallel rank
};

// Seconds of tensor- and expert-parallel communication one layer adds to its forward (F) and
// input-gradient (B) ops for one micro-batch on one rank; W communicates nothing (the
// data-parallel gradient reduction is an iteration-level cost, see tuner/layout.h). Full
// recompute repeats the forward's communication.
struct LayerComm {
  double forward_s = 0;
  double backward_input_s = 0;
  // The expert-parallel all-to-alls' share of the two (the rest is TP's all-reduces).
  double ep_forward_s = 0;
  double ep_backward_input_s = 0;
};

// The links a pipeline device's collectives use: its TP group sits inside one node (`intra`);
// its EP group's ranks are `training.ep_ranks_per_node` per node on `intra`, the rest across
// `inter`.
struct CommLinks {
  LinkSpec intra;
  LinkSpec inter;
  int devices_per_node = 1;  // resolves ep_ranks_per_node == 0 (as many as fit)
};

// Ring all-reduce of `bytes` over `group` ranks on one link (Thakur et al. 2005; NCCL's ring):
// 2(n-1) steps, each moving bytes/n per rank: 2(n-1)·latency + 2(n-1)/n · bytes / bandwidth,
// at the link's all-reduce bus bandwidth and step latency where it gives them
// (LinkSpec::allreduce_bandwidth, allreduce_latency_s).
// The same volume as reduce-scatter + all-gather (sequence parallelism, ZeRO). 0 for n <= 1.
double RingAllReduceSeconds(double bytes, int group, const LinkSpec& link);

// The same all-reduce started at `start` by ranks that compute until `busy_until` (the last of
// them): at the overlapped bus bandwidth and step latency while they compute
// (LinkSpec::allreduce_overlapped_*, each 0 = the idle one), at the idle rate after. The part
// done by `busy_until` is (busy_until - start) / the overlapped time; the rest takes its share
// of the idle time. The overlapped time is at least the idle one. Equals RingAllReduceSeconds
// when start >= busy_until or the link has no overlapped figures.
double OverlappedRingAllReduceSeconds(double bytes, int group, const LinkSpec& link, double start,
                                      double busy_until);

// All-to-all where each of `group` ranks holds `bytes` destined evenly to every rank (itself
// included, so bytes/n stay local), `ranks_in_node` of them (itself included) sharing its node:
// pairwise exchange with the node's peers over `intra` and with the others over `inter`, the
// two link classes served at once: max over the classes of peers·(latency + bytes/n / bandwidth).
// 0 for n <= 1.
double AllToAllSeconds(double bytes, int group, int ranks_in_node, const LinkSpec& intra,
                       const LinkSpec& inter);

// A MoE layer's dispatch (or combine) all-to-all: each of `group` ranks (`ranks_in_node` of
// them per node, itself included) sends `top_k` copies of its tokens (`copy_bytes`: one copy of
// all of them) to experts spread evenly over the group. Without a node limit (`max_nodes` 0)
// every copy travels on its own: AllToAllSeconds(top_k * copy_bytes). With node-limited routing
// (DeepSeek-V3: a token's experts lie on at most `max_nodes` nodes) a token crosses the network
// once per destination node — its top_k experts, uniform over m = min(max_nodes, nodes) nodes,
// lie on d = m (1 - (1 - 1/m)^top_k) distinct ones, d x (nodes - 1) / nodes of them remote,
// each reached over `inter` at the same-index GPU — and is forwarded inside it over `intra`,
// which also carries the copies for the sender's own node. The network side is timed as the
// kernels that do it are measured: all d copies, the own node's included, at `inter`'s
// bandwidth, capped at top_k x (nodes - 1) / nodes copies (every remote copy on its own;
// cost_model.cc). Max of the two link classes.
double ExpertAllToAllSeconds(double copy_bytes, int top_k, int max_nodes, int group,
                             int ranks_in_node, const LinkSpec& intra, const LinkSpec& inter);

struct CostModelOptions {
  // Achieved fraction of peak FLOP/s per layer kind (indexed by LayerKind); where the numbers
  // come from: cost_model.cc, "Efficiencies".
  std::array<double, kNumLayerKinds> efficiency = {
      0.30,  // embedding (memory-bound; see cost_model.cc)
      0.54,  // attention
      0.54,  // mla_attention
      0.36,  // mamba
      0.42,  // mamba2
      0.66,  // moe (its expert GEMMs; routing and narrow experts as HBM traffic)
      0.66,  // mlp
      0.54,  // vision_block
      0.60,  // head
  };
  // Achieved fraction of the HBM bandwidth by streaming kernels (a materialized attention
  // core's softmax, dropout and score reads, see cost_model.cc). 0.88: a read kernel measured
  // at 88% of an A100's peak in Nsight Compute, and about 90% for the best kernels NVIDIA
  // showed — no kernel reaches the data-sheet figure.
  double memory_efficiency = 0.88;
  // FP8 weight GEMMs' achieved fraction of the FP8 peak relative to their kind's `efficiency`
  // (its achieved fraction of the BF16 peak): they run at peak_flops_fp8 x efficiency x this.
  // The data sheets' FP8 peak is twice the BF16 one; what FP8 training gets from it is less:
  // where the number comes from, cost_model.cc, "Efficiencies".
  double fp8_gemm_efficiency = 0.73;
  // The same for a MoE layer's routed experts (grouped GEMMs, quantized per expert): fitted
  // to published MoE layer measurements, see cost_model.cc, "Efficiencies".
  double fp8_expert_gemm_efficiency = 0.61;
};

class CostModel {
 public:
  explicit CostModel(CostModelOptions options = {});

  LayerCost Cost(const Layer& layer, const TrainingOptions& training,
                 const HardwareSpec& hardware) const;

  // TP and EP communication of one layer (Megatron-LM's f/g operators): with TP degree t > 1,
  // each layer whose weight GEMMs are split all-reduces its b·s·h output in F (the embedding,
  // and the vision block twice: attention and MLP) and its input gradient in B (not the
  // embedding: its input is token ids) over the node's link. With EP degree > 1, a MoE layer
  // dispatches its tokens' top_k copies (b·s·top_k·h/t elements per rank) to their experts and
  // combines them back: two all-to-alls in F, and their two gradients in B. Measured profiles
  // are per-rank compute only, so this is added on top of them by the problem builder.
  LayerComm Comm(const Layer& layer, const TrainingOptions& training,
                 const CommLinks& links) const;

  // Forward FLOPs of the whole layer for one micro-batch (before dividing by TP), split into
  // FLOPs of weight GEMMs and FLOPs without weights. Exposed for tests against the formulas.
  struct Flops {
    double linear = 0;
    double nonlinear = 0;
    double total() const { return linear + nonlinear; }
  };
  static Flops ForwardFlops(const Layer& layer, const TrainingOptions& training);

  // Parameter count of the whole layer (before dividing by TP or EP).
  static double ParamCount(const Layer& layer);

  const CostModelOptions& options() const { return options_; }

 private:
  CostModelOptions options_;
};

}  // namespace octopipe

#endif  // OCTOPIPE_CORE_COST_MODEL_H_
