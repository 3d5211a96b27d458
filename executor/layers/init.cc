#include "executor/layers/init.h"

namespace octopipe::executor {

uint64_t MixSeed(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
  // Feed each word through a SplitMix64 step so that neighbouring tuples decorrelate.
  uint64_t h = SplitMix64(seed ^ 0x6a09e667f3bcc908ULL).Next();
  h = SplitMix64(h ^ a).Next();
  h = SplitMix64(h ^ b).Next();
  h = SplitMix64(h ^ c).Next();
  return h;
}

void InitUniform(uint64_t seed, int layer_index, int param_index, float a, Tensor* t) {
  SplitMix64 rng(MixSeed(seed, static_cast<uint64_t>(layer_index),
                         static_cast<uint64_t>(param_index), /*c=*/0x1a7e5ULL));
  float* data = t->data();  // row-major storage: element (r, c) at r * cols + c
  for (Eigen::Index i = 0; i < t->size(); ++i) data[i] = rng.NextSymmetric(a);
}

}  // namespace octopipe::executor
