// The keyed Feistel permutation: a bijection for every size, ranges equal to Apply, keys that matter.
#include <algorithm>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "feistel.h"

namespace {

using shardmill::FeistelPermutation;
TEST(Feistel, IsABijectionForEverySize) {
  for (uint64_t n : {0ull, 1ull, 2ull, 3ull, 7ull, 8ull, 100ull, 1000ull, 65539ull}) {
    FeistelPermutation perm(n, 12345);
    EXPECT_TRUE(perm.size() == n);
    std::vector<uint64_t> image(n);
    for (uint64_t x = 0; x < n; ++x) image[x] = perm.Apply(x);
    std::vector<uint64_t> sorted = image;
    std::sort(sorted.begin(), sorted.end());
    for (uint64_t x = 0; x < n; ++x) EXPECT_TRUE(sorted[x] == x);
  }
}

TEST(Feistel, RangesAgreeWithApplyAndInvertIt) {
  const uint64_t n = 5003;
  FeistelPermutation perm(n, 99);
  std::vector<uint64_t> forward(n), backward(n);
  perm.ApplyRange(0, static_cast<int64_t>(n), forward.data());
  for (uint64_t x = 0; x < n; ++x) EXPECT_TRUE(forward[x] == perm.Apply(x));
  perm.InverseRange(0, static_cast<int64_t>(n), backward.data());
  for (uint64_t x = 0; x < n; ++x) EXPECT_TRUE(backward[forward[x]] == x);
  std::vector<uint64_t> middle(100);
  perm.ApplyRange(1234, 100, middle.data());
  for (uint64_t i = 0; i < 100; ++i) EXPECT_TRUE(middle[i] == forward[1234 + i]);
}

TEST(Feistel, KeysSelectDifferentPermutations) {
  FeistelPermutation a(1000, 1), b(1000, 2);
  int same = 0;
  for (uint64_t x = 0; x < 1000; ++x) same += a.Apply(x) == b.Apply(x);
  EXPECT_TRUE(same < 20);  // about 1 expected by chance
}

}  // namespace
