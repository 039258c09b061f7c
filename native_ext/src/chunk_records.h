// Stage 4's inner loop in C++: inflate one lc0 chunk (libdeflate, CRC-32
// checked), check it, scatter the planned positions into the load task's
// frame array.
//
// The Python load task knows before inflating every record it will emit
// (positions from the index counts, destinations from the shuffle keys), so
// each chunk is inflated into a per-thread scratch buffer that stays warm
// across chunks and only the planned records are copied, straight to their
// final row. Inflating into a fresh buffer per chunk made the kernel zero
// pages (page faults) for every inflated byte, and the numpy gathers held
// the GIL; this releases it for the whole chunk.
#pragma once

#include <cstdint>

#include <arrow/result.h>

namespace shardmill {

struct ChunkRecordsSpec {
  const uint8_t* compressed = nullptr;  // the chunk's gzip bytes (one or more members)
  int64_t compressed_size = 0;
  int64_t num_records = 0;  // from the index
  int64_t record_size = 0;
  uint32_t version = 0;  // every record's first 4 bytes (little-endian) must equal it
};

// Outcome of ScatterChunkRecords.
struct ChunkRecordsResult {
  // False when bytes follow a gzip member that are not another member (or
  // the chunk is too short to be one): nothing was written and the caller
  // must use the streaming path, which says what they are.
  bool fast_path = false;
  // Index of the first record whose version differs, or -1.
  int64_t bad_version_record = -1;
};

// Inflates the chunk and, when every record checks out, copies record
// positions[i] to row dest_rows[i] of `out` (rows of record_size bytes).
// Errors (broken stream, CRC mismatch, wrong payload size) are a Status
// naming what failed. Callers validate positions and rows beforehand.
arrow::Result<ChunkRecordsResult> ScatterChunkRecords(const ChunkRecordsSpec& spec, const int64_t* positions,
                                                      const int64_t* dest_rows, int64_t count, uint8_t* out);

}  // namespace shardmill
