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

}  // namespace
