#include "sha256.h"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace shardmill {

namespace {

constexpr uint32_t kRound[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

inline uint32_t Rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

void CompressPortable(uint32_t* state, const uint8_t* data, size_t blocks) {
  for (; blocks > 0; --blocks, data += 64) {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
      w[i] = (uint32_t{data[4 * i]} << 24) | (uint32_t{data[4 * i + 1]} << 16) | (uint32_t{data[4 * i + 2]} << 8) |
             uint32_t{data[4 * i + 3]};
    }
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = Rotr(w[i - 15], 7) ^ Rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = Rotr(w[i - 2], 17) ^ Rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
    uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
    for (int i = 0; i < 64; ++i) {
      const uint32_t t1 = h + (Rotr(e, 6) ^ Rotr(e, 11) ^ Rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRound[i] + w[i];
      const uint32_t t2 = (Rotr(a, 2) ^ Rotr(a, 13) ^ Rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
    state[4] += e;
    state[5] += f;
    state[6] += g;
    state[7] += h;
  }
}

#if defined(__x86_64__)
// The SHA extensions (every x86-64 CPU since 2016-2019): a cached epoch re-verifies its shards at
// gigabytes per second, where the portable rounds manage a few hundred megabytes.
__attribute__((target("sha,sse4.1"))) void CompressShaNi(uint32_t* state, const uint8_t* data, size_t blocks) {
  const __m128i byte_swap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  __m128i tmp = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state));         // DCBA
  __m128i state1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state + 4));  // HGFE
  tmp = _mm_shuffle_epi32(tmp, 0xB1);                                              // CDAB
  state1 = _mm_shuffle_epi32(state1, 0x1B);                                        // EFGH
  __m128i state0 = _mm_alignr_epi8(tmp, state1, 8);                                // ABEF
  state1 = _mm_blend_epi16(state1, tmp, 0xF0);                                     // CDGH
  const auto* k = reinterpret_cast<const __m128i*>(kRound);
  for (; blocks > 0; --blocks, data += 64) {
    const __m128i abef_save = state0;
    const __m128i cdgh_save = state1;
    __m128i msg[4];
    for (int i = 0; i < 4; ++i) {
      msg[i] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(data + 16 * i)), byte_swap);
    }
    for (int i = 0; i < 16; ++i) {
      // Four rounds on message words 4i..4i+3, then the schedule for the words four groups on.
      __m128i m = _mm_add_epi32(msg[i % 4], _mm_loadu_si128(k + i));
      state1 = _mm_sha256rnds2_epu32(state1, state0, m);
      m = _mm_shuffle_epi32(m, 0x0E);
      state0 = _mm_sha256rnds2_epu32(state0, state1, m);
      if (i < 12) {
        // msg[i%4] becomes words 4(i+4)..: W[t] = s1(W[t-2]) + W[t-7] + s0(W[t-15]) + W[t-16].
        __m128i next = _mm_sha256msg1_epu32(msg[i % 4], msg[(i + 1) % 4]);
        next = _mm_add_epi32(next, _mm_alignr_epi8(msg[(i + 3) % 4], msg[(i + 2) % 4], 4));
        msg[i % 4] = _mm_sha256msg2_epu32(next, msg[(i + 3) % 4]);
      }
    }
    state0 = _mm_add_epi32(state0, abef_save);
    state1 = _mm_add_epi32(state1, cdgh_save);
  }
  tmp = _mm_shuffle_epi32(state0, 0x1B);      // FEBA
  state1 = _mm_shuffle_epi32(state1, 0xB1);   // DCHG
  state0 = _mm_blend_epi16(tmp, state1, 0xF0);  // DCBA
  state1 = _mm_alignr_epi8(state1, tmp, 8);     // HGFE
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state), state0);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state + 4), state1);
}

bool HasShaNi() {
  static const bool has = __builtin_cpu_supports("sha") && __builtin_cpu_supports("sse4.1");
  return has;
}
#endif

}  // namespace

Sha256::Sha256(Engine engine)
    : portable_(engine == Engine::kPortable),
      state_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {}

void Sha256::Compress(const uint8_t* block, size_t blocks) {
  if (blocks == 0) return;
#if defined(__x86_64__)
  if (!portable_ && HasShaNi()) return CompressShaNi(state_.data(), block, blocks);
#endif
  CompressPortable(state_.data(), block, blocks);
}

void Sha256::Update(const uint8_t* data, size_t size) {
  total_bytes_ += size;
  if (pending_size_ > 0) {
    const size_t take = std::min(size, pending_.size() - pending_size_);
    std::memcpy(pending_.data() + pending_size_, data, take);
    pending_size_ += take;
    data += take;
    size -= take;
    if (pending_size_ < pending_.size()) return;
    Compress(pending_.data(), 1);
    pending_size_ = 0;
  }
  Compress(data, size / 64);
  data += size / 64 * 64;
  size %= 64;
  std::memcpy(pending_.data(), data, size);
  pending_size_ = size;
}

std::string Sha256::HexDigest() {
  const uint64_t bits = total_bytes_ * 8;
  uint8_t tail[128] = {};
  std::memcpy(tail, pending_.data(), pending_size_);
  tail[pending_size_] = 0x80;
  const size_t size = pending_size_ + 1 + 8 <= 64 ? 64 : 128;
  for (int i = 0; i < 8; ++i) tail[size - 1 - i] = static_cast<uint8_t>(bits >> (8 * i));
  Compress(tail, size / 64);
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (uint32_t word : state_) {
    for (int shift = 28; shift >= 0; shift -= 4) hex += kHex[(word >> shift) & 0xF];
  }
  return hex;
}

}  // namespace shardmill
