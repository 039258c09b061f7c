#include "record_packing.h"

#include <algorithm>
#include <bit>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace shardmill {

namespace {

inline uint32_t WordAt(const uint8_t* p) {
  uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
}

// Bit j of the result: word (first + j) equals the word before it (word -1 is 0), for j < n <= 64.
inline uint64_t RepeatMask(const uint8_t* record, int64_t first, int64_t n) {
  uint64_t mask = 0;
  int64_t j = 0;
  if (first == 0 && n > 0) {
    mask |= WordAt(record) == 0 ? 1 : 0;
    j = 1;
  }
#if defined(__SSE2__)
  for (; j + 4 <= n; j += 4) {
    const uint8_t* p = record + 4 * (first + j);
    const __m128i now = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i before = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p - 4));
    const int bits = _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(now, before)));
    mask |= static_cast<uint64_t>(bits) << j;
  }
#endif
  for (; j < n; ++j) {
    const uint8_t* p = record + 4 * (first + j);
    mask |= static_cast<uint64_t>(WordAt(p) == WordAt(p - 4)) << j;
  }
  return mask;
}

// n copies of the 4 bytes at `value` from dst on (a run of repeated words).
inline void FillWords(uint8_t* dst, uint32_t value, int64_t n) {
#if defined(__SSE2__)
  const __m128i four = _mm_set1_epi32(static_cast<int>(value));
  for (; n >= 4; n -= 4, dst += 16) _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), four);
#endif
  for (; n > 0; --n, dst += 4) std::memcpy(dst, &value, 4);
}

// Set bits of x (std::popcount is a library call on CPUs the build does not assume POPCNT for).
inline int64_t BitCount(uint64_t x) {
  x -= (x >> 1) & 0x5555555555555555ULL;
  x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
  x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0FULL;
  return static_cast<int64_t>((x * 0x0101010101010101ULL) >> 56);
}

}  // namespace

int64_t PackedBitmapBytes(int64_t record_bytes) { return (record_bytes / 4 + 7) / 8; }

int64_t MaxPackedBytes(int64_t record_bytes, int64_t count) {
  return count * (PackedBitmapBytes(record_bytes) + record_bytes);
}

void PackRecords(const uint8_t* records, int64_t record_bytes, const int64_t* rows, int64_t count,
                 int64_t* offsets, uint8_t* out) {
  const int64_t words = record_bytes / 4;
  const int64_t bitmap_bytes = PackedBitmapBytes(record_bytes);
  int64_t at = 0;
  for (int64_t k = 0; k < count; ++k) {
    offsets[k] = at;
    const uint8_t* record = records + rows[k] * record_bytes;
    uint8_t* bitmap = out + at;
    uint8_t* literal = bitmap + bitmap_bytes;
    for (int64_t first = 0; first < words; first += 64) {
      const int64_t n = std::min<int64_t>(64, words - first);
      const uint64_t mask = RepeatMask(record, first, n);
      for (int64_t b = 0; b < (n + 7) / 8; ++b) bitmap[first / 8 + b] = static_cast<uint8_t>(mask >> (8 * b));
      // The words whose bit is clear, found by counting trailing zeros of the inverted mask.
      uint64_t literals = ~mask & (n == 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1);
      while (literals != 0) {
        const int j = std::countr_zero(literals);
        std::memcpy(literal, record + 4 * (first + j), 4);
        literal += 4;
        literals &= literals - 1;
      }
    }
    std::memcpy(literal, record + 4 * words, record_bytes % 4);
    at = literal + record_bytes % 4 - out;
  }
  offsets[count] = at;
}

arrow::Status UnpackRecords(const uint8_t* packed, int64_t packed_bytes, const int64_t* offsets, int64_t count,
                            int64_t record_bytes, const int64_t* dest_rows, int64_t out_rows, uint8_t* out) {
  if (record_bytes <= 0) return arrow::Status::Invalid("record size ", record_bytes, " is not positive");
  const int64_t words = record_bytes / 4;
  const int64_t bitmap_bytes = PackedBitmapBytes(record_bytes);
  for (int64_t k = 0; k < count; ++k) {
    const int64_t start = offsets[k], end = offsets[k + 1];
    if (start < 0 || end < start || end > packed_bytes) {
      return arrow::Status::Invalid("packed record ", k, " spans bytes [", start, ", ", end, ") of ", packed_bytes);
    }
    if (dest_rows[k] < 0 || dest_rows[k] >= out_rows) {
      return arrow::Status::Invalid("packed record ", k, " goes to row ", dest_rows[k], " of ", out_rows);
    }
    const uint8_t* bitmap = packed + start;
    if (end - start < bitmap_bytes) {
      return arrow::Status::Invalid("packed record ", k, " has ", end - start, " bytes, less than its bitmap");
    }
    int64_t repeats = 0;
    int64_t b = 0;
    for (; b + 8 <= bitmap_bytes; b += 8) {
      uint64_t eight;
      std::memcpy(&eight, bitmap + b, 8);
      repeats += BitCount(eight);
    }
    for (; b < bitmap_bytes; ++b) repeats += BitCount(bitmap[b]);
    // Bits past the last word are never set by PackRecords; set, they would count repeats that are not there.
    const int64_t spare_bits = 8 * bitmap_bytes - words;
    if (spare_bits > 0 && (bitmap[bitmap_bytes - 1] >> (8 - spare_bits)) != 0) {
      return arrow::Status::Invalid("packed record ", k, " sets bits past its last word");
    }
    if (end - start != bitmap_bytes + 4 * (words - repeats) + record_bytes % 4) {
      return arrow::Status::Invalid("packed record ", k, " has ", end - start, " bytes, its bitmap says ",
                                    bitmap_bytes + 4 * (words - repeats) + record_bytes % 4);
    }
    const uint8_t* literal = bitmap + bitmap_bytes;
    uint8_t* record = out + dest_rows[k] * record_bytes;
    uint32_t previous = 0;
    int64_t filled = 0;  // words written so far
    for (int64_t first = 0; first < words; first += 64) {
      const int64_t n = std::min<int64_t>(64, words - first);
      uint64_t mask = 0;
      for (int64_t b = 0; b < (n + 7) / 8; ++b) mask |= static_cast<uint64_t>(bitmap[first / 8 + b]) << (8 * b);
      uint64_t literals = ~mask & (n == 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1);
      while (literals != 0) {
        const int64_t i = first + std::countr_zero(literals);
        FillWords(record + 4 * filled, previous, i - filled);  // the run before it
        filled = i;
        std::memcpy(&previous, literal, 4);
        std::memcpy(record + 4 * filled, literal, 4);
        ++filled;
        literal += 4;
        literals &= literals - 1;
      }
    }
    FillWords(record + 4 * filled, previous, words - filled);
    std::memcpy(record + 4 * words, literal, record_bytes % 4);
  }
  return arrow::Status::OK();
}

}  // namespace shardmill
