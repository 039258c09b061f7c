// Fixed-size records packed as runs of repeated 32-bit words, for the lc0 load task's shuffle.
//
// An lc0 record is mostly runs: its 1,858 policy probabilities are -1 but for the legal moves, and most of its
// 104 bitboard planes are 0. The load task holds every record it emits until its shard is written, and on this
// kind of machine a page's first touch costs about as much CPU as inflating the bytes put into it: packed,
// the held records take ~6x fewer pages, and the budget for the in-memory shuffle holds ~6x more. Packing and
// unpacking cost a fraction of that (benchmarks/RESULTS.md: bench_inflate's "pack all", bench_lc0_floor).
//
// A packed record: a bitmap of ceil(words / 8) bytes (word i's bit is bit i % 8 of byte i / 8; set when word i
// equals word i - 1, word -1 being 0), then each word whose bit is clear (4 bytes, as in the record), then
// the record's last record_bytes % 4 bytes as they are. Any bytes pack; the layout depends on nothing else.
#pragma once

#include <cstdint>

#include <arrow/status.h>

namespace shardmill {

// Bytes of the bitmap of a record of record_bytes.
int64_t PackedBitmapBytes(int64_t record_bytes);

// Bytes PackRecords may write for `count` records of record_bytes (every word a literal, plus the bitmaps).
int64_t MaxPackedBytes(int64_t record_bytes, int64_t count);

// Packs row rows[k] of `records` (rows of record_bytes) for k < count, back to back into `out` (of
// MaxPackedBytes): record k at out + offsets[k], offsets[count] the bytes written. One pass over the records.
// Callers validate the rows.
void PackRecords(const uint8_t* records, int64_t record_bytes, const int64_t* rows, int64_t count,
                 int64_t* offsets, uint8_t* out);

// Unpacks packed record k (packed[offsets[k], offsets[k + 1])) into row dest_rows[k] of `out` (out_rows rows
// of record_bytes), for k < count. Invalid: offsets decreasing or past packed_bytes, a record whose size
// disagrees with its bitmap, a destination row out of range — nothing past the first invalid record is
// written.
arrow::Status UnpackRecords(const uint8_t* packed, int64_t packed_bytes, const int64_t* offsets, int64_t count,
                            int64_t record_bytes, const int64_t* dest_rows, int64_t out_rows, uint8_t* out);

}  // namespace shardmill
