#include "chunk_records.h"

#include <cstring>
#include <memory>
#include <vector>

#include <arrow/status.h>
#include <libdeflate.h>

#include "record_packing.h"

namespace shardmill {
namespace {

struct FreeDecompressor {
  void operator()(libdeflate_decompressor* d) const { libdeflate_free_decompressor(d); }
};

// One decompressor and one scratch buffer per thread: both are reused from
// chunk to chunk, so the buffer's pages stay mapped.
struct InflateScratch {
  std::unique_ptr<libdeflate_decompressor, FreeDecompressor> decompressor;
  std::vector<uint8_t> buffer;
};

arrow::Result<InflateScratch*> ThreadScratch() {
  thread_local InflateScratch scratch;
  if (!scratch.decompressor) {
    scratch.decompressor.reset(libdeflate_alloc_decompressor());
    if (!scratch.decompressor) return arrow::Status::OutOfMemory("could not allocate a libdeflate decompressor");
  }
  return &scratch;
}

uint32_t LoadLe32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

}  // namespace

arrow::Result<ChunkRecordsResult> PackChunkRecords(const ChunkRecordsSpec& spec, const int64_t* positions,
                                                   int64_t count, uint8_t* out, int64_t* offsets) {
  ChunkRecordsResult result;
  const int64_t expected = spec.num_records * spec.record_size;
  if (spec.compressed_size < 18 || expected <= 0) return result;
  ARROW_ASSIGN_OR_RAISE(InflateScratch * scratch, ThreadScratch());
  if (static_cast<int64_t>(scratch->buffer.size()) < expected) scratch->buffer.resize(expected);
  uint8_t* records = scratch->buffer.data();
  // Member after member (a chunk may be several concatenated gzip members), each in one libdeflate call
  // that checks its CRC-32 and ISIZE, into the buffer of the indexed size: a payload that does not fit
  // is larger than the index says. Bytes after a member that are not another member (padding, garbage)
  // go to the streaming path, which decides what they are.
  size_t in_offset = 0;
  size_t out_offset = 0;
  const size_t in_size = static_cast<size_t>(spec.compressed_size);
  const size_t out_size = static_cast<size_t>(expected);
  while (in_offset < in_size) {
    size_t consumed = 0;
    size_t inflated = 0;
    const libdeflate_result inflate = libdeflate_gzip_decompress_ex(
        scratch->decompressor.get(), spec.compressed + in_offset, in_size - in_offset, records + out_offset,
        out_size - out_offset, &consumed, &inflated);
    if (inflate == LIBDEFLATE_INSUFFICIENT_SPACE) {
      return arrow::Status::Invalid("inflates to more than the index's ", expected, " bytes");
    }
    if (inflate != LIBDEFLATE_SUCCESS) {
      if (in_offset > 0) return result;  // not a member after the first one
      return arrow::Status::Invalid("broken gzip member (bad deflate data, CRC-32 or length)");
    }
    in_offset += consumed;
    out_offset += inflated;
  }
  if (out_offset != out_size) {
    return arrow::Status::Invalid("inflated to ", out_offset, " bytes, the index says ", expected);
  }
  result.fast_path = true;
  for (int64_t r = 0; r < spec.num_records; ++r) {
    if (LoadLe32(records + r * spec.record_size) != spec.version) {
      result.bad_version_record = r;
      return result;
    }
  }
  PackRecords(records, spec.record_size, positions, count, offsets, out);
  return result;
}

}  // namespace shardmill
