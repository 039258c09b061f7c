// A stateless pseudo-random permutation of [0, n): a balanced Feistel network
// over the smallest even bit width covering n, with cycle walking.
//
// Apply(x) costs O(rounds) hash evaluations (expected < 4 cycle-walk steps,
// since the Feistel domain is < 4n); nothing proportional to n is stored,
// which is what keeps a reader's per-epoch setup O(1) in the record count.
#pragma once

#include <array>
#include <cstdint>

namespace shardmill {

class FeistelPermutation {
 public:
  static constexpr int kRounds = 6;

  // n may be 0 (an empty permutation); key selects the permutation.
  FeistelPermutation(uint64_t n, uint64_t key);

  uint64_t size() const { return n_; }
  // The image of x; requires x < size().
  uint64_t Apply(uint64_t x) const;

 private:
  uint64_t Encrypt(uint64_t x) const;

  uint64_t n_;
  int half_bits_;
  uint64_t half_mask_;
  std::array<uint64_t, kRounds> round_keys_;
};

}  // namespace shardmill
