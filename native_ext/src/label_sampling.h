// One-pass label sampling of one partition (ITERATIVE / ADAPTIVE), the native
// twin of shardmill.transforms.label_sampling: the same keyed draws, so the
// same output bit for bit (tests/test_label_sampling.py checks both agree).
#pragma once

#include <cstdint>
#include <vector>

namespace shardmill {

struct LabelSample {
  std::vector<int64_t> emitted;          // record indices in emission order
  std::vector<int64_t> reservoir_sizes;  // per gap
  int64_t non_targets_out = 0;
  int64_t draws = 0;
};

// Algorithm L over a gap of m non-targets with a reservoir of k: appends the
// chosen offsets (ascending) to `out` and returns the number of draws.
int64_t ReservoirSample(int64_t m, int64_t k, uint64_t seed, uint64_t partition_key, uint64_t gap,
                        std::vector<int64_t>* out);

LabelSample SampleLabels(const uint8_t* is_target, int64_t n, double ratio, bool adaptive, uint64_t seed,
                         uint64_t partition_key);

}  // namespace shardmill
