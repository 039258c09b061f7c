// Rows to their places: narrow rows gathered, wide rows scattered, nothing written outside a rank's rows.
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include <gtest/gtest.h>
#include <arrow/api.h>

#include "row_placement.h"

namespace {

using shardmill::RowLocation;
// Narrow rows (gathered) and wide rows (scattered, streamed where the CPU can).
TEST(RowPlacement, PutsEveryRowInItsPlace) {
  using shardmill::ColumnSpec;
  using shardmill::DecodedGroup;
  const std::vector<ColumnSpec> columns = {{"a", arrow::fixed_size_binary(3), 3}, {"b", arrow::int64(), 8}};
  const std::vector<int64_t> group_rows = {5, 4};
  std::vector<std::shared_ptr<DecodedGroup>> groups;
  for (size_t g = 0; g < group_rows.size(); ++g) {
    auto group = std::make_shared<DecodedGroup>();
    for (const auto& column : columns) {
      auto buffer = arrow::AllocateBuffer(group_rows[g] * column.row_bytes);
      EXPECT_TRUE(buffer.ok());
      uint8_t* data = (*buffer)->mutable_data();
      for (int64_t i = 0; i < group_rows[g] * column.row_bytes; ++i) {
        data[i] = static_cast<uint8_t>(g * 100 + i / column.row_bytes * 7 + i % column.row_bytes + column.row_bytes);
      }
      group->buffers.push_back(std::move(*buffer));
    }
    groups.push_back(std::move(group));
  }
  const std::vector<RowLocation> locations = {{1, 3}, {0, 0}, {0, 4}, {1, 0}, {0, 2}};
  std::vector<std::vector<uint8_t>> dest = {std::vector<uint8_t>(5 * 3), std::vector<uint8_t>(5 * 8)};
  shardmill::GatherRows(groups, columns, locations.data(), 5, {dest[0].data(), dest[1].data()});
  for (size_t c = 0; c < columns.size(); ++c) {
    const int64_t width = columns[c].row_bytes;
    for (size_t j = 0; j < locations.size(); ++j) {
      const uint8_t* want = groups[locations[j].row_group]->buffers[c]->data() + locations[j].row * width;
      EXPECT_TRUE(std::memcmp(dest[c].data() + j * width, want, width) == 0);
    }
  }

  // Scatter: rows of a group at epoch positions 10..17 (shuffled), this rank
  // holding [12, 16); a 300-byte row to a destination not 64-byte aligned.
  const int64_t width = 300, rows = 8, start = 12, span = 4;
  const std::vector<int64_t> positions = {15, 10, 12, 17, 13, 11, 16, 14};
  std::vector<uint8_t> values(rows * width);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<uint8_t>(i * 13 + i / width);
  std::vector<uint8_t> storage(span * width + 64 + 1, 0xEE);
  uint8_t* out = storage.data() + 1;
  shardmill::ScatterRun(positions.data(), start, span, values.data(), rows, width, out);
  shardmill::StreamFence();
  for (int64_t k = 0; k < rows; ++k) {
    const int64_t place = positions[k] - start;
    if (place < 0 || place >= span) continue;
    EXPECT_TRUE(std::memcmp(out + place * width, values.data() + k * width, width) == 0);
  }
  EXPECT_TRUE(storage[0] == 0xEE && storage[span * width + 1] == 0xEE);  // nothing written outside the rank's rows
}

}  // namespace
