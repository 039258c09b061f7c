// Stage 4's inner loop in C++: inflate one lc0 chunk (libdeflate, CRC-32
// checked), check it, pack the planned positions into the load task's
// arena (record_packing.h).
//
// The Python load task knows before inflating every record it will emit
// (positions from the index counts), so each chunk is inflated into a
// per-thread scratch buffer that stays warm across chunks and only the
// planned records are packed, while they are in cache, into the chunk's
// region of the task's arena: the records move from the inflater to their
// packed form once. Inflating into a fresh buffer per chunk made the kernel
// zero pages (page faults) for every inflated byte, and the numpy gathers
// held the GIL; this releases it for the whole chunk.
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

// Inflates the chunk and, when every record checks out, packs record
// positions[i] (record_packing.h) back to back into `out`, which has room for
// MaxPackedBytes(record_size, count): record i at out + offsets[i], and
// offsets[count] the bytes written. Errors (broken stream, CRC mismatch,
// wrong payload size) are a Status naming what failed. Callers validate the
// positions beforehand.
arrow::Result<ChunkRecordsResult> PackChunkRecords(const ChunkRecordsSpec& spec, const int64_t* positions,
                                                   int64_t count, uint8_t* out, int64_t* offsets);

}  // namespace shardmill
