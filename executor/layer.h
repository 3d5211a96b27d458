// The reference model's layers, with the backward split the executor schedules: F (forward),
// B (gradient w.r.t. the input) and W (gradient w.r.t. the weights).
//
// Contract:
//  - Forward(x) -> y stores in `ctx` what B and W will need. The embedding ignores `x` and reads
//    the micro-batch's tokens; the head returns a 1x1 tensor holding the mean cross-entropy of
//    the micro-batch against its targets.
//  - BackwardInput(dy) -> dx uses and may extend `ctx` (e.g. keeps dy, or intermediate output
//    gradients, for W). For the head, `dy` is the 1x1 gradient of the loss (the executor passes
//    1/M to average over M micro-batches). The embedding returns an empty dx.
//  - BackwardWeight() accumulates (+=) into the layer's gradient buffers using only `ctx`, then
//    `ctx` may be dropped. F, B, W of different micro-batches may interleave in any order the
//    data dependencies allow; each micro-batch has its own ctx.
//  - Parameters are initialised deterministically from (seed, layer index), so a layer built
//    in any process is bit-identical to the same layer built in another.
// Layers are not thread-safe: one rank runs one layer's ops sequentially.
#ifndef OCTOPIPE_EXECUTOR_LAYER_H_
#define OCTOPIPE_EXECUTOR_LAYER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "executor/tensor.h"

namespace octopipe::executor {

// Per micro-batch saved state of one layer: any tensors the layer chooses.
struct LayerContext {
  std::vector<Tensor> saved;
  std::vector<std::vector<int32_t>> saved_index;  // e.g. MoE routing, top-k choices
  void Clear() {
    saved.clear();
    saved_index.clear();
  }
};

struct ModelDims {
  int vocab = 64;
  int hidden = 32;
  int heads = 4;           // attention heads (hidden % heads == 0)
  int ffn = 64;            // SwiGLU MLP inner width
  int experts = 4;         // MoE experts
  int top_k = 2;           // MoE experts per token
  int moe_ffn = 32;        // expert inner width
  int state = 8;           // selective-scan state size N
  int expand = 2;          // selective-scan inner width = expand * hidden
  int seq_len = 16;
  int batch = 1;           // sequences per micro-batch
  uint64_t seed = 1;
};

class Layer {
 public:
  virtual ~Layer() = default;
  virtual absl::string_view kind() const = 0;  // "embedding", "attention", "mamba", ...

  virtual Tensor Forward(const Tensor& x, const MicroBatch& mb, LayerContext* ctx) const = 0;
  virtual Tensor BackwardInput(const Tensor& dy, const MicroBatch& mb,
                               LayerContext* ctx) const = 0;
  virtual void BackwardWeight(const MicroBatch& mb, LayerContext* ctx) = 0;

  // Parameters and their gradient accumulators, same order and shapes.
  virtual std::vector<Tensor*> params() = 0;
  virtual std::vector<Tensor*> grads() = 0;
  void ZeroGrads() {
    for (Tensor* g : grads()) g->setZero();
  }

  // A layer sharded over a collective group (tensor or expert parallelism) communicates inside
  // Forward / BackwardInput / BackwardWeight, which return no status: it records its first
  // communication failure here instead (and computes on with whatever it has), and the engine
  // checks after every op. Other layers are always OK.
  virtual absl::Status comm_status() const { return absl::OkStatus(); }
};

// Layer kinds by pattern letter (Nemotron-H style): 'M' selective scan (Mamba-like), '*'
// causal multi-head attention, '-' SwiGLU MLP, 'E' top-k MoE; plus "embedding" and "head".
// Each non-embedding layer is pre-norm (RMSNorm) with a residual connection except the head.
absl::StatusOr<std::unique_ptr<Layer>> MakeLayer(absl::string_view kind, const ModelDims& dims,
                                                 int layer_index);

// The layer kinds of a model: embedding, one per pattern letter, head. kInvalidArgument
// naming the bad letter.
absl::StatusOr<std::vector<std::string>> LayerKindsFromPattern(absl::string_view pattern);

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_LAYER_H_
