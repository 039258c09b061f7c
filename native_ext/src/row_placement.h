// Row placement: rows of decoded row groups copied to their places in a
// window's arranged buffers (this rank's rows of the window, in epoch order).
//
// Two ways, by the width of a row (all selected columns):
// - narrow rows are gathered: once the window's groups are decoded, each
//   part of the window is filled in epoch order from the groups, prefetching
//   the rows ahead (GatherRows);
// - rows of at least kScatterMinRowBytes are scattered: each row goes to its
//   place through the inverse permutation as soon as its page is
//   decompressed, while the page is in cache, with no decoded copy of the
//   group in between (ScatterRun). Measured straight from the pages, paired
//   (CPU per row, gathered -> scattered): 100 B 70 -> 77-100 ns, 200 B even,
//   400 B 170 -> 140 ns, 600 B 230-340 -> 170-240 ns, 1-3 KB 1.6-1.9x less,
//   8356 B ~1.5x less.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include <arrow/buffer.h>

#include "epoch_order.h"
#include "shard_file.h"

namespace shardmill {

constexpr int64_t kScatterMinRowBytes = 256;

// A row group decoded into one buffer per column (rows x row_bytes), for the gather.
struct DecodedGroup {
  std::vector<std::shared_ptr<arrow::Buffer>> buffers;
};

// Copies of wide rows bypass the cache (AVX-512 streaming stores, whole
// 64-byte lines): the window is tens of MB, so the lines would be evicted
// before the consumer reads them, and a normal store first reads each line
// it writes. A standalone gather of 8356 B rows from a 33 MB window: 8.1 ->
// 11.2 GB/s (SSE2 streaming stores: no gain). Rows of 400 B scattered from
// their pages: ~14 % less CPU than memcpy, 1000 B: even.
constexpr int64_t kStreamCopyMinBytes = 256;
extern const bool kStreamingCopy;  // the CPU has AVX-512
void StreamCopy(uint8_t* dest, const uint8_t* src, int64_t bytes);
// Streaming stores are weakly ordered: fence before the rows are published.
void StreamFence();

// One row of one column to its place: streamed if wide enough (then
// StreamFence() before another thread may read it).
inline void CopyRow(uint8_t* dest, const uint8_t* src, int64_t width) {
  if (width >= kStreamCopyMinBytes && kStreamingCopy) {
    StreamCopy(dest, src, width);
  } else {
    std::memcpy(dest, src, width);
  }
}

// Copies the rows at `locations` (row_group: index into `groups`) to
// consecutive rows starting at dest[c], per column c of `columns`.
void GatherRows(const std::vector<std::shared_ptr<DecodedGroup>>& groups, const std::vector<ColumnSpec>& columns,
                const RowLocation* locations, int64_t count, const std::vector<uint8_t*>& dest);

// Copies `count` values of `width` bytes (one run of one column of a group
// whose row k sits at epoch position positions[k]) to
// dest + (positions[k] - start) * width; rows outside [start, start + span)
// are another rank's and skipped. Ends with no fence: call StreamFence().
void ScatterRun(const int64_t* positions, int64_t start, int64_t span, const uint8_t* values, int64_t count,
                int64_t width, uint8_t* dest);

}  // namespace shardmill
