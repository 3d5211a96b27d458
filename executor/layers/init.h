// Deterministic, portable parameter initialisation and synthetic-data randomness.
//
// Every random number the reference model uses comes from SplitMix64 streams keyed by plain
// integers (seed, layer index, parameter index, ...), consumed in a fixed order and turned into
// floats with exact arithmetic (24 random bits scaled by a power of two, then one multiply and
// one subtract). So a layer or micro-batch built in any process, on any x86-64 or ARM build of
// the same code, is bit-identical. No std:: distributions (their output is
// implementation-defined).
// Thread safety: a SplitMix64 is a plain value; use one per thread.
#ifndef OCTOPIPE_EXECUTOR_LAYERS_INIT_H_
#define OCTOPIPE_EXECUTOR_LAYERS_INIT_H_

#include <cstdint>

#include "executor/tensor.h"

namespace octopipe::executor {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t state) : state_(state) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1), 24 bits: every value is exact in float.
  float NextUnit() { return static_cast<float>(Next() >> 40) * (1.0f / 16777216.0f); }
  // Uniform in [-a, a).
  float NextSymmetric(float a) { return a * (2.0f * NextUnit() - 1.0f); }
  // Uniform integer in [0, n), n > 0 (modulo bias is irrelevant at our sizes).
  int NextBelow(int n) { return static_cast<int>(Next() % static_cast<uint64_t>(n)); }

 private:
  uint64_t state_;
};

// A stream key from several integers; distinct tuples give unrelated streams.
uint64_t MixSeed(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0);

// Fills `t` (already sized) in row-major order with uniform values in [-a, a) from the stream
// of (seed, layer_index, param_index).
void InitUniform(uint64_t seed, int layer_index, int param_index, float a, Tensor* t);

}  // namespace octopipe::executor

#endif  // OCTOPIPE_EXECUTOR_LAYERS_INIT_H_
