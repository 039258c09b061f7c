#include "row_placement.h"

#include <algorithm>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace shardmill {

#if defined(__x86_64__) && defined(__GNUC__)
namespace {
__attribute__((target("avx512f"))) void StreamCopyAvx512(uint8_t* dest, const uint8_t* src, int64_t bytes) {
  const int64_t head = std::min<int64_t>(bytes, (64 - (reinterpret_cast<uintptr_t>(dest) & 63)) & 63);
  std::memcpy(dest, src, head);
  int64_t i = head;
  for (; i + 64 <= bytes; i += 64) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dest + i), _mm512_loadu_si512(src + i));
  }
  std::memcpy(dest + i, src + i, bytes - i);
}
}  // namespace
// __builtin_cpu_init first: this initializer may run before libgcc's own.
const bool kStreamingCopy = (__builtin_cpu_init(), __builtin_cpu_supports("avx512f"));
void StreamCopy(uint8_t* dest, const uint8_t* src, int64_t bytes) { StreamCopyAvx512(dest, src, bytes); }
void StreamFence() { _mm_sfence(); }
#else
const bool kStreamingCopy = false;
void StreamCopy(uint8_t* dest, const uint8_t* src, int64_t bytes) { std::memcpy(dest, src, bytes); }
void StreamFence() {}
#endif

void GatherRows(const std::vector<std::shared_ptr<DecodedGroup>>& groups, const std::vector<ColumnSpec>& columns,
                const RowLocation* locations, int64_t count, const std::vector<uint8_t*>& dest) {
  // Rows are scattered over the whole window (tens of MB), so each copy is a
  // cache miss; with the locations known, prefetching kPrefetchAhead rows
  // ahead keeps many misses in flight (measured: several times faster for
  // 100-byte rows).
  // Every cache line of a row's first kPrefetchBytes, not just the first:
  // a 100-byte row spans two or three (a standalone gather of 100-byte rows
  // from 32 MiB: 36 -> 28 ns per row); the hardware prefetcher follows
  // wider rows.
  constexpr int64_t kPrefetchAhead = 16;
  constexpr int64_t kPrefetchBytes = 256;
  // Only rows narrower than kScatterMinRowBytes are gathered, so plain
  // memcpy: no column here is wide enough for streaming stores.
  static_assert(kScatterMinRowBytes <= kStreamCopyMinBytes, "gathered rows would need streaming stores");
  for (int64_t j = 0; j < count; ++j) {
    if (j + kPrefetchAhead < count) {
      const RowLocation& ahead = locations[j + kPrefetchAhead];
      const auto& group = groups[ahead.row_group];
      for (size_t c = 0; c < columns.size(); ++c) {
        const uint8_t* row = group->buffers[c]->data() + ahead.row * columns[c].row_bytes;
        const int64_t bytes = std::min(columns[c].row_bytes, kPrefetchBytes);
        for (int64_t offset = 0; offset < bytes; offset += 64) __builtin_prefetch(row + offset);
        __builtin_prefetch(row + bytes - 1);
      }
    }
    const RowLocation& loc = locations[j];
    const auto& group = groups[loc.row_group];
    for (size_t c = 0; c < columns.size(); ++c) {
      const int64_t width = columns[c].row_bytes;
      std::memcpy(dest[c] + j * width, group->buffers[c]->data() + loc.row * width, width);
    }
  }
}

void ScatterRun(const int64_t* positions, int64_t start, int64_t span, const uint8_t* values, int64_t count,
                int64_t width, uint8_t* dest) {
  const uint64_t limit = static_cast<uint64_t>(span);
  for (int64_t k = 0; k < count; ++k) {
    // One unsigned comparison: positions before `start` wrap to huge offsets.
    const uint64_t offset = static_cast<uint64_t>(positions[k] - start);
    if (offset < limit) CopyRow(dest + static_cast<int64_t>(offset) * width, values + k * width, width);
  }
}

}  // namespace shardmill
