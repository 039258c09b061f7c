// Records packed as runs of repeated words: any bytes round-trip, runs shrink, bad packed input is refused.
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "record_packing.h"

namespace {

std::vector<uint8_t> PackAll(const std::vector<uint8_t>& records, int64_t record_bytes, std::vector<int64_t>* offsets) {
  const int64_t rows = static_cast<int64_t>(records.size()) / record_bytes;
  std::vector<int64_t> order(rows);
  for (int64_t i = 0; i < rows; ++i) order[i] = i;
  offsets->assign(rows + 1, 0);
  std::vector<uint8_t> packed(shardmill::MaxPackedBytes(record_bytes, rows));
  shardmill::PackRecords(records.data(), record_bytes, order.data(), rows, offsets->data(), packed.data());
  packed.resize(offsets->back());
  return packed;
}

std::vector<uint8_t> Records(int64_t rows, int64_t record_bytes, uint32_t seed) {
  std::mt19937 random(seed);
  std::vector<uint8_t> records(rows * record_bytes);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* record = records.data() + r * record_bytes;
    for (int64_t w = 0; w + 4 <= record_bytes; w += 4) {
      // Mostly -1.0f and 0 in runs, some arbitrary words, as lc0 records are.
      const uint32_t kind = random() % 8;
      const uint32_t word = kind < 4 ? 0xBF800000u : kind < 7 ? 0u : static_cast<uint32_t>(random());
      std::memcpy(record + w, &word, 4);
    }
    for (int64_t b = record_bytes / 4 * 4; b < record_bytes; ++b) record[b] = static_cast<uint8_t>(random());
  }
  return records;
}

TEST(RecordPacking, AnyRecordsRoundTripIntoTheirDestinationRows) {
  for (int64_t record_bytes : {1, 3, 4, 7, 64, 8356, 8356 + 3, 4 * 65}) {
    const int64_t rows = 37;
    std::vector<uint8_t> records = Records(rows, record_bytes, static_cast<uint32_t>(record_bytes));
    std::vector<int64_t> offsets;
    std::vector<uint8_t> packed = PackAll(records, record_bytes, &offsets);
    std::vector<int64_t> reversed(rows);
    for (int64_t i = 0; i < rows; ++i) reversed[i] = rows - 1 - i;
    std::vector<uint8_t> out(rows * record_bytes, 0xAA);
    ASSERT_TRUE(shardmill::UnpackRecords(packed.data(), packed.size(), offsets.data(), rows, record_bytes,
                                         reversed.data(), rows, out.data()).ok());
    for (int64_t i = 0; i < rows; ++i) {
      ASSERT_EQ(0, std::memcmp(out.data() + reversed[i] * record_bytes, records.data() + i * record_bytes,
                               record_bytes)) << record_bytes << " bytes, row " << i;
    }
  }
}

TEST(RecordPacking, RunsOfRepeatedWordsShrinkAndRandomBytesGrowByTheBitmapOnly) {
  std::vector<uint8_t> zeros(8356, 0);
  std::vector<int64_t> offsets;
  EXPECT_EQ(PackAll(zeros, 8356, &offsets).size(), shardmill::PackedBitmapBytes(8356));  // every word a repeat
  std::vector<uint8_t> noise(8356);
  std::mt19937 random(1);
  for (auto& b : noise) b = static_cast<uint8_t>(random());
  EXPECT_EQ(PackAll(noise, 8356, &offsets).size(), 8356 + shardmill::PackedBitmapBytes(8356));
}

TEST(RecordPacking, PackedInputThatDisagreesWithItselfIsRefusedNamingTheRecord) {
  const int64_t record_bytes = 64, rows = 3;
  std::vector<uint8_t> records = Records(rows, record_bytes, 5);
  std::vector<int64_t> offsets;
  std::vector<uint8_t> packed = PackAll(records, record_bytes, &offsets);
  std::vector<int64_t> dest = {0, 1, 2};
  std::vector<uint8_t> out(rows * record_bytes);
  auto unpack = [&](const std::vector<uint8_t>& bytes, const std::vector<int64_t>& at, int64_t out_rows) {
    return shardmill::UnpackRecords(bytes.data(), bytes.size(), at.data(), rows, record_bytes, dest.data(),
                                    out_rows, out.data());
  };
  ASSERT_TRUE(unpack(packed, offsets, rows).ok());
  std::vector<int64_t> past_end = offsets;
  past_end[3] += 1;
  EXPECT_NE(unpack(packed, past_end, rows).message().find("packed record 2 spans"), std::string::npos);
  std::vector<uint8_t> flipped = packed;
  flipped[offsets[1]] ^= 1;  // record 1's first bit: its size no longer agrees
  EXPECT_NE(unpack(flipped, offsets, rows).message().find("packed record 1 has"), std::string::npos);
  EXPECT_NE(unpack(packed, offsets, 2).message().find("goes to row 2 of 2"), std::string::npos);
  std::vector<uint8_t> spare(PackAll(std::vector<uint8_t>(4 * 3 * rows, 0), 12, &offsets));  // 3 words: 5 spare bits
  spare[0] |= 0x80;
  std::vector<int64_t> one = {0, 1, 2};
  EXPECT_NE(shardmill::UnpackRecords(spare.data(), spare.size(), offsets.data(), rows, 12, one.data(), rows,
                                     out.data()).message().find("past its last word"), std::string::npos);
}

}  // namespace
