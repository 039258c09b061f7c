// One lc0 chunk inflated, checked and its planned records packed (unpacked here to their rows to compare); a
// wrong version, a wrong count and a corrupt stream are reported, never written.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <arrow/util/compression.h>
#include <gtest/gtest.h>

#include "chunk_records.h"
#include "record_packing.h"

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

// PackChunkRecords, then record i unpacked to row rows[i] of `out` when the chunk checked out.
arrow::Result<shardmill::ChunkRecordsResult> ScatterChunkRecords(const shardmill::ChunkRecordsSpec& spec,
                                                                 const int64_t* positions, const int64_t* rows,
                                                                 int64_t count, uint8_t* out) {
  std::vector<uint8_t> packed(shardmill::MaxPackedBytes(spec.record_size, count));
  std::vector<int64_t> offsets(count + 1);
  auto result = shardmill::PackChunkRecords(spec, positions, count, packed.data(), offsets.data());
  if (result.ok() && result->fast_path && result->bad_version_record < 0) {
    const int64_t out_rows = *std::max_element(rows, rows + count) + 1;
    EXPECT_TRUE(shardmill::UnpackRecords(packed.data(), offsets[count], offsets.data(), count, spec.record_size,
                                         rows, out_rows, out).ok());
  }
  return result;
}

TEST(ChunkRecords, PacksThePlannedRecordsInTheirOrder) {
  const auto raw = Records(10, 6);
  const auto compressed = Gzip(raw);
  const std::vector<int64_t> positions = {3, 0, 9, 3}, rows = {2, 0, 1, 3};  // a record may be used twice
  std::vector<uint8_t> out(4 * kRecord, 0xEE);
  auto result = ScatterChunkRecords(Spec(compressed, 10, 6), positions.data(), rows.data(), 4, out.data());
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
  auto result = ScatterChunkRecords(Spec(compressed, 10, 6), positions.data(), rows.data(), 1, out.data());
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->bad_version_record, 7);
  EXPECT_EQ(out, std::vector<uint8_t>(kRecord, 0xEE));
}

TEST(ChunkRecords, AWrongCountOrACorruptStreamIsNeverWritten) {
  const auto raw = Records(10, 6);
  const auto compressed = Gzip(raw);
  const std::vector<int64_t> positions = {0}, rows = {0};
  std::vector<uint8_t> out(kRecord, 0xEE);
  // The index said 11 records, the chunk holds 10.
  auto miscounted = ScatterChunkRecords(Spec(compressed, 11, 6), positions.data(), rows.data(), 1,
                                                   out.data());
  ASSERT_FALSE(miscounted.ok());
  EXPECT_NE(miscounted.status().message().find("the index says"), std::string::npos);
  auto corrupt = compressed;
  corrupt[corrupt.size() - 8] ^= 0xFF;  // the CRC-32 in the gzip trailer
  auto failed = ScatterChunkRecords(Spec(corrupt, 10, 6), positions.data(), rows.data(), 1, out.data());
  EXPECT_FALSE(failed.ok());
  EXPECT_EQ(out, std::vector<uint8_t>(kRecord, 0xEE));
}

TEST(ChunkRecords, SeveralMembersAreInflatedOneAfterAnother) {
  const auto raw = Records(10, 6);
  // Cut inside a record, as lc0 writers may flush: the members only make sense together.
  const std::vector<uint8_t> head(raw.begin(), raw.begin() + 3 * kRecord + 5);
  const std::vector<uint8_t> tail(raw.begin() + 3 * kRecord + 5, raw.end());
  auto chunk = Gzip(head);
  const auto second = Gzip(tail);
  chunk.insert(chunk.end(), second.begin(), second.end());
  const std::vector<int64_t> positions = {3, 9}, rows = {0, 1};
  std::vector<uint8_t> out(2 * kRecord, 0xEE);
  auto result = ScatterChunkRecords(Spec(chunk, 10, 6), positions.data(), rows.data(), 2, out.data());
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  ASSERT_TRUE(result->fast_path);
  EXPECT_EQ(std::memcmp(out.data(), raw.data() + 3 * kRecord, kRecord), 0);
  EXPECT_EQ(std::memcmp(out.data() + kRecord, raw.data() + 9 * kRecord, kRecord), 0);
}

TEST(ChunkRecords, BytesAfterAMemberThatAreNotAMemberTakeTheStreamingPath) {
  const auto raw = Records(10, 6);
  auto chunk = Gzip(raw);
  const std::vector<uint8_t> junk = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  chunk.insert(chunk.end(), junk.begin(), junk.end());
  const std::vector<int64_t> positions = {0}, rows = {0};
  std::vector<uint8_t> out(kRecord, 0xEE);
  auto result = ScatterChunkRecords(Spec(chunk, 10, 6), positions.data(), rows.data(), 1, out.data());
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_FALSE(result->fast_path);
  EXPECT_EQ(out, std::vector<uint8_t>(kRecord, 0xEE));
}

TEST(ChunkRecords, APayloadLargerThanTheIndexSaysIsAnError) {
  const auto raw = Records(12, 6);
  auto chunk = Gzip(Records(3, 6));
  const auto whole = Gzip(raw);  // the last member alone has 12 records, 3 more come before it
  chunk.insert(chunk.end(), whole.begin(), whole.end());
  const std::vector<int64_t> positions = {0}, rows = {0};
  std::vector<uint8_t> out(kRecord, 0xEE);
  auto result = ScatterChunkRecords(Spec(chunk, 12, 6), positions.data(), rows.data(), 1, out.data());
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("more than"), std::string::npos) << result.status().ToString();
  EXPECT_EQ(out, std::vector<uint8_t>(kRecord, 0xEE));
}

TEST(ChunkRecords, DamagedDeflateDataIsAnError) {
  const auto raw = Records(200, 6);
  auto compressed = Gzip(raw);
  for (size_t i = 20; i < compressed.size() - 8; i += 7) compressed[i] ^= 0x5A;
  const std::vector<int64_t> positions = {0}, rows = {0};
  std::vector<uint8_t> out(kRecord, 0xEE);
  auto result = ScatterChunkRecords(Spec(compressed, 200, 6), positions.data(), rows.data(), 1,
                                               out.data());
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(out, std::vector<uint8_t>(kRecord, 0xEE));
}

}  // namespace
