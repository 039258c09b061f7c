#include "chunk_records.h"

#include <cstring>
#include <memory>
#include <vector>

#include <arrow/status.h>
#include <arrow/util/compression.h>

namespace shardmill {
namespace {

// One gzip codec and one scratch buffer per thread: the codec keeps its zlib
// state between chunks and the buffer's pages stay mapped.
struct InflateScratch {
  std::unique_ptr<arrow::util::Codec> codec;
  std::vector<uint8_t> buffer;
};

arrow::Result<InflateScratch*> ThreadScratch() {
  thread_local InflateScratch scratch;
  if (!scratch.codec) {
    ARROW_ASSIGN_OR_RAISE(scratch.codec, arrow::util::Codec::Create(arrow::Compression::GZIP));
  }
  return &scratch;
}

uint32_t LoadLe32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

}  // namespace

arrow::Result<ChunkRecordsResult> ScatterChunkRecords(const ChunkRecordsSpec& spec, const int64_t* positions,
                                                      const int64_t* dest_rows, int64_t count, uint8_t* out) {
  ChunkRecordsResult result;
  const int64_t expected = spec.num_records * spec.record_size;
  // Arrow's one-shot gzip inflate fills the buffer it is given and follows
  // multi-member streams, but does not say whether input was left over. The
  // size is proven when the payload is under 4 GiB (compressed size bound)
  // and the last member's ISIZE alone equals the expected size: then the
  // payload holds at least that many bytes, and exactly that many when the
  // inflate also returns that many. Anything else takes the streaming path.
  if (spec.compressed_size < 18 || spec.compressed_size * kMaxDeflateRatio >= (int64_t{1} << 32) ||
      expected <= 0 || LoadLe32(spec.compressed + spec.compressed_size - 4) != static_cast<uint64_t>(expected)) {
    return result;
  }
  ARROW_ASSIGN_OR_RAISE(InflateScratch * scratch, ThreadScratch());
  if (static_cast<int64_t>(scratch->buffer.size()) < expected) scratch->buffer.resize(expected);
  uint8_t* records = scratch->buffer.data();
  ARROW_ASSIGN_OR_RAISE(int64_t inflated,
                        scratch->codec->Decompress(spec.compressed_size, spec.compressed, expected, records));
  if (inflated != expected) {
    return arrow::Status::Invalid("inflated to ", inflated, " bytes, the index says ", expected);
  }
  result.fast_path = true;
  for (int64_t r = 0; r < spec.num_records; ++r) {
    if (LoadLe32(records + r * spec.record_size) != spec.version) {
      result.bad_version_record = r;
      return result;
    }
  }
  for (int64_t i = 0; i < count; ++i) {
    std::memcpy(out + dest_rows[i] * spec.record_size, records + positions[i] * spec.record_size,
                spec.record_size);
  }
  return result;
}

}  // namespace shardmill
