#include "feistel.h"

#include "keyed_hash.h"

namespace shardmill {

FeistelPermutation::FeistelPermutation(uint64_t n, uint64_t key) : n_(n) {
  int bits = 0;
  while (bits < 64 && (uint64_t{1} << bits) < n) ++bits;  // smallest b with 2^b >= n
  half_bits_ = bits <= 2 ? 1 : (bits + 1) / 2;
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
  for (int i = 0; i < kRounds; ++i) round_keys_[i] = HashWords(key, 0, {static_cast<uint64_t>(i)});
}

uint64_t FeistelPermutation::Encrypt(uint64_t x) const {
  uint64_t left = x >> half_bits_;
  uint64_t right = x & half_mask_;
  for (int i = 0; i < kRounds; ++i) {
    uint64_t next = left ^ (Mix64(right ^ round_keys_[i]) & half_mask_);
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
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
