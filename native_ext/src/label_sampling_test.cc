// One-pass label sampling: Algorithm L's reservoirs (k distinct offsets of the gap, keyed) and the
// iterative and adaptive reservoir sizes between targets.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "label_sampling.h"

namespace {

TEST(LabelSampling, ReservoirsHoldKDistinctAscendingOffsetsOfTheirGap) {
  for (int64_t m : {1, 5, 64, 1000, 100000}) {
    for (int64_t k : {1, 3, 64}) {
      std::vector<int64_t> out;
      shardmill::ReservoirSample(m, k, 7, 11, 3, &out);
      EXPECT_EQ(static_cast<int64_t>(out.size()), std::min(m, k));
      EXPECT_TRUE(std::is_sorted(out.begin(), out.end()));
      EXPECT_EQ(std::set<int64_t>(out.begin(), out.end()).size(), out.size());
      for (int64_t offset : out) EXPECT_TRUE(offset >= 0 && offset < m);
    }
  }
}

TEST(LabelSampling, ReservoirsArePureFunctionsOfTheirKeys) {
  std::vector<int64_t> a, b, other_gap, other_seed;
  shardmill::ReservoirSample(5000, 20, 7, 11, 3, &a);
  shardmill::ReservoirSample(5000, 20, 7, 11, 3, &b);
  shardmill::ReservoirSample(5000, 20, 7, 11, 4, &other_gap);
  shardmill::ReservoirSample(5000, 20, 8, 11, 3, &other_seed);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, other_gap);
  EXPECT_NE(a, other_seed);
}

TEST(LabelSampling, EveryTargetIsKeptAndEachGapKeepsItsReservoir) {
  // Gaps of 0, 2, 10 and 40 non-targets before the four targets, then 7 after the last.
  std::vector<uint8_t> is_target;
  for (int gap : {0, 2, 10, 40}) {
    is_target.insert(is_target.end(), gap, 0);
    is_target.push_back(1);
  }
  is_target.insert(is_target.end(), 7, 0);
  const int64_t n = static_cast<int64_t>(is_target.size());
  auto sample = shardmill::SampleLabels(is_target.data(), n, 3.0, false, 5, 9);
  int64_t targets_out = 0, non_targets_out = 0;
  for (int64_t record : sample.emitted) {
    ASSERT_TRUE(record >= 0 && record < n);
    (is_target[record] ? targets_out : non_targets_out) += 1;
  }
  EXPECT_EQ(targets_out, 4);
  EXPECT_EQ(non_targets_out, sample.non_targets_out);
  // ITERATIVE: round(ratio) = 3 non-targets per gap, or all of a shorter gap.
  EXPECT_EQ(sample.non_targets_out, 0 + 2 + 3 + 3 + 3);
  auto adaptive = shardmill::SampleLabels(is_target.data(), n, 3.0, true, 5, 9);
  // ADAPTIVE sizes each reservoir round(ratio * (targets + 1) - emitted): 3, 6, 7, 3, 3, so it catches up
  // after the short gaps and ends at exactly ratio x 5 reservoirs' worth.
  EXPECT_EQ(adaptive.reservoir_sizes, (std::vector<int64_t>{3, 6, 7, 3, 3}));
  EXPECT_EQ(adaptive.non_targets_out, 15);
  EXPECT_TRUE(std::is_sorted(sample.emitted.begin(), sample.emitted.end()));
}

}  // namespace
