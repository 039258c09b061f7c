#include "feistel.h"

#include <algorithm>
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

namespace {

constexpr int kBlock = 256;

// Encrypt (or its inverse) of x[0..m) in place, m <= kBlock, with each round
// a loop over the positions (it vectorises, 64-bit multiplies included, on
// AVX-512).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("default", "arch=x86-64-v4")))
#endif
void CryptBlock(const uint64_t* round_keys, int left_bits, int right_bits, bool inverse, uint64_t* x, int m) {
  alignas(64) uint64_t halves[2][kBlock];
  uint64_t* left = halves[0];
  uint64_t* right = halves[1];
  const uint64_t right_mask = LowBits(right_bits);
  for (int i = 0; i < m; ++i) {
    left[i] = x[i] >> right_bits;
    right[i] = x[i] & right_mask;
  }
  for (int step = 0; step < FeistelPermutation::kRounds; ++step) {
    if (!inverse) {
      // As in Encrypt: L ^= F(R) mod 2^l, then the halves swap roles.
      const uint64_t key = round_keys[step];
      const uint64_t mask = LowBits(left_bits);
      for (int i = 0; i < m; ++i) left[i] ^= Mix64(right[i] ^ key) & mask;
    } else {
      // Round kRounds-1-step undone: the state is (R, L ^ F(R)), so
      // R' ^= F(L') mod 2^r' gives back L, and the halves swap back.
      const uint64_t key = round_keys[FeistelPermutation::kRounds - 1 - step];
      const uint64_t mask = LowBits(right_bits);
      for (int i = 0; i < m; ++i) right[i] ^= Mix64(left[i] ^ key) & mask;
    }
    std::swap(left, right);
    std::swap(left_bits, right_bits);
  }
  for (int i = 0; i < m; ++i) x[i] = (left[i] << right_bits) | right[i];
}

}  // namespace

void FeistelPermutation::ApplyRange(uint64_t first, int64_t count, uint64_t* out) const {
  WalkRange(first, count, false, out);
}

void FeistelPermutation::InverseRange(uint64_t first, int64_t count, uint64_t* out) const {
  WalkRange(first, count, true, out);
}

void FeistelPermutation::WalkRange(uint64_t first, int64_t count, bool inverse, uint64_t* out) const {
  alignas(64) uint64_t walking[kBlock];
  int32_t slot[kBlock];
  for (int64_t done = 0; done < count; done += kBlock) {
    int m = static_cast<int>(std::min<int64_t>(kBlock, count - done));
    for (int i = 0; i < m; ++i) {
      walking[i] = first + static_cast<uint64_t>(done + i);
      slot[i] = i;
    }
    // Cycle walking, as in Apply, for the whole block at once: encrypt every
    // position still outside [0, n), keep the ones that landed inside (the
    // inverse walks the same cycles backwards).
    while (m > 0) {
      CryptBlock(round_keys_.data(), left_bits_, right_bits_, inverse, walking, m);
      // Branch-free (whether a position is done is a coin flip): every
      // position writes its output, and one still outside is kept walking,
      // so a later pass overwrites its output.
      int outside = 0;
      for (int i = 0; i < m; ++i) {
        const uint64_t y = walking[i];
        const int32_t s = slot[i];
        out[done + s] = y;
        walking[outside] = y;
        slot[outside] = s;
        outside += y >= n_;
      }
      m = outside;
    }
  }
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
