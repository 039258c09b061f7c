#include "feistel.h"

#include <utility>

#include "keyed_hash.h"

namespace shardmill {

FeistelPermutation::FeistelPermutation(uint64_t n, uint64_t key) : n_(n) {
  int bits = 0;
  while (bits < 63 && (uint64_t{1} << bits) < n) ++bits;  // smallest b with 2^b >= n
  left_bits_ = bits / 2;
  right_bits_ = bits - left_bits_;
  for (int i = 0; i < kRounds; ++i) round_keys_[i] = HashWords(key, 0, {static_cast<uint64_t>(i)});
}

namespace {
inline uint64_t LowBits(int bits) { return (uint64_t{1} << bits) - 1; }
}  // namespace

uint64_t FeistelPermutation::Encrypt(uint64_t x) const {
  // Each round maps (L: l bits, R: r bits) to (R, L ^ F(R) mod 2^l), now r
  // and l bits: a bijection of (l + r)-bit strings whatever l and r. After
  // an even number of rounds the halves have their original widths.
  static_assert(kRounds % 2 == 0);
  int left_bits = left_bits_, right_bits = right_bits_;
  uint64_t left = x >> right_bits;
  uint64_t right = x & LowBits(right_bits);
  for (int i = 0; i < kRounds; ++i) {
    uint64_t next = left ^ (Mix64(right ^ round_keys_[i]) & LowBits(left_bits));
    left = right;
    right = next;
    std::swap(left_bits, right_bits);
  }
  return (left << right_bits) | right;
}

uint64_t FeistelPermutation::Apply(uint64_t x) const {
  // Cycle walking: the Feistel network permutes [0, 2^(2*half_bits)); walking
  // the cycle from x until it re-enters [0, n) restricts it to a permutation
  // of [0, n).
  uint64_t y = Encrypt(x);
  while (y >= n_) y = Encrypt(y);
  return y;
}

}  // namespace shardmill
