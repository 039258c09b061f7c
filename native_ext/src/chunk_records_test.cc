// One lc0 chunk inflated, checked and its planned records scattered to their rows; a wrong version,
// a wrong count and a corrupt stream are reported, never written.
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include <arrow/util/compression.h>
#include <gtest/gtest.h>

#include "chunk_records.h"

namespace {

constexpr int64_t kRecord = 16;

std::vector<uint8_t> Records(int64_t n, uint32_t version) {
  std::vector<uint8_t> raw(static_cast<size_t>(n * kRecord));
  for (int64_t r = 0; r < n; ++r) {
    std::memcpy(raw.data() + r * kRecord, &version, 4);
    for (int64_t b = 4; b < kRecord; ++b) raw[r * kRecord + b] = static_cast<uint8_t>(r * 17 + b);
  }
  return raw;
}

std::vector<uint8_t> Gzip(const std::vector<uint8_t>& raw) {
  auto codec = arrow::util::Codec::Create(arrow::Compression::GZIP);
  EXPECT_TRUE(codec.ok());
  std::vector<uint8_t> out(static_cast<size_t>((*codec)->MaxCompressedLen(raw.size(), raw.data())));
  auto size = (*codec)->Compress(raw.size(), raw.data(), out.size(), out.data());
  EXPECT_TRUE(size.ok());
  out.resize(static_cast<size_t>(*size));
  return out;
}

shardmill::ChunkRecordsSpec Spec(const std::vector<uint8_t>& compressed, int64_t records, uint32_t version) {
  return {compressed.data(), static_cast<int64_t>(compressed.size()), records, kRecord, version};
}

TEST(ChunkRecords, ScattersThePlannedRecordsToTheirRows) {
  const auto raw = Records(10, 6);
  const auto compressed = Gzip(raw);
  const std::vector<int64_t> positions = {3, 0, 9, 3}, rows = {2, 0, 1, 3};  // a record may be used twice
  std::vector<uint8_t> out(4 * kRecord, 0xEE);
  auto result = shardmill::ScatterChunkRecords(Spec(compressed, 10, 6), positions.data(), rows.data(), 4, out.data());
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  ASSERT_TRUE(result->fast_path);
  EXPECT_EQ(result->bad_version_record, -1);
  for (size_t i = 0; i < positions.size(); ++i) {
    EXPECT_EQ(std::memcmp(out.data() + rows[i] * kRecord, raw.data() + positions[i] * kRecord, kRecord), 0) << i;
  }
}

TEST(ChunkRecords, AWrongVersionIsFoundAndNothingIsWritten) {
  auto raw = Records(10, 6);
  const uint32_t other = 5;
  std::memcpy(raw.data() + 7 * kRecord, &other, 4);
  const auto compressed = Gzip(raw);
  const std::vector<int64_t> positions = {0}, rows = {0};
  std::vector<uint8_t> out(kRecord, 0xEE);
  auto result = shardmill::ScatterChunkRecords(Spec(compressed, 10, 6), positions.data(), rows.data(), 1, out.data());
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->bad_version_record, 7);
  EXPECT_EQ(out, std::vector<uint8_t>(kRecord, 0xEE));
}

TEST(ChunkRecords, AWrongCountOrACorruptStreamIsNeverWritten) {
  const auto raw = Records(10, 6);
  const auto compressed = Gzip(raw);
  const std::vector<int64_t> positions = {0}, rows = {0};
  std::vector<uint8_t> out(kRecord, 0xEE);
  // The index said 11 records: the trailer's size disagrees, so the chunk is not taken on the fast path.
  auto miscounted = shardmill::ScatterChunkRecords(Spec(compressed, 11, 6), positions.data(), rows.data(), 1,
                                                   out.data());
  EXPECT_TRUE(!miscounted.ok() || !miscounted->fast_path);
  auto corrupt = compressed;
  corrupt[corrupt.size() - 8] ^= 0xFF;  // the CRC-32 in the gzip trailer
  auto failed = shardmill::ScatterChunkRecords(Spec(corrupt, 10, 6), positions.data(), rows.data(), 1, out.data());
  EXPECT_FALSE(failed.ok());
  EXPECT_EQ(out, std::vector<uint8_t>(kRecord, 0xEE));
}

}  // namespace
