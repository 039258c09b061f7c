#include "keyed_hash.h"

namespace shardmill {

// A plain loop: GCC vectorises it, 64-bit multiplies included, for AVX-512
// (8 lanes); the default clone serves other CPUs. Per-record seeds of every
// batch: ~3 % of the reader's CPU on 100-byte rows as a scalar chain of two
// Mix64 per row.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("default", "arch=x86-64-v4")))
#endif
void MixKeyedWords(uint64_t key, const uint64_t* words, int64_t count, uint64_t* out) {
  for (int64_t i = 0; i < count; ++i) out[i] = Mix64(key ^ words[i]);
}

}  // namespace shardmill
