// Megatron's greedy blending indices.
#include <cmath>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "blending.h"

namespace {
// Megatron's greedy blending: shares track the weights within one sample,
// ties go to the first dataset, and each dataset's samples are taken in order.
TEST(Blending, IndicesFollowTheWeightsGreedily) {
  const std::vector<double> weights = {0.5, 0.3, 0.2};
  const int64_t size = 10000;
  std::vector<int16_t> index(size);
  std::vector<int64_t> sample(size);
  shardmill::BuildBlendingIndices(weights.data(), 3, size, index.data(), sample.data());
  std::vector<int64_t> taken(3, 0);
  for (int64_t i = 0; i < size; ++i) {
    EXPECT_TRUE(index[i] >= 0 && index[i] < 3);
    EXPECT_TRUE(sample[i] == taken[index[i]]);
    ++taken[index[i]];
    for (int d = 0; d < 3; ++d) EXPECT_TRUE(std::abs(static_cast<double>(taken[d]) - weights[d] * (i + 1)) <= 1.0);
  }
  const std::vector<double> equal = {0.5, 0.5};
  std::vector<int16_t> tie_index(4);
  std::vector<int64_t> tie_sample(4);
  shardmill::BuildBlendingIndices(equal.data(), 2, 4, tie_index.data(), tie_sample.data());
  EXPECT_TRUE((tie_index == std::vector<int16_t>{0, 1, 0, 1}));
}

// Exhaustive blending takes every sample of every dataset exactly once, in
// each dataset's order, and keeps interleaving the rest once one is spent.
TEST(Blending, ExhaustiveIndicesTakeEverySampleOnce) {
  const std::vector<int64_t> sizes = {5, 1, 3};
  std::vector<int16_t> index(9);
  std::vector<int64_t> sample(9);
  shardmill::BuildExhaustiveBlendingIndices(sizes.data(), 3, index.data(), sample.data());
  std::vector<int64_t> taken(3, 0);
  for (size_t i = 0; i < index.size(); ++i) {
    EXPECT_TRUE(sample[i] == taken[static_cast<size_t>(index[i])]);
    ++taken[static_cast<size_t>(index[i])];
  }
  EXPECT_TRUE(taken == sizes);
  // What Megatron's helpers.cpp gives for sizes 5, 1, 3.
  EXPECT_TRUE((index == std::vector<int16_t>{0, 2, 1, 0, 2, 0, 0, 2, 0}));
}

}  // namespace
