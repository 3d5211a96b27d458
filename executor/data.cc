#include "executor/data.h"

#include "absl/strings/str_cat.h"
#include "executor/layers/common.h"
#include "executor/layers/init.h"

namespace octopipe::executor {

MicroBatch MakeMicroBatch(const ModelDims& dims, uint64_t seed, int iteration, int microbatch) {
  CheckOrDie(dims.vocab > 0 && dims.batch > 0 && dims.seq_len > 0,
             absl::StrCat("MakeMicroBatch: dims.vocab (", dims.vocab, "), dims.batch (",
                          dims.batch, ") and dims.seq_len (", dims.seq_len, ") must be > 0"));
  MicroBatch mb;
  mb.batch = dims.batch;
  mb.seq_len = dims.seq_len;
  const size_t tokens = static_cast<size_t>(dims.batch) * dims.seq_len;
  mb.tokens.resize(tokens);
  mb.targets.resize(tokens);
  const int noise_one_in = static_cast<int>(1.0 / kDataNoise + 0.5);
  for (int j = 0; j < dims.batch; ++j) {
    SplitMix64 rng(MixSeed(seed, static_cast<uint64_t>(iteration),
                           static_cast<uint64_t>(microbatch), static_cast<uint64_t>(j)));
    int32_t current = rng.NextBelow(dims.vocab);
    for (int i = 0; i < dims.seq_len; ++i) {
      const bool noisy = rng.NextBelow(noise_one_in) == 0;
      const int32_t next =
          noisy ? rng.NextBelow(dims.vocab)
                : static_cast<int32_t>((int64_t{kDataMultiplier} * current + kDataOffset) %
                                       dims.vocab);
      const size_t pos = static_cast<size_t>(j) * dims.seq_len + i;
      mb.tokens[pos] = current;
      mb.targets[pos] = next;
      current = next;
    }
  }
  return mb;
}

std::vector<MicroBatch> MakeMicroBatches(const ModelDims& dims, uint64_t seed, int iteration,
                                         int count) {
  std::vector<MicroBatch> out;
  out.reserve(count);
  for (int m = 0; m < count; ++m) out.push_back(MakeMicroBatch(dims, seed, iteration, m));
  return out;
}

}  // namespace octopipe::executor
