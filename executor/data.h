// Synthetic language data for the reference model: deterministic, identical in every process,
// learnable. Each sequence follows a fixed affine "bigram" rule with noise:
//   x_0 uniform in [0, vocab);  x_{i+1} = (kDataMultiplier * x_i + kDataOffset) % vocab with
//   probability 1 - kDataNoise, else uniform.
// tokens = x_0 .. x_{s-1}, targets = x_1 .. x_s, so even a bigram model can bring the loss from
// ln(vocab) down towards the noise floor. Sequence j of micro-batch m of iteration it draws from
// the SplitMix64 stream of (seed, it, m, j) alone: any rank can build any micro-batch.
#ifndef OCTOPIPE_EXECUTOR_DATA_H_
#define OCTOPIPE_EXECUTOR_DATA_H_

#include <cstdint>
#include <vector>

#include "executor/layer.h"
#include "executor/tensor.h"

namespace octopipe::executor {

inline constexpr int kDataMultiplier = 5;
inline constexpr int kDataOffset = 3;
inline constexpr double kDataNoise = 0.125;  // exactly 1 draw in 8 is uniform

// dims.batch sequences of dims.seq_len tokens over dims.vocab; all three must be > 0 (a
// violated precondition aborts with a message naming them).
MicroBatch MakeMicroBatch(const ModelDims& dims, uint64_t seed, int iteration, int microbatch);

// Micro-batches 0 .. count-1 of `iteration`.
std::vector<MicroBatch> MakeMicroBatches(const ModelDims& dims, uint64_t seed, int iteration,
                                         int count);

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_DATA_H_
