// The keyed SplitMix64 hash chain shared with shardmill.transforms.keyed_hash.
//
//   h = Mix64(seed ^ stream); for each word: h = Mix64(h ^ word)
//
// Mix64 is SplitMix64's output function. tests/test_native_reader.py checks
// this against the Python implementation on shared test vectors.
#pragma once

#include <cstdint>
#include <initializer_list>

namespace shardmill {

// Streams: must match the STREAM_* constants of transforms/keyed_hash.py.
constexpr uint64_t kStreamRecordSeed = 6;      // per-record seed for augmentations
constexpr uint64_t kStreamReaderRowGroups = 7;  // per-epoch permutation of row groups
constexpr uint64_t kStreamReaderWindow = 8;     // per-window permutation of rows

inline uint64_t Mix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

inline uint64_t HashWords(uint64_t seed, uint64_t stream, std::initializer_list<uint64_t> words) {
  uint64_t h = Mix64(seed ^ stream);
  for (uint64_t w : words) h = Mix64(h ^ w);
  return h;
}

// out[i] = Mix64(key ^ words[i]): HashWords(seed, stream, {words[i]}) for
// key = Mix64(seed ^ stream). Vectorised where the CPU allows (keyed_hash.cc).
void MixKeyedWords(uint64_t key, const uint64_t* words, int64_t count, uint64_t* out);

}  // namespace shardmill
