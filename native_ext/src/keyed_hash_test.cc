// The keyed SplitMix64 chain: SplitMix64's published output, and the vectorised MixKeyedWords equal to
// HashWords word by word at every length (the tails of the vector loop included).
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "keyed_hash.h"

namespace {

TEST(KeyedHash, Mix64IsSplitMix64) {
  EXPECT_EQ(shardmill::Mix64(0), 0xE220A8397B1DCDAFULL);  // SplitMix64's first output for seed 0
  EXPECT_EQ(shardmill::HashWords(0, 0, {}), 0xE220A8397B1DCDAFULL);
  EXPECT_NE(shardmill::HashWords(1, 2, {3}), shardmill::HashWords(1, 2, {4}));
  EXPECT_NE(shardmill::HashWords(1, 2, {3}), shardmill::HashWords(1, 3, {3}));
}

TEST(KeyedHash, MixKeyedWordsEqualsHashWordsAtEveryLength) {
  const uint64_t seed = 12345, stream = shardmill::kStreamRecordSeed;
  const uint64_t key = shardmill::Mix64(seed ^ stream);
  for (int64_t n : {0, 1, 3, 4, 7, 8, 9, 31, 1000}) {
    std::vector<uint64_t> words(static_cast<size_t>(n)), out(static_cast<size_t>(n) + 1, 7);
    for (int64_t i = 0; i < n; ++i) words[i] = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ULL + 11;
    shardmill::MixKeyedWords(key, words.data(), n, out.data());
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(out[i], shardmill::HashWords(seed, stream, {words[i]})) << n << " " << i;
    EXPECT_EQ(out[n], 7u);  // nothing written past the end
  }
}

}  // namespace
